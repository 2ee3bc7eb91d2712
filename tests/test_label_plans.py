"""A call's label plan (relserve/labels/plan.py) and the label memory that keeps it
(relserve/labels/memory.py): made once from a sample of the first rows the call sees, kept per
model and namespace across processes, refreshed or pinned by the user, and the only thing
besides a row's own scores that its answer depends on. Fast: scripted engines
(tests/label_doubles.py), a memory in a temporary folder."""

from __future__ import annotations

import math
import os
import random
import stat

import pytest
from label_doubles import MarginEngine, strong_engine

from relserve.errors import ConfigError
from relserve.functions import make_call
from relserve.labels.layouts import Layout
from relserve.labels.memory import LabelMemory, PlanPinned, use_memory
from relserve.labels.methods import first_pass_requests
from relserve.labels.mixture import Mixture
from relserve.labels.plan import Calibration, LabelPlan, LayoutTrial, Orientation, PlanRule
from relserve.labels.resolution import plan_key, resolve
from relserve.planner.plan_and_run import run_call

FILTER = "Is this news article about athletics? Article: {a}"


def overlapping_engine(seed: int = 5) -> MarginEngine:
    """A small model's margins: one crowd, true rows only a little higher (AUC about 0.8), each
    row's margin fixed by its text (the same row scores the same in any relQuery)."""

    def margin(text: str, rq) -> float:
        rng = random.Random(f"{seed}:{text}:{rq.answer_field}:{rq.choices}")
        return rng.gauss(1.0 if "sports" in text else 0.0, 1.0)

    return MarginEngine(margin)


def table(n: int, share: float, seed: int, start: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"sports story {start + i}" if rng.random() < share else f"other story {start + i}" for i in range(n)]


def plan_of(memory: LabelMemory, call) -> LabelPlan:
    (stored,) = [s for s in memory.plans() if s.key.template == call.template.source]
    return stored.plan


def test_a_plan_is_the_same_plan_after_json_and_its_id_names_what_decides_a_row():
    plan = LabelPlan(
        "adaptive", PlanRule.TWO_CROWDS, ("yes", "no"), layout=Layout(False, "Topic", ("sports", "other")),
        examples="ex\n\n", boundary=0.125, spread=0.5, mixture=Mixture(0.2, -3.0, 1.0, 3.0, 1.5, -1.0, -1.2),
        calibration=None, share=0.2, sample=64,
        trials=(LayoutTrial(Layout(True, "Answer", ("yes", "no")), 0.01, 8, 0.3),),
        orientation=Orientation(0.4, -0.1))
    again = LabelPlan.from_json(plan.to_json())
    assert again == plan and again.id == plan.id
    assert LabelPlan.from_json(plan.to_json()).id != LabelPlan.from_json(
        plan.to_json().replace('"boundary":0.125', '"boundary":0.25')).id


@pytest.mark.parametrize(("margin", "answer"), [(0.126, "yes"), (0.125, "no"), (-9.0, "no"), (math.nan, "no")])
def test_a_row_is_the_first_label_exactly_above_the_boundary(margin, answer):
    plan = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), layout=Layout(False, "Topic", ("sports", "other")),
                     boundary=0.125, calibration=Calibration.CONTENT_FREE)
    a = -math.log1p(math.exp(-margin)) if math.isfinite(margin) else -0.5
    b = -math.log1p(math.exp(margin)) if math.isfinite(margin) else math.nan
    label, confidence = plan.decide({"sports": a, "other": b})
    assert label == answer and 0.5 <= confidence <= 1.0


def test_the_first_plan_kept_wins_a_refresh_replaces_it_and_a_pinned_one_stays(tmp_path):
    memory = LabelMemory(tmp_path / "plans.sqlite")
    key = plan_key(make_call("llm_filter", FILTER), None, "m")
    one = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=1.0)
    two = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=2.0)
    assert memory.keep(key, one).plan == one
    assert memory.keep(key, two).plan == one, "a second process's plan does not replace the first"
    assert memory.keep(key, two, replace=True).plan == two
    memory.pin(key)
    with pytest.raises(PlanPinned, match=r"pinned: unpin it \(the call's label_plan option 'unpin', "
                       r"relserve\.pin_label_plans\(template, unpin => true\) in PostgreSQL, "
                       r"or `relserve plans pin --unpin`\) before refreshing it"):
        memory.keep(key, one, replace=True)
    assert memory.forget(namespace=None) == 0 and memory.plan(key).plan == two, "forgetting all keeps pinned plans"
    assert memory.forget(key, pinned=True) == 1 and memory.plan(key) is None


