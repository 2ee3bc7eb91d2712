"""Bootstrapped examples (``method := 'bootstrap'``, issue 22): the pure parts with hand-worked
numbers, and the executor's two passes on the scripted engine. The real engine's run is in
tests/test_label_scoring_engine.py."""

from __future__ import annotations

import math

from engine_doubles import ScriptedEngine, TenantAwareEngine
from waits import result_within

from relserve.functions import make_call
from relserve.labels.batch import sample_indices
from relserve.labels.bootstrap import PER_LABEL, choose, examples_text, sample_rows
from relserve.labels.memory import forget_all
from relserve.labels.resolution import method_ran
from relserve.planner.plan_and_run import run_call


def lp(p_yes: float) -> dict[str, float]:
    return {"yes": math.log(p_yes), "no": math.log(1 - p_yes)}


def test_the_sample_spreads_over_the_relquery_and_takes_all_of_a_small_one():
    assert sample_indices(5, 8) == [0, 1, 2, 3, 4]
    assert sample_indices(100, 4) == [0, 25, 50, 75]
    assert sample_indices(10, 4) == [0, 2, 5, 7]
    assert len(sample_indices(1000, 16)) == 16
    # a filter's first pass samples 32 prompts, a classify's 16 (docs/quality.md, "Thirteenth pass")
    assert (sample_rows("filter"), sample_rows("classify")) == (32, 16)
    # of a small classify, half its prompts, at least 8; a filter samples all of a small one
    # (docs/quality.md, "Fourteenth pass")
    assert [sample_rows("classify", n) for n in (5, 16, 20, 31, 32, 33, 1000)] == [5, 8, 10, 16, 16, 16, 16]
    assert [sample_rows("filter", n) for n in (5, 16, 20, 50, 1000)] == [5, 16, 20, 32, 32]


def test_choose_takes_the_surest_rows_of_each_label_after_the_batch_correction():
    # every row leans "no" in the raw scores; after subtracting the means rows 0 and 3 are the
    # surest yes (largest calibrated margin), rows 4 and 1 the surest no
    prompts = ["a", "b", "c", "d", "e"]
    scores = [(0, lp(0.6)), (1, lp(0.1)), (2, lp(0.3)), (3, lp(0.5)), (4, lp(0.05))]
    picked = choose(scores, prompts, per_label=2)
    # interleaved by rank: the surest yes, the surest no, then the second of each
    assert picked == [(0, "yes"), (4, "no"), (3, "yes"), (1, "no")]
    # one per label
    assert choose(scores, prompts, per_label=1) == [(0, "yes"), (4, "no")]


def test_choose_skips_long_prompts_and_a_label_no_row_got():
    prompts = ["x" * 50, "b", "c"]
    scores = [(0, lp(0.9)), (1, lp(0.8)), (2, lp(0.1))]
    # prompt 0 is the surest yes but longer than max_chars: the next surest yes is taken
    assert choose(scores, prompts, per_label=1, max_chars=10) == [(1, "yes"), (2, "no")]
    # every row picks yes after the correction only if scores are equal: a label no row got has
    # no example (and the other labels keep theirs)
    same = [(0, lp(0.7)), (1, lp(0.7))]
    assert choose(same, ["a", "b"], per_label=2) == [(0, "yes"), (1, "yes")]
    assert choose([], prompts) == []


def test_the_examples_are_each_prompt_then_its_answer():
    assert examples_text(["Review: good\nHappy?", "Review: bad\nHappy?"], [(1, "no"), (0, "yes")]) == (
        "Review: bad\nHappy?\nAnswer: no\n\nReview: good\nHappy?\nAnswer: yes\n\n"
    )


def test_method_ran_for_bootstrap():
    assert method_ran("bootstrap", 16) == "bootstrap"
    assert method_ran("bootstrap", 15) == "prior"
    assert method_ran("bootstrap", 40, examples=True) == "batch"
    assert method_ran("batch", 40, examples=True) == "batch"


