"""A tenant's per-request and per-day token limits at their edges (relserve/server/budget.py): a
request of exactly the limit fits, one token more does not. The server's tests send requests far
over or under a limit; these pin the comparison itself (scripts/mutation_check.py: a check that
let a request through up to 1,000 tokens over the day's rest, or up to twice the tokens in
flight, survived them). Fast: no engine, no server."""

from __future__ import annotations

import pytest

from relserve.server.budget import Cost, DailyBudgetExceeded, DayBudgets, RequestTooLarge, check_request
from relserve.server.tenants import Limits, Tenant


def tenant(**limits) -> Tenant:
    return Tenant("acme", Limits(**limits))


@pytest.mark.parametrize("tokens", [1000, 999])
def test_a_request_of_at_most_the_tokens_in_flight_fits(tokens):
    assert check_request(Cost(rows=10, chars=300, tokens=tokens), tenant(max_tokens_in_flight=1000)) is None


@pytest.mark.parametrize("tokens", [1001, 1999])
def test_a_request_over_the_tokens_in_flight_is_too_large_naming_both_figures(tokens):
    with pytest.raises(RequestTooLarge, match=rf"^request too large: {tokens} tokens \(prompts, estimated at 3 characters "
                                              r"per token, plus max_tokens per row, 10 rows\); the limit "
                                              r"max_tokens_in_flight is 1000\."):
        check_request(Cost(rows=10, chars=300, tokens=tokens), tenant(max_tokens_in_flight=1000))


def test_a_request_that_may_spend_exactly_what_is_left_of_the_day_runs_and_one_token_more_is_refused():
    days, t = DayBudgets(), tenant(max_tokens_per_day=5000)
    allowance = days.check(t, 5000, "refuse")
    assert allowance is not None and allowance.left() == 5000
    allowance.charge(1200)
    assert days.check(t, 3800, "refuse") is allowance
    for over in (3801, 4500):
        with pytest.raises(DailyBudgetExceeded, match=rf"^tenant 'acme': refused before starting: this request may spend "
                                                      rf"{over:,} engine tokens .* and 3,800 of the tenant's "
                                                      r"max_tokens_per_day 5,000 are left today \(UTC\)\.") as refused:
            days.check(t, over, "refuse")
        assert 1 <= refused.value.retry_after_s <= 24 * 3600 + 1
    # 'partial' answers the rows that fit: never refused up front
    assert days.check(t, 10_000, "partial") is allowance
    # no daily limit: no allowance to spend from
    assert DayBudgets().check(tenant(), 10**9, "refuse") is None