def test_plans_last_across_processes_in_a_file_only_their_owner_reads_and_namespaces_stay_apart(tmp_path):
    path = tmp_path / "plans.sqlite"
    call = make_call("llm_filter", FILTER)
    plan = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=0.5)
    LabelMemory(path).keep(plan_key(call, "tenant-a", "m"), plan)
    other = LabelMemory(path)  # another process opening the same home
    assert other.plan(plan_key(call, "tenant-a", "m")).plan == plan
    assert other.plan(plan_key(call, "tenant-b", "m")) is None
    assert other.plan(plan_key(call, "tenant-a", "another-model")) is None
    assert [s.key.template for s in other.plans("tenant-a")] == [FILTER] and other.plans("tenant-b") == []
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_call_makes_its_plan_once_and_later_statements_run_no_first_pass():
    eng = strong_engine(lambda text: "sports" in text)
    call = make_call("llm_filter", FILTER)
    rows = table(100, 0.2, 1)
    out = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["sports" in r for r in rows]
    first = len(eng.relqueries)
    assert first > 2, "the first statement scored a first pass before its rows"
    again = run_call(call, [table(30, 0.5, 2, start=1000)], engine=eng, cache=False, progress=False)
    assert len(eng.relqueries) == first + 1, "a kept plan: only the rows' relQuery"
    assert again.values == ["sports" in r for r in table(30, 0.5, 2, start=1000)]


def test_a_rows_answer_is_the_same_whatever_else_is_in_its_table_and_whatever_ran_before(label_memory):
    """Before plans, margins were pooled with every earlier relQuery's and the one-crowd share
    was read from the table at hand: the same rows changed answers with what ran before."""
    eng = overlapping_engine()
    call = make_call("llm_filter", FILTER)
    run_call(call, [table(200, 0.25, 3)], engine=eng, cache=False, progress=False)  # makes the plan
    shared = table(80, 0.25, 4, start=5000)
    alone = run_call(call, [shared], engine=eng, cache=False, progress=False).values
    # the shared rows again, among many more rows that match (a table of another make-up), after
    # other statements ran
    for seed in range(3):
        run_call(call, [table(150, 0.9, 10 + seed, start=9000 + 200 * seed)], engine=eng, cache=False, progress=False)
    mixed = table(120, 0.9, 20, start=20000) + shared
    random.Random(1).shuffle(mixed)
    together = dict(zip(mixed, run_call(call, [mixed], engine=eng, cache=False, progress=False).values))
    assert [together[r] for r in shared] == alone


def test_a_rows_answer_is_the_same_in_another_process_that_reads_the_kept_plan(tmp_path):
    eng = overlapping_engine()
    call = make_call("llm_filter", FILTER)
    use_memory(LabelMemory(tmp_path / "plans.sqlite"))
    run_call(call, [table(200, 0.25, 3)], engine=eng, cache=False, progress=False)
    rows = table(60, 0.5, 7, start=700)
    here = run_call(call, [rows], engine=eng, cache=False, progress=False).values
    use_memory(LabelMemory(tmp_path / "plans.sqlite"))  # a fresh process over the same home
    n = len(eng.relqueries)
    there = run_call(call, [rows], engine=eng, cache=False, progress=False).values
    assert there == here and len(eng.relqueries) == n + 1


def test_refresh_makes_a_new_plan_from_this_statements_rows_and_pin_holds_it(label_memory):
    eng = overlapping_engine()
    call = make_call("llm_filter", FILTER)
    run_call(call, [table(100, 0.1, 1)], engine=eng, cache=False, progress=False)
    before = plan_of(label_memory, call)
    n = len(eng.relqueries)
    refreshed = make_call("llm_filter", FILTER, label_plan="refresh")
    run_call(refreshed, [table(100, 0.9, 2, start=500)], engine=eng, cache=False, progress=False)
    assert len(eng.relqueries) > n + 1, "a refresh runs a first pass"
    after = plan_of(label_memory, call)
    assert after != before and after.sample == 64
    run_call(make_call("llm_filter", FILTER, label_plan="pin"), [table(20, 0.5, 3)], engine=eng, cache=False,
             progress=False)
    assert label_memory.plans()[0].pinned
    with pytest.raises(ConfigError, match="is pinned"):
        run_call(refreshed, [table(50, 0.5, 4)], engine=eng, cache=False, progress=False)
    run_call(make_call("llm_filter", FILTER, label_plan="unpin"), [table(20, 0.5, 3)], engine=eng, cache=False,
             progress=False)
    assert not label_memory.plans()[0].pinned


