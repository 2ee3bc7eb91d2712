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