def test_the_executor_scores_a_sample_first_then_every_row_behind_the_examples(label_memory):
    rows = [f"review {i} {'great' if i % 3 == 0 else 'bad'}" for i in range(40)]

    def answer(prompt, rq):
        # the scripted engine answers by the row's own words (the last line of the prompt)
        return "yes" if "great" in prompt.rsplit("\n", 1)[-1] else "no"

    eng = ScriptedEngine(answer=answer)
    call = make_call("llm_filter", "Is {r} good, bootstrapped?", method="bootstrap")
    out = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["great" in r for r in rows]
    first, behind = eng.first_passes
    (rest,) = eng.submitted
    # the first pass: 32 prompts spread over the 40, no examples in front
    assert len(first) == 32 and all(p.startswith("Is review") for p in first)
    # the scripted scores tie within a label, so the surest are the sample's first prompts of
    # each label, PER_LABEL of them, interleaved yes, no, yes, no ...
    yes = [p for p in first if "great" in p]
    no = [p for p in first if "great" not in p]
    prefix = "".join(f"{yes[k]}\nAnswer: yes\n\n{no[k]}\nAnswer: no\n\n" for k in range(PER_LABEL))
    assert prefix.count("\nAnswer: ") == 2 * PER_LABEL
    # the plan's means: the same sample behind the examples; then the other 8 rows behind them
    assert behind == [prefix + p for p in first]
    assert len(rest) == 8 and all(p.startswith(prefix) for p in rest)
    assert sorted(p[len(prefix):] for p in behind + rest) == sorted(f"Is {r} good, bootstrapped?" for r in rows)
    # below the minimum row count, once the call has its plan: behind the same examples, no first
    # pass, no content-free probes
    eng.submitted.clear()
    out = run_call(call, [rows[:10]], engine=eng, cache=False, progress=False)
    assert out.values == ["great" in r for r in rows[:10]]
    assert len(eng.first_passes) == 2 and eng.probes == [] and all(p.startswith(prefix) for p in eng.submitted[0])
    # with no plan it runs as prior: content-free probes, then the rows
    forget_all()
    eng2 = ScriptedEngine(answer=answer)
    run_call(call, [rows[:10]], engine=eng2, cache=False, progress=False)
    assert len(eng2.submitted) == 1 and len(eng2.probes) == 1 and eng2.first_passes == []


def test_a_classify_scores_half_of_a_small_relquery_first_and_the_rest_behind_the_examples():
    """A classify's first pass scores half of a small relQuery; the same half is scored behind the
    examples (the plan's means, and those rows' answers), then the other half."""
    rows = [f"review {i} {'great' if i % 3 == 0 else 'bad'}" for i in range(20)]

    def answer(prompt, rq):
        return "yes" if "great" in prompt.rsplit("\n", 1)[-1] else "no"

    eng = ScriptedEngine(answer=answer)
    call = make_call("llm_classify", "Is {r} good, as a label?", labels=["yes", "no"], prompt_shape="completion", method="bootstrap")
    out = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["yes" if "great" in r else "no" for r in rows]
    first, behind = eng.first_passes
    (rest,) = eng.submitted
    assert len(first) == 10 and set(first) <= {f"Is {r} good, as a label?" for r in rows}
    examples = behind[0][: behind[0].rindex("\n\n") + 2]
    assert examples.count("\nAnswer: ") == 2 * PER_LABEL
    assert len(behind) == 10 and len(rest) == 10
    assert {p[len(examples):] for p in behind + rest} == {f"Is {r} good, as a label?" for r in rows}


