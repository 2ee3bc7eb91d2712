"""The server on the real engine (the session's shared SmolLM2 engine): answers over HTTP are the
engine's own, concurrent clients get their own rows, a dropped client frees the engine,
OpenAI-compatible calls, metrics."""

from __future__ import annotations

import dataclasses
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import running_server
from waits import BoundedClient, Worker, finish_all, lines_within, returns_within, run_within, wait_until

from relserve import RelQuery
from relserve.planner.cache import ResultCache

pytestmark = pytest.mark.engine

TEMPLATE = "Is this review positive? {review} Answer yes or no."
REVIEWS = ["I loved every minute of it.", "Boring and far too long.", "The actors were wonderful.",
           "A waste of money.", "Best film of the year!", "I fell asleep halfway."]
KEY = "server-test-key"


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    cache = ResultCache(tmp_path_factory.mktemp("server-cache") / "results.sqlite")
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY, "admin": True, "min_priority": -10}}}, cache=cache) as srv:
        yield srv


@pytest.fixture
def client(server):
    with BoundedClient(server.url, api_key=KEY) as c:
        yield c


def _metrics(server) -> dict:
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_rows_over_http_are_the_engines_own_answers(engine, client):
    rows = [{"review": r} for r in REVIEWS]
    expected = run_within(engine, RelQuery(TEMPLATE, rows, max_tokens=8)).texts
    res = client.run(TEMPLATE, rows, max_tokens=8, cache=False)
    assert res.status == "finished"
    assert res.texts == expected and res.values == expected
    assert [r.index for r in res.rows] == list(range(len(rows)))
    assert all(r.error is None and r.output_tokens > 0 and r.prompt_tokens > 0 for r in res.rows)
    s = res.stats
    assert s["rows"] == s["engine_rows"] == len(rows) and s["errors"] == 0
    assert s["prompt_tokens"] == sum(r.prompt_tokens for r in res.rows)
    assert s["output_tokens"] == sum(r.output_tokens for r in res.rows)
    assert s["policy"] == "relserve"
    assert client.status(res.id).progress.model_dump() == {"done": len(rows), "total": len(rows)}


def test_filter_over_http_matches_the_planner(engine, client):
    from relserve.functions import make_call
    from relserve.planner import run_call

    call = make_call("llm_filter", "Is this review positive? {review}")
    expected = run_call(call, [REVIEWS[:4]], engine=engine, cache=False, progress=False).values
    got = client.map("Is this review positive? {review}", [{"review": r} for r in REVIEWS[:4]], function="filter", cache=False)
    assert got == expected and all(isinstance(v, bool) for v in got)


def test_concurrent_clients_each_get_exactly_their_rows(engine, server):
    jobs = {
        f"c{i}": [{"review": f"{REVIEWS[(i + j) % len(REVIEWS)]} (#{i}.{j})"} for j in range(2 + i % 2)]
        for i in range(4)
    }
    expected = {name: run_within(engine, RelQuery(TEMPLATE, rows, max_tokens=6)).texts for name, rows in jobs.items()}
    got: dict[str, list] = {}

    def session(name: str) -> None:
        with BoundedClient(server.url, api_key=KEY) as c:
            got[name] = c.run(TEMPLATE, jobs[name], max_tokens=6, cache=False).texts

    threads = [Worker(session, n, what=f"client {n}'s relQuery") for n in jobs]
    for t in threads:
        t.start()
    finish_all(threads, timeout=120)
    assert got == expected


