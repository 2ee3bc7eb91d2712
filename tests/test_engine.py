"""The real engine: SmolLM2 on vLLM with the relserve scheduler plug-in."""

from __future__ import annotations

import json

import pytest
from waits import result_within, run_within, wait_until

from relserve import ConfigError, Engine, RelQuery, RowError, TemplateError

pytestmark = pytest.mark.engine

WORDS = ["apple", "river", "mountain", "violin", "candle", "tiger", "planet", "garden"]


def test_answers_come_back_one_per_row_in_row_order(engine):
    template = "Repeat this word three times, separated by spaces: {word}"
    rows = [{"word": w} for w in WORDS]
    result = run_within(engine, RelQuery(template, rows, max_tokens=12))
    assert [r.index for r in result.rows] == list(range(len(rows)))
    # Each row's answer is the one that row gets when it runs alone (greedy decoding).
    alone = [run_within(engine, RelQuery(template, [row], max_tokens=12)).texts[0] for row in rows]
    assert result.texts == alone
    assert len(set(result.texts)) == len(rows)  # distinct answers, so a mix-up would show
    s = result.stats
    assert s.num_rows == len(rows) and s.num_errors == 0
    assert s.prompt_tokens == sum(r.prompt_tokens for r in result.rows) > 0
    assert s.output_tokens == sum(r.output_tokens for r in result.rows) > 0
    # Eq. 2: the three periods follow one another from arrival to the last token, which comes
    # before the result (one monotonic clock in both processes)
    assert s.waiting_s >= 0 and s.core_s >= 0 and s.tail_s > 0
    assert s.waiting_s + s.core_s + s.tail_s <= s.latency_s


def test_repeated_prompts_hit_the_prefix_cache(engine):
    rows = [{"word": w} for w in WORDS[:4]]
    template = "Here is a word from a list of common English nouns used in a quiz: {word}. Spell it backwards."
    run_within(engine, RelQuery(template, rows, max_tokens=4))
    again = run_within(engine, RelQuery(template, rows, max_tokens=4))
    # All but the last, partial block of each prompt is served from the cache.
    for r in again.rows:
        assert r.cached_tokens >= r.prompt_tokens - engine.block_size
    assert again.stats.cached_tokens == sum(r.cached_tokens for r in again.rows)


# (a small relQuery overtaking a big one, under relserve and not fcfs: test_scheduling_engine.py,
# by the order of the engine's steps)


def test_cancel_frees_the_relquery_while_another_keeps_running(engine):
    # 24 rows of 200 tokens each (ignore_eos): 16 decode at a time, the last 8 only after them
    long_rq = RelQuery("Write a very long essay about {topic}.", [{"topic": f"topic {i}"} for i in range(24)], max_tokens=200,
                       ignore_eos=True)
    other = RelQuery("Write a very long essay about {topic}.", [{"topic": f"subject {i}"} for i in range(4)], max_tokens=24)
    mark = engine.scheduler_stats()["last_step"]
    h_long = engine.submit(long_rq)
    h_other = engine.submit(other)
    # cancelled once the engine reports its rows decoding: far from their 200th token
    wait_until(lambda: any(s.decoded.get(long_rq.rel_id) for s in engine.scheduler_steps(mark)), "the long relQuery decoding")
    h_long.cancel()
    res_long = result_within(h_long, 60, "the cancelled relQuery to end")
    res_other = result_within(h_other, 120, "the other relQuery to finish")
    assert res_long.cancelled
    assert sum(r.error == "cancelled" for r in res_long.rows) > 0
    assert all(r.error is None and r.text for r in res_other.rows)
    assert engine.wait_idle(30), "the engine still busy 30 s after the cancel"
    # The engine has no requests left and keeps serving.
    after = run_within(engine, RelQuery("Say hello to {name}.", [{"name": "Ada"}], max_tokens=4))
    assert after.rows[0].error is None


def test_a_cancel_right_after_submit_stops_every_row(engine):
    # A cancel issued at once must stop every row, even one that reaches the engine's loop before
    # the rows have started (then `_run` starts none); otherwise the rows would run their 200
    # tokens, about 20 s here.
    rq = RelQuery("Write a very long essay about {topic}.", [{"topic": f"theme {i}"} for i in range(12)], max_tokens=200,
                  ignore_eos=True)
    assert engine.wait_idle(60), "the engine still busy after 60 s with an earlier test's work"
    mark = engine.scheduler_stats()["last_step"]
    h = engine.submit(rq)
    h.cancel()
    res = result_within(h, 60, "the relQuery cancelled right after submit to end")
    assert res.cancelled
    assert [r.error for r in res.rows] == ["cancelled"] * 12
    assert engine.wait_idle(30), "the engine still busy 30 s after the cancel"
    # the engine's own steps: the rows stopped short of the 200 decode steps they would take
    assert sum(s.ran(rq.rel_id) for s in engine.scheduler_steps(mark)) < 200


