"""Estimates and budgets (issue 47), the parts that need no engine: the replay of chained stages,
the queue snapshot, the allowance a budget holds, the checks of budget settings, and the cost
model EXPLAIN uses before an engine starts (the stored calibration of this machine)."""

from __future__ import annotations

import json

import duckdb
import pytest
from waits import StillWaiting

import relserve.duckdb
from relserve import answer_lengths
from relserve.block_hashes import block_hashes
from relserve.budget import Allowance, Budget, refusal
from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.engine.settings import EngineSettings
from relserve.errors import ConfigError
from relserve.estimate import selectivity
from relserve.estimate.call_work import RelQueryWork
from relserve.estimate.snapshot import background_of, resumed
from relserve.estimate.timing import Chain, Machine, replay
from relserve.functions import make_call
from relserve.policy import CostModel, Limits, PolicySettings

COST = CostModel(alpha_p=1e-3, beta_p=0.05, alpha_d=1e-3, beta_d=0.05, source="test")
MACHINE = Machine("relserve", PolicySettings(), COST, Limits(1024, 64, 65_536, 65_536, 16))


def rows_work(rows: int, prompt: int = 64, answer: int = 8, first_token: int = 1) -> RelQueryWork:
    """``rows`` distinct prompts of ``prompt`` tokens answering ``answer`` tokens each."""
    ids = [[first_token * 100_000 + r * 1000 + t for t in range(prompt)] for r in range(rows)]
    return RelQueryWork("rows", ids, [()], [answer] * rows, answer)


def test_a_stage_starts_when_the_one_before_ends_and_a_chain_after_the_chains_it_waits_for():
    first, second = [rows_work(4)], [rows_work(4, first_token=2)]
    alone = replay([Chain("a", [first])], MACHINE).chains["a"].seconds
    two = replay([Chain("a", [first, second], [0.0, 0.5])], MACHINE).chains["a"]
    # the second stage runs as long alone as the first (same sizes), after the first and the gap
    assert two.stage_ends[0] == pytest.approx(alone)
    assert two.stage_ends[1] == pytest.approx(2 * alone + 0.5, rel=1e-6)
    both = replay([Chain("a", [first]), Chain("b", [second], [0.25], after=("a",))], MACHINE).chains
    assert both["b"].seconds == pytest.approx(both["a"].seconds + 0.25 + alone, rel=1e-6)


def test_behind_a_queue_takes_longer_than_alone_and_more_rows_take_longer():
    small, big = replay([Chain("c", [[rows_work(4)]])], MACHINE), replay([Chain("c", [[rows_work(40)]])], MACHINE)
    assert big.chains["c"].seconds > small.chains["c"].seconds > 0
    queued = [QueuedRelQuery("other", arrival=99.0, max_tokens=32, requests=[QueuedRequest(list(range(5000 + r * 50, 5000 + r * 50 + 50)))
                                                                            for r in range(30)])]
    behind = background_of(queued, now=100.0, block_size=16, answer_tokens=lambda q, n: None)
    assert behind.requests == 30 and behind.relqueries[0].arrival == pytest.approx(-1.0)
    # the replay runs the engine's own policy: RelServe puts the 4-row relQuery ahead of the 30-row
    # one already waiting (its remaining time is shorter), first-come first-served puts it behind
    ahead = replay([Chain("c", [[rows_work(4)]])], MACHINE, behind)
    assert ahead.chains["c"].seconds == pytest.approx(small.chains["c"].seconds)
    fcfs = Machine("fcfs", PolicySettings(), COST, MACHINE.limits)
    alone = replay([Chain("c", [[rows_work(4)]])], fcfs).chains["c"].seconds
    behind_fcfs = replay([Chain("c", [[rows_work(4)]])], fcfs, behind).chains["c"].seconds
    assert behind_fcfs > alone + 0.5


def test_a_running_request_resumes_after_what_it_computed_and_answered():
    ids = list(range(100))
    queued = [QueuedRelQuery("r", 0.0, max_tokens=20, call_key="k",
                             requests=[QueuedRequest(ids, computed=100, generated=5, running=True), QueuedRequest(ids[:40])])]
    b = background_of(queued, now=1.0, block_size=16, answer_tokens=lambda q, n: [12] * n)
    q = b.relqueries[0]
    # what it answered is part of its context now; 12 expected answer tokens, 5 given: 7 to go
    assert q.prompt_tokens == (105, 40) and q.output_tokens == (7, 12)
    assert b.cached == [q.hashes[0][:6]]  # its 6 full blocks of 16 are in the cache; the waiting one has none