def test_a_bad_label_plan_option_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^label_plan must be one of auto, refresh, pin, unpin, got 'sometimes'$"):
        make_call("llm_filter", FILTER, label_plan="sometimes")


def test_a_few_rows_keep_a_provisional_plan_that_the_first_statement_of_enough_rows_replaces(label_memory):
    eng = strong_engine(lambda text: "sports" in text)
    call = make_call("llm_filter", FILTER)
    rows = table(10, 0.3, 5)
    assert run_call(call, [rows], engine=eng, cache=False, progress=False).values == ["sports" in r for r in rows]
    small = plan_of(label_memory, call)
    assert small.provisional and "provisional" in small.describe()
    # another small statement decides its rows by that plan: no first pass, one relQuery
    before = len(eng.relqueries)
    other = table(12, 0.3, 6, start=100)
    assert run_call(call, [other], engine=eng, cache=False, progress=False).values == ["sports" in r for r in other]
    assert len(eng.relqueries) == before + 1 and plan_of(label_memory, call).id == small.id
    # the first statement of 16 rows or more makes the plan that replaces it, and keeps it
    rows40 = table(40, 0.3, 7, start=200)
    explained = str(run_call(call, [rows40], engine=eng, cache=False, progress=False, explain_only=True).explain)
    assert "provisional one replaced by this statement (the call's first of enough rows)" in explained
    run_call(call, [rows40], engine=eng, cache=False, progress=False)
    kept = plan_of(label_memory, call)
    assert not kept.provisional and kept.id != small.id and kept.sample == 40
    run_call(call, [table(10, 0.3, 8, start=300)], engine=eng, cache=False, progress=False)
    assert plan_of(label_memory, call).id == kept.id  # a later small statement does not replace it


def test_a_pinned_provisional_plan_is_not_replaced(label_memory):
    eng = strong_engine(lambda text: "sports" in text)
    run_call(make_call("llm_filter", FILTER, label_plan="pin"), [table(10, 0.3, 5)], engine=eng, cache=False,
             progress=False)
    call = make_call("llm_filter", FILTER)
    small = plan_of(label_memory, call)
    assert small.provisional
    run_call(call, [table(40, 0.3, 7, start=200)], engine=eng, cache=False, progress=False)
    assert plan_of(label_memory, call).id == small.id


def test_the_result_cache_keys_answers_by_the_plan_they_were_decided_with(tmp_path, label_memory):
    from relserve.planner.cache import ResultCache

    eng = overlapping_engine()
    cache = ResultCache(tmp_path / "results.sqlite")
    call = make_call("llm_filter", FILTER)
    rows = table(100, 0.3, 8)
    run_call(call, [rows], engine=eng, cache=cache, progress=False)
    n = len(eng.relqueries)
    run_call(call, [rows], engine=eng, cache=cache, progress=False)
    assert len(eng.relqueries) == n, "the kept plan's answers come from the cache"
    run_call(make_call("llm_filter", FILTER, label_plan="refresh"), [rows], engine=eng, cache=cache, progress=False)
    assert len(eng.relqueries) > n + 1, "a refreshed plan's rows are answered anew"


def test_the_planner_resolves_the_method_once_and_the_plan_is_read_from_the_memory(label_memory):
    call = make_call("llm_filter", FILTER)
    none = resolve(call, 100, memory=label_memory, namespace=None, model_id="m")
    assert none.method.value == "adaptive" and none.makes_plan and none.plan is None
    label_memory.keep(none.key, LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=0.3))
    kept = resolve(call, 5, memory=label_memory, namespace=None, model_id="m")
    assert not kept.makes_plan and kept.plan.boundary == 0.3 and first_pass_requests(call, 5, kept) == 0
    assert resolve(call, 5, memory=label_memory, namespace="tenant", model_id="m").makes_plan
    three = make_call("llm_classify", "Which kind? {a}", labels=["x", "y", "z"])
    assert resolve(three, 100, memory=label_memory, namespace=None, model_id="m").method.value == "bootstrap"
    assert resolve(three, 5, memory=label_memory, namespace=None, model_id="m").method.value == "prior"