def test_null_value_and_too_long_row_fail_alone(engine):
    long_text = "word " * 3000
    rows = [{"review": "Great film."}, {"review": None}, {"review": long_text}, {"review": "Dull."}]
    result = run_within(engine, RelQuery("Is this review positive? {review}", rows, max_tokens=4))
    assert result.rows[1].error == "column 'review' is NULL"
    assert "exceeds the model's context of 2048 tokens" in result.rows[2].error
    assert result.rows[0].error is None and result.rows[0].text
    assert result.rows[3].error is None and result.rows[3].text
    assert result.stats.num_errors == 2
    with pytest.raises(RowError, match="row 1: column 'review' is NULL"):
        run_within(engine, RelQuery("Is this review positive? {review}", rows, max_tokens=4, on_error="raise"))


def test_choices_and_json_schema_constrain_the_answer(engine):
    rows = [{"review": "I loved every minute."}, {"review": "Awful acting and a boring plot."}]
    labels = ["positive", "negative"]
    res = run_within(engine, RelQuery("Sentiment of this review: {review}", rows, max_tokens=8, choices=labels))
    assert all(t in labels for t in res.texts)
    schema = {"type": "object", "properties": {"stars": {"type": "integer"}}, "required": ["stars"]}
    res = run_within(engine, RelQuery("Rate this review from 1 to 5 stars: {review}", rows, max_tokens=24, json_schema=schema))
    for t in res.texts:
        assert isinstance(json.loads(t)["stars"], int)


def test_sampling_options_reach_the_engine(engine):
    # the real-engine twin of the sampling settings: seeded sampling repeats, another seed
    # differs, and a tiny top_p leaves only the most likely token (the greedy answer)
    rows = [{"thing": t} for t in ("the sea", "a forest", "a city at night", "winter")]
    template = "Write a short poem about {thing}."

    def texts(**options):
        res = result_within(engine.submit(RelQuery(template, rows, max_tokens=10, **options)), 120, f"the poems with {options}")
        assert res.stats.num_errors == 0
        return res.texts

    greedy = texts()
    seeded = texts(temperature=1.5, seed=11)
    assert texts(temperature=1.5, seed=11) == seeded
    assert texts(temperature=1.5, seed=12) != seeded
    assert seeded != greedy
    assert texts(temperature=1.5, top_p=1e-6, seed=5) == greedy


def test_bad_template_and_rows_fail_before_anything_runs():
    with pytest.raises(TemplateError, match="unknown column\\(s\\) 'reviw'"):
        RelQuery("Is {reviw} positive?", [{"review": "ok"}])
    with pytest.raises(TemplateError, match="row 1 has no column\\(s\\) 'review'"):
        RelQuery("Is {review} positive?", [{"review": "ok"}, {"text": "ok"}])
    with pytest.raises(TemplateError, match="no \\{column\\} placeholder"):
        RelQuery("Is it positive?", [{"review": "ok"}])


def test_non_finite_numbers_are_refused_by_name():
    rows = [{"review": "ok"}]
    for option, value, message in [
        ("deadline_s", float("inf"), "deadline_s must be a positive, finite number of seconds, got inf"),
        ("temperature", float("nan"), "temperature must be a number >= 0, got nan"),
        ("top_p", float("inf"), r"top_p must be a number in \(0, 1\], got inf"),
    ]:
        with pytest.raises(ConfigError, match=message):
            RelQuery("Is {review} positive?", rows, **{option: value})


def test_unknown_policy_or_model_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown policy 'fastest'; choose one of vllm, fcfs, sarathi, sp, relserve"):
        Engine(policy="fastest")
    with pytest.raises(ConfigError, match="unknown model 'no-such-model'"):
        Engine(model="no-such-model")


def test_async_and_iteration_interfaces(engine):
    import asyncio

    rows = [{"word": w} for w in WORDS[:5]]

    async def main():
        h = engine.submit(RelQuery("Spell {word}.", rows, max_tokens=6))
        seen = [r.index async for r in h]
        result = await h
        return seen, result

    seen, result = asyncio.run(main())
    assert sorted(seen) == list(range(5))
    assert len(result.rows) == 5
    h = engine.submit(RelQuery("Spell {word}.", rows, max_tokens=6))
    assert sorted(r.index for r in h) == list(range(5))
    assert h.progress == (5, 5)


def test_engine_is_shared_by_threads(engine):
    from concurrent.futures import ThreadPoolExecutor

    def work(k: int):
        rows = [{"word": f"{w}{k}"} for w in WORDS[:3]]
        return run_within(engine, RelQuery("Spell {word}.", rows, max_tokens=4))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    assert [len(r.rows) for r in results] == [3, 3, 3, 3]
    assert all(r.stats.num_errors == 0 for r in results)
    assert len({r.stats.rel_id for r in results}) == 4