def test_a_decoding_request_resumes_from_its_last_whole_block_with_its_answer_cached():
    prompt = list(range(100))
    decoding = QueuedRequest(prompt, computed=139, generated=40, running=True)  # all but its newest token
    length, hashes, cached = resumed(decoding, 0, 16)
    # 139 tokens computed: 8 whole blocks (6 of the prompt, 2 of prompt tail and answer), cached;
    # the replay computes one token from there, as the engine's next decode step does
    assert (length, cached) == (8 * 16 + 1, 8)
    assert hashes[:6] == block_hashes(prompt, 16) and len(hashes) == 8
    again, other = resumed(decoding, 0, 16)[1], resumed(decoding, 1, 16)[1]
    assert again == hashes and set(other[6:]).isdisjoint(hashes[6:])  # the same each time, each request's own
    # still (re)computing its prompt and answer: the rest of it is computed, after its whole blocks
    assert resumed(QueuedRequest(prompt, computed=70, generated=40, running=True), 0, 16)[::2] == (140, 4)
    assert resumed(QueuedRequest(prompt, computed=0, generated=3), 0, 16)[::2] == (103, 0)  # waiting


def test_the_replay_computes_one_token_per_decoding_request_before_the_call():
    running = [QueuedRequest(list(range(5000 + r * 100, 5090 + r * 100)), computed=119, generated=30, running=True)
               for r in range(16)]
    queued = [QueuedRelQuery("decoding", 99.0, max_tokens=32, requests=running)]
    behind = background_of(queued, now=100.0, block_size=16, answer_tokens=lambda q, n: [31] * n)
    assert behind.relqueries[0].output_tokens == (1,) * 16
    call = [Chain("c", [[rows_work(4)]])]
    alone, now = replay(call, MACHINE), replay(call, MACHINE, behind)
    # the 16 requests answer their last token; nothing of their prompts or answers is computed again
    assert now.prefill_tokens - now.cached_tokens == alone.prefill_tokens - alone.cached_tokens + 16
    assert now.chains["c"].seconds < alone.chains["c"].seconds + 0.2


def test_an_allowance_holds_every_budget_of_its_chain():
    day = Allowance(1000, name="tenant t", tokens_limit="max_tokens_per_day")
    call = Allowance(350, name="call", parent=day)
    assert call.reserve(200) and not call.reserve(200)  # the call's own budget
    assert call.left() == 150 and day.left() == 800
    assert call.tokens_message(200).startswith("budget exceeded: the call's max_tokens_total 350 is reached (0 tokens spent")
    call.settle(200, 150)  # used less than it held: the rest comes back
    assert call.spent_tokens == 150 and day.spent_tokens == 150 and call.left() == 200
    other = Allowance(None, name="call", parent=day)
    other.charge(700)  # the day is nearly spent by another call
    assert not call.reserve(160) and call.hopeless(160)
    assert call.tokens_message(160).startswith("budget exceeded: the tenant t's max_tokens_per_day 1,000 is reached (850 tokens spent")
    assert call.reserve(150)


def test_a_budget_refuses_with_the_estimate_and_the_budget_in_the_message():
    b = Budget(max_tokens_total=1000, max_seconds=2.0)
    assert refusal(b, "llm_map", 999, 1.9) is None
    why = refusal(b, "llm_map", 1500, 3.25)
    assert "1,500 engine tokens" in why and "max_tokens_total 1,000" in why
    assert "3.25 s" in why and "max_seconds 2" in why and "on_budget := 'partial'" in why
    assert refusal(Budget(max_seconds=2.0, on_budget="partial"), "x", 10, None) is None