class LongAnswers:
    """The real engine, every row answering its whole max_tokens (ignore_eos): a relQuery of
    200-token rows is still running many steps after the engine reports it decoding."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.relqueries: list = []

    def submit(self, rq, *args, **kwargs):
        rq = dataclasses.replace(rq, ignore_eos=True)
        self.relqueries.append(rq)
        return self.engine.submit(rq, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def _decoding(engine, mark: int, rel_id: str) -> bool:
    return any(s.decoded.get(rel_id) for s in engine.scheduler_steps(mark))


def test_a_client_that_disconnects_cancels_its_relquery(engine):
    rows = [{"topic": f"the history of city number {i}"} for i in range(16)]
    with running_server(LongAnswers(engine), tenants={"tenants": {"t": {"key": KEY}}}, cache=False) as srv, \
            BoundedClient(srv.url, api_key=KEY) as client:
        mark = engine.scheduler_stats()["last_step"]
        stream = client.stream("Write a very long essay about {topic}.", rows, max_tokens=200, cache=False)
        wait_until(lambda: _decoding(engine, mark, stream.id), "the engine decoding the stream's rows")
        assert client.status(stream.id).status == "running"
        stream.close()  # drop the connection without reading
        wait_until(lambda: client.status(stream.id).status != "running", "the dropped stream's relQuery to end")
        st = client.status(stream.id)
        assert st.status == "cancelled" and st.error == "cancelled: the client disconnected"
        # 200 decode steps a row; the cancel frees the engine long before
        assert engine.wait_idle(120), "the engine still busy 120 s after the cancel"
        res = client.result(stream.id)
        assert {r.error for r in res.rows if r.error} == {"cancelled: the client disconnected"}
        assert sum(r.error is None for r in res.rows) < len(rows)
        assert client.map(TEMPLATE, [{"review": REVIEWS[0]}], max_tokens=4, cache=False)[0]  # still serving


def test_openai_completions_and_chat_are_the_engines_answers(engine, server):
    prompts = ["Name a colour.", "Name an animal."]
    expected = run_within(engine, RelQuery.from_prompts(prompts, max_tokens=8)).texts
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server.url + "/v1/completions", headers=h, timeout=60,
                   json={"model": engine.model_id, "prompt": prompts, "max_tokens": 8, "temperature": 0})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion"
    assert [c["text"] for c in sorted(body["choices"], key=lambda c: c["index"])] == expected
    assert body["usage"]["completion_tokens"] > 0

    system = "You answer in one word."
    expected_chat = run_within(engine, RelQuery.from_prompts(["Name a fruit."], system=system, max_tokens=8)).texts[0]
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Name a fruit."}]
    r = httpx.post(server.url + "/v1/chat/completions", headers=h, timeout=60, json={"messages": msgs, "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["message"] == {"role": "assistant", "content": expected_chat}

    with httpx.stream("POST", server.url + "/v1/chat/completions", headers=h, timeout=60,
                      json={"messages": msgs, "max_tokens": 8, "temperature": 0, "stream": True}) as resp:
        lines = [line for line in lines_within(resp.iter_lines(), 60, "the streamed chat completion to end")
                 if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == expected_chat
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_priority_and_deadline_hints_are_kept(client):
    rid = client.submit(TEMPLATE, [{"review": REVIEWS[2]}], max_tokens=4, priority=-3, deadline_s=120, cache=False)
    res = client.result(rid)
    st = client.status(rid)
    assert (st.priority, st.deadline_s) == (-3, 120)
    assert res.status == "finished" and st.stats.deadline_met is True


def test_cells_on_the_engine_run_once_and_then_come_from_the_cache(engine, client):
    values = ["Great popcorn movie", "Dull plot", "Great popcorn movie"]
    cells = [{"id": f"B{i + 2}", "template": "Is {A} positive? Answer yes or no.", "args": [v]} for i, v in enumerate(values)]
    expected = run_within(engine, RelQuery.from_prompts([f"Is {v} positive? Answer yes or no." for v in values[:2]], max_tokens=6)).texts
    first = client.cells(cells, max_tokens=6)
    assert [first[c].value for c in ("B2", "B3", "B4")] == [expected[0], expected[1], expected[0]]
    assert not any(v.cached for v in first.values())
    again = client.cells(cells, max_tokens=6)
    assert all(v.cached for v in again.values())
    assert {k: v.value for k, v in again.items()} == {k: v.value for k, v in first.items()}


def test_metrics_count_tokens_latency_and_scheduler_overhead(server, client):
    def sample(families, name, suffix="_total", **labels):
        for s in families[name].samples:
            if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        return 0.0

    before = _metrics(server)
    res = client.run(TEMPLATE, [{"review": r} for r in REVIEWS[:3]], max_tokens=5, cache=False)
    # the scheduler's figures are read from the engine at most every 0.5 s (issue 23): wait for the next read
    steps_before = sample(before, "relserve_scheduler_steps")

    def counting_the_runs_steps() -> dict | None:
        families = _metrics(server)
        return families if sample(families, "relserve_scheduler_steps") > steps_before else None

    after = wait_until(counting_the_runs_steps, "the metrics to count the run's scheduler steps", timeout=60, poll=0.2)

    assert sample(after, "relserve_tokens", kind="prompt") - sample(before, "relserve_tokens", kind="prompt") == res.stats["prompt_tokens"]
    assert sample(after, "relserve_tokens", kind="output") - sample(before, "relserve_tokens", kind="output") == res.stats["output_tokens"]
    assert sample(after, "relserve_relquery_latency_seconds", "_count", kind="relquery") == sample(before, "relserve_relquery_latency_seconds", "_count", kind="relquery") + 1
    assert 0.0 <= sample(after, "relserve_prefix_cache_hit_ratio", "") <= 1.0
    assert sample(after, "relserve_scheduler_steps") > sample(before, "relserve_scheduler_steps")
    assert sample(after, "relserve_scheduler_policy_seconds", part="dpu") > 0
    assert sample(after, "relserve_scheduler_policy_info", "", policy="relserve") == 1.0


def test_the_system_message_reaches_the_prompt(engine, client):
    prompt = "Name a fruit."
    plain, banana = engine.prompt_token_ids(prompt), engine.prompt_token_ids(prompt, system="Always answer BANANA.")
    # (SmolLM2's chat template puts a default system message in when none is given)
    assert "Always answer BANANA." in engine.tokenizer.decode(banana) and "BANANA" not in engine.tokenizer.decode(plain)
    assert len(banana) != len(plain)
    # the engine's own relQuery tokenizes with the relQuery's system message
    r = run_within(engine, RelQuery.from_prompts([prompt], system="Always answer BANANA.", max_tokens=4))
    assert r.rows[0].prompt_tokens == len(banana)
    without = client.run(prompts=[prompt], max_tokens=4, cache=False)
    with_system = client.run(prompts=[prompt], max_tokens=4, system="Always answer BANANA.", cache=False)
    assert (without.rows[0].prompt_tokens, with_system.rows[0].prompt_tokens) == (len(plain), len(banana))


def test_a_row_that_is_not_valid_unicode_fails_alone_on_the_engine(engine, client):
    rows = [{"review": "Great film."}, {"review": "bad \ud800 text"}, {"review": "Awful film."}]
    r = run_within(engine, RelQuery(TEMPLATE, rows, max_tokens=4))
    assert [row.error is None for row in r.rows] == [True, False, True]
    assert r.rows[1].error.startswith("the prompt is not valid Unicode text: surrogates not allowed")
    body = json.dumps({"template": TEMPLATE, "rows": rows, "max_tokens": 4, "cache": False}).encode()
    h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    resp = httpx.post(client.url + "/v1/relqueries", content=body, headers=h, timeout=60)
    assert resp.status_code == 201
    res = client.result(resp.json()["id"])
    assert res.texts[0] == r.texts[0] and res.texts[2] == r.texts[2] and res.texts[1] is None
    assert res.rows[1].error.startswith("the prompt is not valid Unicode text")


# ------------------------------------------------ real-engine twins of test_server_api.py's doubles


def test_cancel_keeps_the_rows_already_answered(engine, client):
    # short questions finish in a few tokens; the essays would run 200 tokens each
    prompts = [f"Say the word {w}." for w in ("yes", "red", "cat")] + [f"Write a very long essay about topic {i}." for i in range(6)]
    rid = client.submit("{p}", [{"p": p} for p in prompts], max_tokens=200, cache=False)
    wait_until(lambda: client.status(rid).progress.done >= 1, "a first answered row")
    st = client.cancel(rid)
    assert st.status == "cancelled" and st.error == "cancelled by the client"
    res = client.result(rid)
    answered = [r for r in res.rows if r.error is None]
    assert 1 <= len(answered) < len(prompts)
    assert {r.error for r in res.rows if r.error is not None} == {"cancelled by the client"}
    assert engine.wait_idle(60), "the engine still busy 60 s after the cancel"
    # each kept row is the engine's own answer to its prompt
    alone = run_within(engine, RelQuery.from_prompts([prompts[r.index] for r in answered], max_tokens=200)).texts
    assert [r.text for r in answered] == alone


def test_sse_stream_has_every_row_with_the_engines_answers(engine, server):
    rows = [{"review": r} for r in REVIEWS[:2]]
    expected = run_within(engine, RelQuery(TEMPLATE, rows, max_tokens=6)).texts
    with httpx.stream("POST", server.url + "/v1/relqueries", headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                      json={"template": TEMPLATE, "rows": rows, "max_tokens": 6, "stream": "sse", "cache": False}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = returns_within(lambda: r.read().decode(), 120, "the SSE stream of 2 rows to end")
    events = [block for block in text.split("\n\n") if block.strip()]
    assert [b.split("\n")[0] for b in events] == ["event: accepted", "event: row", "event: row", "event: done"]
    got = sorted((d["index"], d["text"]) for d in (json.loads(b.split("\n")[1][len("data: "):]) for b in events[1:3]))
    assert got == [(0, expected[0]), (1, expected[1])]
    done = json.loads(events[3].split("\n")[1][len("data: "):])
    assert done["status"] == "finished" and done["progress"] == {"done": 2, "total": 2}


def test_rows_in_flight_429_and_hints_reach_the_real_engine(engine):
    from relserve.client import ServerError

    recording = LongAnswers(engine)  # keeps each relQuery it was given; 200-token rows stay in flight
    tenants = {"tenants": {"t": {"key": KEY, "min_priority": -10, "max_rows_in_flight": 4}}}
    with running_server(recording, tenants=tenants, cache=False) as srv, BoundedClient(srv.url, api_key=KEY) as c:
        t0 = time.monotonic()
        first = c.submit("Write a very long essay about {x}.", [{"x": f"the history of city number {i}"} for i in range(3)],
                         max_tokens=200, priority=-3, deadline_s=120)
        with pytest.raises(ServerError) as e:
            c.submit("Say {x}", [{"x": i} for i in range(2)], max_tokens=4)
        assert e.value.status == 429
        assert e.value.message.startswith("tenant 't' would have 5 rows in flight (3 running + 2 new); the limit is 4")
        # the hints are on the relQuery the engine got (not only echoed by the server)
        rq = recording.relqueries[-1]
        assert (rq.rel_id, rq.priority) == (first, -3)
        assert 120 - (time.monotonic() - t0) <= rq.deadline_s <= 120
        assert c.cancel(first).status == "cancelled"
        assert engine.wait_idle(60), "the engine still busy 60 s after the cancel"
        assert c.run("Say {x}", [{"x": i} for i in range(2)], max_tokens=4).status == "finished"  # room again