def test_explain_names_bootstrap_and_when_the_users_examples_replace_it():
    call = make_call("llm_filter", "Is this review positive? Review: {r}", method="bootstrap")
    rows = [f"review number {i}, long enough to move in front" for i in range(16)]
    ex = str(run_call(call, [rows], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert ("  label method           bootstrap   (1 worked example per label the model labelled itself in front of "
            "every row, then label scores minus their means behind them (the plan))") in ex
    assert ("  label plan            none kept yet: a first pass over a spread sample of up to 32 rows chooses the "
            "worked examples, and the same sample behind them gives the label means") in ex
    given = make_call("llm_filter", "Is this review positive? Review: {r}", method="bootstrap",
                      examples=[{"r": "great", "answer": "yes"}, {"r": "awful", "answer": "no"}])
    ex = str(run_call(given, [rows], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert ("label method               batch   (label scores minus their means over a sample of the call's rows "
            "(the plan); asked for bootstrap)") in ex


def test_the_result_cache_keys_on_bootstrap():
    a = make_call("llm_filter", "Is {r} good?", method="batch").sampling_settings()
    b = make_call("llm_filter", "Is {r} good?", method="bootstrap").sampling_settings()
    assert a["method"] == "batch" and b["method"] == "bootstrap" and b["template"] == "Is {r} good?"


def test_a_tenants_first_pass_runs_in_its_own_prefix_cache_namespace():
    # as a tenant of the shared server: the job's executor gets the tenant's view of the engine
    # (server/jobs.py), and the first pass, which puts other rows of the tenant's table into the
    # prompts, must reach the engine salted like the rows, or another tenant could probe them
    from relserve.planner.executor import CallExecutor
    from relserve.planner.plan import plan_call
    from relserve.planner.planned_rows import PlannedRows
    from relserve.policy.types import Tenancy
    from relserve.server.tenant_engine import engine_for_tenant

    class TenantAwareEngine(ScriptedEngine):
        supports_tenancy = True

        def __init__(self) -> None:
            super().__init__()
            self.tenancies: list[Tenancy | None] = []

        def submit(self, rq, tenancy=None):
            self.tenancies.append(tenancy)
            return super().submit(rq)

    alice = Tenancy("alice", cache_salt="salt-of-alice")
    eng = TenantAwareEngine()
    call = make_call("llm_filter", "Is {r} good, as alice?", method="bootstrap")
    plan = plan_call(call, [[f"row {i}" for i in range(20)]], model_id="m", cache=None, optimize=False)
    ex = CallExecutor(PlannedRows.of(plan, None), model_id="m")
    result_within(ex.submit(engine_for_tenant(eng, alice)), 60, "alice's 20-row filter on the double")
    # the first pass, its sample behind the examples (which answers every row of so small a relQuery)
    assert ex.resolution.method == "bootstrap" and len(eng.first_passes) == 2 and eng.submitted == []
    assert eng.tenancies == [alice, alice]


def test_a_later_relquery_of_the_template_reuses_the_examples_within_its_namespace():
    """The examples are chosen once per call, like the content-free prior: the next relQuery of
    the same template runs no first pass. They hold rows of the relQuery that chose them, so
    another tenant (another prefix-cache namespace) chooses its own, from its own rows."""
    from relserve.policy.types import Tenancy
    from relserve.server.tenant_engine import engine_for_tenant

    def answer(prompt, rq):
        return "yes" if "great" in prompt.rsplit("\n", 1)[-1] else "no"

    eng = TenantAwareEngine(answer=answer)
    call = make_call("llm_filter", "Is {r} good, again?", method="bootstrap")
    alice_rows = [f"alice review {i} {'great' if i % 2 else 'bad'}" for i in range(20)]
    bob_rows = [f"bob review {i} {'great' if i % 2 else 'bad'}" for i in range(20)]
    alice = engine_for_tenant(eng, Tenancy("alice", cache_salt="salt-a"))
    alice_again = engine_for_tenant(eng, Tenancy("alice", cache_salt="salt-a"))
    bob = engine_for_tenant(eng, Tenancy("bob", cache_salt="salt-b"))
    run_call(call, [alice_rows], engine=alice, cache=False, progress=False)
    first_examples = eng.first_passes[1][0][: eng.first_passes[1][0].rindex("\n\n") + 2]
    run_call(call, [alice_rows[::-1]], engine=alice_again, cache=False, progress=False)
    assert len(eng.first_passes) == 2 and len(eng.submitted) == 1
    assert first_examples and all(p.startswith(first_examples) for p in eng.submitted[0])
    run_call(call, [bob_rows], engine=bob, cache=False, progress=False)
    assert len(eng.first_passes) == 4
    # bob's prompts carry examples from bob's rows only
    bob_examples = eng.first_passes[3][0][: eng.first_passes[3][0].rindex("\n\n") + 2]
    assert "alice" not in bob_examples and bob_examples.count("bob review") == 2
    # another call (other labels' question) chooses its own
    run_call(make_call("llm_filter", "Is {r} bad, again?", method="bootstrap"), [alice_rows], engine=alice, cache=False, progress=False)
    assert len(eng.first_passes) == 6


def test_a_two_label_classify_is_laid_out_question_first_when_examples_pick_its_labels():
    """The prompt shape follows the label method that runs (docs/quality.md, "Tenth pass"): a
    2-label llm_classify of 16 prompts or more, or one whose examples are already chosen in its
    namespace, is scored question first behind the examples; below 16 prompts with no history
    the content-free prior decides, in the completion shape (under question_first that prior
    gives one label to almost every row)."""
    from relserve.planner.plan import plan_call
    from relserve.policy.types import Tenancy
    from relserve.server.tenant_engine import engine_for_tenant

    def answer(prompt, rq):
        return "positive" if "great" in prompt else "negative"

    forget_all()
    rows = [f"a review that runs long enough to move out, number {i}: {'great' if i % 2 else 'awful'}" for i in range(20)]
    call = make_call("llm_classify", "Is this review positive or negative? Review: {r}", labels=["positive", "negative"], method="bootstrap")
    # planned alone: the layout is in the plan's call, its prompts, and its result-cache key
    big = plan_call(call, [rows], model_id="m")
    small = plan_call(call, [rows[:6]], model_id="m")
    assert big.call.prompt_shape == "question_first" and small.call.prompt_shape == "completion"
    assert big.prompts[0] == f"Question: Is this review positive or negative?\nReview: {rows[0]}"
    assert small.prompts[0] == f"Review: {rows[0]}\nIs this review positive or negative?"
    assert big.call.sampling_settings()["prompt_shape"] == "question_first"
    assert big.shape_chosen and not small.shape_chosen
    shown = str(run_call(call, [rows], cache=False, progress=False, explain_only=True, engine=ScriptedEngine()).explain)
    assert "prompt shape          question_first   (how the scoring request is laid out; chosen for a 2-label classify" in shown
    # not relserve's to choose: the user's shape, a filter, three labels, another method
    assert plan_call(make_call("llm_classify", call.template, labels=["positive", "negative"], prompt_shape="completion", method="bootstrap"),
                     [rows], model_id="m").call.prompt_shape == "completion"
    assert plan_call(make_call("llm_filter", "Is this review positive? Review: {r}", method="bootstrap"), [rows], model_id="m").call.prompt_shape == "completion"
    assert plan_call(make_call("llm_classify", call.template, labels=["positive", "negative", "mixed"], method="bootstrap"),
                     [rows], model_id="m").call.prompt_shape == "completion"
    assert plan_call(make_call("llm_classify", call.template, labels=["positive", "negative"], method="batch"),
                     [rows], model_id="m").call.prompt_shape == "completion"

    eng = TenantAwareEngine(answer=answer)
    alice = engine_for_tenant(eng, Tenancy("alice", cache_salt="salt-a"))
    out = run_call(call, [rows], engine=alice, cache=False, progress=False)
    assert out.values == ["positive" if i % 2 else "negative" for i in range(20)]
    first, behind = eng.first_passes
    assert all(p.startswith("Question: ") for p in first)
    assert all(p.rsplit("\n\n", 1)[-1].startswith("Question: ") for p in behind + eng.submitted[0])
    # alice's next 6-row statement: her plan's examples, question first, no probes
    run_call(call, [rows[:6]], engine=engine_for_tenant(eng, Tenancy("alice", cache_salt="salt-a")), cache=False, progress=False)
    assert eng.probes == [] and all(p.rsplit("\n\n", 1)[-1].startswith("Question: ") for p in eng.submitted[1])
    assert eng.submitted[1][0].count("\nAnswer: ") == 2
    # bob's first 6-row statement of the same template: alice's plan decides nothing for him
    run_call(call, [rows[:6]], engine=engine_for_tenant(eng, Tenancy("bob", cache_salt="salt-b")), cache=False, progress=False)
    assert len(eng.probes) == 1 and all(p.startswith("Review: ") for p in eng.submitted[2])