def test_a_plan_is_kept_per_call_another_method_or_other_labels_of_one_template_make_their_own(label_memory):
    """The memory's key is the call (its template, labels and method), not the template alone: a
    ``batch`` call does not read the plan the ``adaptive`` call made, nor a classify over other
    labels the plan of the same template's other labels."""
    eng = strong_engine(lambda text: "sports" in text)
    rows = table(100, 0.2, 1)
    adaptive = make_call("llm_filter", FILTER)
    run_call(adaptive, [rows], engine=eng, cache=False, progress=False)
    assert [s.plan.method for s in label_memory.plans()] == ["adaptive"]
    batch = make_call("llm_filter", FILTER, method="batch")
    ahead = resolve(batch, 100, memory=label_memory, namespace=None, model_id=eng.model_id)
    assert ahead.plan is None and ahead.makes_plan, "the batch call found the adaptive call's plan"
    out = run_call(batch, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["sports" in r for r in rows]
    assert sorted(s.plan.method for s in label_memory.plans()) == ["adaptive", "batch"]
    # under another system message the model reads the rows otherwise: a plan of its own
    told = make_call("llm_filter", FILTER, system="You are a sports editor.")
    assert resolve(told, 100, memory=label_memory, namespace=None, model_id=eng.model_id).plan is None, \
        "the call under a system message found the plan made without one"
    # one template, two label sets: each its own plan with its own labels
    kinds = "Which kind is this news article? Article: {a}"
    for labels in (["sports", "other"], ["athletics", "rest"]):
        call = make_call("llm_classify", kinds, labels=labels)
        got = resolve(call, 100, memory=label_memory, namespace=None, model_id=eng.model_id)
        assert got.plan is None and got.makes_plan, f"{labels} found a plan of other labels"
        label_memory.keep(got.key, LabelPlan("adaptive", PlanRule.CALIBRATED, tuple(labels), boundary=0.0))
    assert sorted(s.plan.labels for s in label_memory.plans() if s.key.template == kinds) == \
        [("athletics", "rest"), ("sports", "other")]


def test_the_command_line_lists_pins_and_forgets_the_kept_plans(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from relserve.cli import app

    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path))
    use_memory(None)  # the home's own memory, as the command reads it
    eng = strong_engine(lambda text: "sports" in text)
    run_call(make_call("llm_filter", FILTER), [table(100, 0.2, 1)], engine=eng, cache=False, progress=False)
    runner = CliRunner()
    listed = runner.invoke(app, ["plans", "list"])
    assert listed.exit_code == 0 and f"llm_filter({FILTER!r}) [yes/no] model margin-model" in listed.output
    assert "method adaptive, layout " in listed.output
    assert "forgot 0 label plans" in runner.invoke(app, ["plans", "forget", "--template", "Is {x} other?"]).output
    assert "pinned 1 label plan" in runner.invoke(app, ["plans", "pin", FILTER]).output
    assert "(pinned)" in runner.invoke(app, ["plans", "list"]).output
    assert "forgot 0 label plans" in runner.invoke(app, ["plans", "forget"]).output
    assert "forgot 1 label plan" in runner.invoke(app, ["plans", "forget", "--pinned"]).output
    assert "no label plans kept" in runner.invoke(app, ["plans", "list"]).output


@pytest.mark.parametrize("on_file", [True, False])
def test_a_namespace_pins_at_most_max_pinned_plans_and_another_namespace_is_not_held_back(tmp_path, monkeypatch, on_file):
    """Pinned plans are never evicted, so a tenant pinning plan after plan would grow the server's
    file without bound (an audit, 7 Dec): a pin past ``MAX_PINNED`` is refused, naming the way out."""
    from relserve.labels import memory as memory_module
    from relserve.labels.memory import TooManyPinned

    monkeypatch.setattr(memory_module, "MAX_PINNED", 3)
    memory = LabelMemory(tmp_path / "plans.sqlite" if on_file else None)
    plan = LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=1.0)
    keys = [plan_key(make_call("llm_filter", f"Q{i}: is {{x}} about tea?"), "tenant-a", "m") for i in range(5)]
    for key in keys[:3]:
        assert memory.keep(key, plan, pin=True).pinned
    refusal = r"cannot pin the label plan of llm_filter\('Q3: is \{x\} about tea\?'\): 3 plans are pinned here already"
    with pytest.raises(TooManyPinned, match=refusal):
        memory.keep(keys[3], plan, pin=True)
    assert memory.plan(keys[3]) is None  # nothing kept
    assert not memory.keep(keys[3], plan).pinned  # kept unpinned it is
    with pytest.raises(TooManyPinned, match=refusal):
        memory.pin(keys[3])
    # another tenant's namespace has its own room
    assert memory.keep(plan_key(make_call("llm_filter", "Q0: is {x} about tea?"), "tenant-b", "m"), plan, pin=True).pinned
    memory.pin(keys[0], False)
    assert memory.pin(keys[3]).pinned
    assert sorted(s.key.template for s in memory.plans("tenant-a") if s.pinned) == [
        "Q1: is {x} about tea?", "Q2: is {x} about tea?", "Q3: is {x} about tea?"]