@pytest.mark.parametrize("option, value, message", [
    ("max_tokens_total", 0, "max_tokens_total must be a positive whole number of tokens, got 0"),
    ("max_tokens_total", 2.5, "max_tokens_total must be a positive whole number of tokens, got 2.5"),
    ("max_seconds", -1, "max_seconds must be a positive, finite number of seconds, got -1"),
    ("max_seconds", float("inf"), "max_seconds must be a positive, finite number of seconds, got inf"),
    ("on_budget", "truncate", "on_budget must be 'refuse' (refuse before starting when the estimate exceeds the budget)"),
])
def test_bad_budget_settings_name_the_problem(option, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_call("llm_map", "Say {x}", **{option: value})


def test_budget_options_reach_the_call_from_llm_options_decimals_included():
    con = duckdb.connect()
    relserve.duckdb.install(con)
    opts = con.sql("SELECT llm_options(max_seconds := 2.5, max_tokens_total := 500, on_budget := 'partial', temperature := 0.5)").fetchall()[0][0]
    from relserve.duckdb_ext.arguments import _make_call
    from relserve.functions import LLM_MAP, CallOptions

    call = _make_call(LLM_MAP, "Say {x}", None, opts, CallOptions())
    o = call.options
    assert (o.max_seconds, o.max_tokens_total, o.on_budget, o.temperature) == (2.5, 500, "partial", 0.5)
    # a budget does not change an answer: the result-cache key and the call key ignore it
    plain = make_call("llm_map", "Say {x}", temperature=0.5)
    assert call.sampling_settings() == plain.sampling_settings() and call.call_key() == plain.call_key()


def test_explain_without_an_engine_uses_the_calibration_stored_for_this_machine(tmp_path, monkeypatch):
    from relserve import calibration, paths
    from relserve.planner import explain_plan, plan_call
    from relserve.planner.tokens import TokenSource, approximate_tokens

    monkeypatch.setattr(paths, "calibrations_dir", lambda: tmp_path)
    call = make_call("llm_map", "Summarize: {x}", max_tokens=8)
    plan = plan_call(call, [["a b c", "d e f"]], model_id="SmolLM2-135M-Instruct")
    tokens = TokenSource(approximate_tokens, "approximate")
    # no calibration stored: the preset fitted on this project's machines, named as such
    assert explain_plan(plan, tokens).cost_model.startswith("preset smollm2-135m-cpu")
    fitted = CostModel(alpha_p=3e-3, beta_p=0.1, alpha_d=4e-3, beta_d=0.1, source="calibrated on SmolLM2-135M-Instruct")
    calibration.save_cost_model("SmolLM2-135M-Instruct", EngineSettings().resolved_dtype, fitted, {"fit": {}})
    ex = explain_plan(plan, tokens)
    assert ex.cost_model == "calibrated on SmolLM2-135M-Instruct"
    assert ex.estimate.cost_model == "calibrated on SmolLM2-135M-Instruct"
    assert "cost model: calibrated on SmolLM2-135M-Instruct" in str(ex)
    assert json.loads(json.dumps(ex.to_dict()))["estimate"]["prompt_tokens"] == ex.estimate.prompt_tokens


def test_answer_lengths_spread_like_the_recent_ones_and_stay_per_tenant():
    answer_lengths.record("t1", "m", "call", [2, 4, 6, 8, 10, 12, 14, 16])
    assert answer_lengths.spread("t1", "m", "call", 4) == [4, 8, 12, 16]
    assert answer_lengths.spread("t1", "m", "call", 1) == [10]
    assert answer_lengths.spread("t2", "m", "call", 4) is None  # another tenant learns nothing
    assert answer_lengths.expected("t1", "m", "call") == 9


def test_a_filter_keeps_the_share_of_rows_it_kept_before():
    assert selectivity.kept_share("k") == selectivity.UNKNOWN
    selectivity.record("k", [True, False, False, True, None, False])
    assert selectivity.kept_share("k") == pytest.approx(2 / 5)


def test_llm_count_tokens_counts_each_functions_prompt_without_an_engine():
    from transformers import AutoTokenizer

    from relserve.model import resolve_model

    con = duckdb.connect()
    relserve.duckdb.install(con)
    con.execute("CREATE TABLE r AS SELECT * FROM (VALUES (1, 'Great film, loved it.'), (2, NULL)) t(id, review)")
    got = con.sql(
        "SELECT llm_count_tokens('Summarize: {review}', review), "
        "llm_count_tokens('llm_filter', 'Is {review} positive?', review), "
        "llm_count_tokens('LLM_CLASSIFY', 'Tone: {review}', ['positive', 'negative'], review, llm_options(system := 'Be brief.')) "
        "FROM r ORDER BY id").fetchall()
    # the prompts as the engine lays them out, counted by the model's own tokenizer (not relserve's
    # counting): a map in the chat template, a filter and a classify in the scoring layout (the
    # system message in front, the answer field after)
    tok = AutoTokenizer.from_pretrained(resolve_model(None, prepare=False).path)
    chat = tok.apply_chat_template([{"role": "user", "content": "Summarize: Great film, loved it."}],
                                   add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert got[0] == (len(chat), len(tok("Is Great film, loved it. positive?\nAnswer:")["input_ids"]),
                      len(tok("Be brief.\n\nTone: Great film, loved it.\nAnswer:")["input_ids"]))
    # each layout differs: the chat template for a map, the scoring shape for a filter
    assert len(set(got[0])) == 3 and all(n > 5 for n in got[0])
    assert got[1] == (None, None, None)
    errors = relserve.duckdb.errors(con).fetchall()
    assert [e[3] for e in errors] == [f"llm_{f}: placeholder {{review}} is NULL in this row" for f in ("map", "filter", "classify")]


def test_llm_count_tokens_without_values_names_itself_and_whose_prompt_it_counts():
    con = duckdb.connect()
    relserve.duckdb.install(con)
    con.execute("CREATE TABLE r AS SELECT 'Great film' AS review")
    with pytest.raises(duckdb.Error) as got:
        con.sql("SELECT llm_count_tokens('Say {review}') FROM r").fetchall()
    assert ("TemplateError: llm_count_tokens (counting llm_map's prompt): llm_map got no values for its template's "
            "placeholders; pass them after the template, e.g. llm_map('Summarize {review}', review)") in str(got.value)
    with pytest.raises(duckdb.Error, match=r"llm_count_tokens \(counting llm_classify's prompt\): llm_classify\(template, "
                       r"labels, value, \.\.\.\) needs its labels"):
        con.sql("SELECT llm_count_tokens('llm_classify', 'Tone: {review}') FROM r").fetchall()


def test_llm_count_tokens_names_a_function_it_does_not_know():
    con = duckdb.connect()
    relserve.duckdb.install(con)
    con.execute("CREATE TABLE r AS SELECT 'Great film' AS review")
    with pytest.raises(duckdb.Error, match=r"ConfigError: llm_count_tokens: unknown function 'llm_bogus'; expected one "
                                           r"of llm_map, llm_filter, llm_classify, llm_extract, llm_score$"):
        con.sql("SELECT llm_count_tokens('LLM_Bogus', 'x {review}', review) FROM r").fetchall()
    # a template that happens to start with llm_ is still a template
    assert con.sql("SELECT llm_count_tokens('llm_ {review}', review) FROM r").fetchall()[0][0] is not None


def test_a_statements_estimate_replays_a_site_after_the_filter_it_waits_for(monkeypatch):
    from relserve.backend import registry

    # no engine runs in this process (the suite's shared engine, when an earlier test started it,
    # is set aside): nothing to wait behind, so no "now" estimate
    monkeypatch.setattr(registry, "_default", None)
    monkeypatch.setattr(registry, "_chosen", None)
    con = relserve.duckdb.connect(progress=False)
    con.execute("CREATE TABLE t AS SELECT range AS n, 'review number ' || range AS review FROM range(40)")
    ex = con.explain("SELECT n, llm_map('Summarize: {review}', review, llm_options(max_tokens := 8)) FROM t "
                     "WHERE llm_filter('Is {review} positive?', review)")
    est = ex.estimate
    mapping, filtering = (s for s in ex.sites)
    assert (mapping.stage, filtering.stage) == (2, 1)
    # the map starts once the filter has ended (its site waits for it), after a pass over the rows
    assert est.site_ends["#0"] > est.site_ends["#1"] > 0
    assert est.idle_s >= est.site_ends["#0"] and est.now_s is None  # no engine runs: nothing to wait behind
    assert est.exact is False  # the map's rows are those the filter keeps: counted as all of them
    assert est.prompt_tokens == sum(p.estimate.prompt_tokens for s in ex.sites for p in s.plans)
    assert "estimate:" in str(ex).splitlines()[1]
    # the map is replayed over the share the filter kept before: fewer rows, sooner
    selectivity.record(filtering.plans[0].estimate.work.call.call_key(), [True] + [False] * 9)
    assert con.explain(ex.statement).estimate.site_ends["#0"] < est.site_ends["#0"]


async def test_rows_start_in_order_once_their_tokens_fit_and_a_row_that_never_fits_is_refused():
    import asyncio

    from relserve.engine.row_gate import RowGate

    changed = asyncio.Condition()
    day = Allowance(300, name="tenant t", tokens_limit="max_tokens_per_day")
    a, b = RowGate(Allowance(name="call", parent=day), changed), RowGate(Allowance(name="call", parent=day), changed)
    started: list[str] = []
    # a row that started keeps its tokens until a0 and b0 have both started (an event, not a
    # delay: b0 must fit beside a0 however slowly the loop runs)
    side_by_side = asyncio.Event()

    async def row(gate: RowGate, name: str, pos: int, need: int, used: int) -> bool:
        ok = await gate.enter(pos, need)
        if ok:
            started.append(name)
            if {"a0", "b0"} <= set(started):
                side_by_side.set()
            await side_by_side.wait()
            await gate.leave(need, used - 1, 1)
        return ok

    rows = asyncio.gather(
        row(a, "a0", 0, 150, 50), row(a, "a1", 1, 200, 50), row(b, "b0", 0, 90, 10), row(a, "a2", 2, 400, 0))
    try:
        got = await asyncio.wait_for(rows, 30)
    except TimeoutError as e:
        raise StillWaiting(30, f"every row to start or be refused (started: {started})") from e
    # b0 of another relQuery fitted beside a0 at once; a1 waited until both gave back what they did
    # not use (the day's 300 held 150 + 90); a2 can never fit
    assert got == [True, True, True, False]
    assert started == ["a0", "b0", "a1"]
    assert day.spent_tokens == 110 and day.spent_prompt == 107 and day.reserved == 0
    assert a.allowance.tokens_message(400).startswith("budget exceeded: the tenant t's max_tokens_per_day 300 is reached (110")


@pytest.mark.parametrize("function, options", [("llm_filter", {}), ("llm_classify", {"labels": ["a", "b", "c"]}),
                                               ("llm_filter", {"method": "prior"})])
def test_a_call_with_no_prompt_to_run_is_estimated_exactly_at_nothing(function, options):
    # every row cached (or none can run): no first pass, no probe, and no note that one is guessed
    from relserve.estimate.call_work import call_work

    work = call_work(make_call(function, "Is {t} a delivery problem?", **options), [], None, model_id="m")
    assert (work.exact, work.inexact, work.stages) == (True, [], [])


@pytest.mark.parametrize("function, options, warms", [
    ("llm_map", {"max_tokens": 4}, True),
    ("llm_map", {"max_tokens": 4, "system": "You are terse."}, True),
    ("llm_filter", {"method": "prior", "prompt_shape": "chat"}, True),
    # the default scoring layout puts the row's values first, with no chat template in front
    ("llm_filter", {"method": "prior"}, False),
    # under a token budget the executor warms nothing (its tokens would be in no row's reservation)
    ("llm_map", {"max_tokens": 4, "max_tokens_total": 100_000}, False),
    ("llm_filter", {"method": "prior", "prompt_shape": "chat", "max_tokens_total": 100_000}, False),
])
def test_a_prefix_is_warmed_only_where_every_row_starts_with_it(function, options, warms):
    """EXPLAIN replays the executor's warm-up of the rows' shared prefix: behind the chat template
    with the call's system message, right before the rows, and only for rows laid out there."""
    from relserve.estimate.call_work import PREFIX, ROWS, call_work
    from relserve.estimate.prompt_tokens import prompt_tokenizer
    from relserve.model import resolve_model
    from relserve.prompt_rendering import render

    head = "Read this customer note carefully and say whether the customer writes about a parcel that came late. Note: "
    call = make_call(function, head + "{t}", **options)
    values = [(f"parcel number {i} arrived",) for i in range(4)]
    work = call_work(call, [render(call, v) for v in values], prompt_tokenizer(None, None), values=values,
                     model_id=resolve_model(None).model_id, prefix=head)
    kinds = [stage[0].kind for stage in work.stages]
    assert kinds[-1] == ROWS and (PREFIX in kinds) is warms
    if warms:
        assert kinds[-2] == PREFIX
        # the cache serves whole KV blocks (32 tokens): those of the warm-up are the rows' own
        (warm,) = work.stages[-2][0].prompt_ids
        whole = len(warm) // 32 * 32
        assert whole >= 32 and all(ids[:whole] == warm[:whole] for ids in work.stages[-1][0].prompt_ids)
