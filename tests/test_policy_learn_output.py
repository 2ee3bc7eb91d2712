"""Output lengths that learn (issue 28 item 2): a relQuery's answer length estimated from the
answers its finished rows gave instead of max_tokens (policy/relqueries.py)."""

from __future__ import annotations

from relserve.policy import Limits, PolicySettings, Req, StepView, make_policy
from relserve.policy.relqueries import RelQueryTracker

LIMITS = Limits(max_num_batched_tokens=1000, max_num_seqs=64, kv_capacity_tokens=100_000, kv_free_tokens=100_000)


def rows(n: int, start: int = 0) -> list[Req]:
    return [Req(f"a{i}", "A", 0.0, 6, 20, 50) for i in range(start, start + n)]


def step(tracker: RelQueryTracker, waiting, running, out: int):
    for r in running:
        r.computed_tokens, r.output_tokens = r.prompt_tokens, out
    return tracker.group(StepView(1.0, list(waiting), list(running), LIMITS))["A"]


def test_the_estimate_is_max_tokens_until_a_row_finishes_then_the_longest_answer_seen():
    t = RelQueryTracker(learn_output=True)
    run, wait = rows(4), rows(2, start=4)
    g = step(t, wait, run, out=2)
    assert (g.output_len, g.remaining_output_len) == (50, 48)
    # a0 and a1 finished in the step after they showed 2 tokens: answers of 3 tokens
    g = step(t, wait, run[2:], out=3)
    assert t.output_estimate("A") == 3
    # waiting rows: 3 tokens; running rows already at 3 have at least one more to go
    assert (g.output_len, g.remaining_output_len, g.remaining_output_total) == (3, 1, 2)
    # a running row that goes on raises the estimate
    g = step(t, wait, run[2:], out=7)
    assert (t.output_estimate("A"), g.output_len) == (7, 7)


def test_a_row_admitted_and_answered_in_one_step_counts_one_token():
    t = RelQueryTracker(learn_output=True)
    step(t, rows(2), [], out=0)
    g = step(t, rows(1, start=1), [], out=0)
    assert (t.output_estimate("A"), g.output_len) == (1, 1)


def test_without_learning_the_estimate_stays_max_tokens():
    t = RelQueryTracker()
    run = rows(4)
    step(t, [], run, out=2)
    g = step(t, rows(2, start=4), run[2:], out=3)
    assert t.output_estimate("A") is None and g.output_len == 50


def test_the_policy_uses_the_learned_length_in_its_priority():
    on = make_policy("relserve", settings=PolicySettings(learn_output=True))
    off = make_policy("relserve")
    run = rows(4)
    prios = []
    for pol in (on, off):
        for r in run:
            r.computed_tokens, r.output_tokens = 20, 2
        pol.schedule(StepView(1.0, rows(2, start=4), run, LIMITS))
        for r in run[2:]:
            r.output_tokens = 3
        plan = pol.schedule(StepView(1.1, rows(2, start=4), run[2:], LIMITS))
        prios.append(plan.priorities["A"])
    # 2 waiting rows decoding 3 tokens instead of 50: a smaller remaining time
    assert prios[0] < prios[1]


# -- output_history: the answer length of a call's earlier relQueries --------------------------


def call_rows(rel: str, n: int, call: str = "k", max_tokens: int = 50, tenant: str = "") -> list[Req]:
    return [Req(f"{rel}{i}", rel, 0.0, n, 20, max_tokens, tenant=tenant, call_key=call) for i in range(n)]


def finish(tracker: RelQueryTracker, reqs: list[Req], answer: int) -> None:
    """Run ``reqs`` to an answer of ``answer`` tokens each: one step decoding, one with them gone."""
    for r in reqs:
        r.computed_tokens, r.output_tokens = r.prompt_tokens, answer - 1
    tracker.group(StepView(1.0, [], list(reqs), LIMITS))
    tracker.group(StepView(1.1, [], [], LIMITS))


def test_a_calls_next_relquery_is_estimated_by_the_longest_answer_its_earlier_one_gave():
    t = RelQueryTracker(output_history=True)
    first = call_rows("A", 3)
    for r, out in zip(first, (2, 5, 3)):
        r.computed_tokens, r.output_tokens = 20, out
    t.group(StepView(1.0, [], first, LIMITS))
    t.group(StepView(1.1, [], [], LIMITS))
    assert t.call_estimate("k") == 6
    # before any of its rows has run: 6 tokens, not 50; another call keeps max_tokens
    groups = t.group(StepView(1.2, call_rows("B", 4) + call_rows("C", 2, call="other"), [], LIMITS))
    assert (groups["B"].output_len, groups["C"].output_len) == (6, 50)


def test_a_longer_answer_of_the_relquery_itself_raises_the_estimate():
    t = RelQueryTracker(output_history=True)
    finish(t, call_rows("A", 2), answer=4)
    b = call_rows("B", 3)
    b[0].computed_tokens, b[0].output_tokens = 20, 9
    g = t.group(StepView(1.2, b[1:], b[:1], LIMITS))["B"]
    # the running row has 9 tokens and at least one to go; the waiting rows are estimated at 9
    assert (g.output_len, g.remaining_output_len) == (9, 1)


def test_the_history_keeps_the_calls_last_eight_relqueries():
    t = RelQueryTracker(output_history=True)
    finish(t, call_rows("long", 1), answer=30)
    for i in range(7):
        finish(t, call_rows(f"short{i}", 1), answer=3)
    assert t.call_estimate("k") == 30
    finish(t, call_rows("short7", 1), answer=3)
    assert t.call_estimate("k") == 3


def test_another_tenants_long_answers_do_not_move_a_tenants_estimate_of_the_same_call():
    # mallory runs the same template as alice and answers at length: alice's relQueries of that
    # call must keep her own history, not rank as long (and behind) because of mallory's
    t = RelQueryTracker(output_history=True)
    finish(t, call_rows("alice1", 2, tenant="alice"), answer=3)
    finish(t, call_rows("mallory1", 2, tenant="mallory"), answer=40)
    g = t.group(StepView(1.2, call_rows("alice2", 2, tenant="alice"), [], LIMITS))["alice2"]
    assert g.output_len == 3
    assert (t.call_estimate("k", tenant="alice"), t.call_estimate("k", tenant="mallory")) == (3, 40)


def test_without_output_history_a_calls_next_relquery_keeps_max_tokens():
    t = RelQueryTracker()
    finish(t, call_rows("A", 2), answer=4)
    assert t.call_estimate("k") is None
    assert t.group(StepView(1.2, call_rows("B", 2), [], LIMITS))["B"].output_len == 50


def test_the_policy_ranks_a_relquery_by_its_calls_history():
    prios = []
    for settings in (PolicySettings(output_history=True), PolicySettings()):
        pol = make_policy("relserve", settings=settings)
        first = call_rows("A", 2)
        for r in first:
            r.computed_tokens, r.output_tokens = 20, 2
        pol.schedule(StepView(1.0, [], first, LIMITS))
        pol.schedule(StepView(1.1, [], [], LIMITS))
        plan = pol.schedule(StepView(1.2, call_rows("B", 4), [], LIMITS))
        prios.append(plan.priorities["B"])
    # 4 rows decoding 3 tokens instead of 50: a smaller remaining time
    assert prios[0] < prios[1]
