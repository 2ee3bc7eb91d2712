"""The engine's label tries, from the side of a tenant that chooses its labels: the server builds
one to book every label call (even one it then refuses with a 429), and the engine keeps at most
``MAX_LABEL_TRIES`` of them, the least recently used dropped first (relserve/engine/label_rows.py),
so ever new label sets do not grow the server's memory, and a label set in use is not rebuilt."""

from __future__ import annotations

import httpx
import pytest
from server_fixtures import FakeEngine, running_server

from relserve.engine import label_rows
from relserve.engine.label_rows import MAX_LABEL_TRIES, LabelTries
from relserve.server.budget import _ByteTokens

KEY = "labels-secret-key"


class TrieKeepingEngine(FakeEngine):
    """The stand-in engine with the engine's own label-trie cache (``Engine.label_trie``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = _ByteTokens()
        self.tries = LabelTries(self.tokenizer)

    def label_trie(self, labels: tuple[str, ...], space: str = "") -> object:
        return self.tries.get(labels, space)


def _classify(srv, labels: list[str]) -> httpx.Response:
    body = {"function": "classify", "template": "Which kind is {x}?", "rows": [{"x": "a note"}], "labels": labels}
    return httpx.post(srv.url + "/v1/relqueries", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


@pytest.fixture
def builds(monkeypatch) -> list[tuple[str, ...]]:
    """The label sets a trie is built for, in order."""
    built: list[tuple[str, ...]] = []
    build = label_rows.LabelTrie.build

    def counted(labels, *args, **kwargs):
        built.append(tuple(labels))
        return build(labels, *args, **kwargs)

    monkeypatch.setattr(label_rows.LabelTrie, "build", counted)
    return built


def test_a_tenant_sending_new_label_sets_keeps_at_most_the_bound_of_tries(builds):
    engine = TrieKeepingEngine()
    # one row in flight: every classify is refused (429) after its booking built its tries
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY, "max_rows_in_flight": 1}}}, cache=False) as srv:
        first = [f"first {k}" for k in range(3)]
        assert _classify(srv, first).status_code == 429
        for i in range(10):
            assert _classify(srv, [f"set {i} label {k}" for k in range(3)]).status_code == 429
        # used again within the bound: found, not rebuilt
        before = len(builds)
        assert _classify(srv, first).status_code == 429
        assert len(builds) == before
        for i in range(10, MAX_LABEL_TRIES + 10):
            assert _classify(srv, [f"set {i} label {k}" for k in range(3)]).status_code == 429
        # a bound's worth of newer label sets later, the first was dropped: built again
        before = len(builds)
        assert _classify(srv, first).status_code == 429
        assert builds[before:] and set(builds[before:]) == {tuple(first)}
    assert len(engine.tries) <= MAX_LABEL_TRIES


def test_tries_keep_the_label_sets_used_last():
    tries = LabelTries(_ByteTokens(), limit=2)
    a, b, c = ("yes", "no"), ("up", "down"), ("hot", "cold")
    kept_a = tries.get(a)
    tries.get(b)
    assert tries.get(a) is kept_a  # a hit, and now the last used
    tries.get(c)  # drops b, the least recently used
    assert len(tries) == 2 and (a, "") in tries and (c, "") in tries and (b, "") not in tries
