"""The ``Backend`` seam (issue 25): the protocol Engine and Cluster implement, the one
default-backend registry, the typed request metadata the scheduler plug-in reads, and the result
both backends build. Pure logic: no engine starts here."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import relserve
from relserve.backend import Backend, registry
from relserve.cluster.cluster import Cluster
from relserve.engine import Engine
from relserve.engine.backend_base import finished_result
from relserve.engine.handle import RelQueryHandle
from relserve.engine.request_meta import RequestMeta
from relserve.planner.engine_ref import EngineRef
from relserve.results import RowResult

#: what Backend asks for beyond the attributes every backend sets at start (methods, properties)
_CALLED = sorted(n for n, v in vars(Backend).items() if not n.startswith("_") and (callable(v) or isinstance(v, property)))


@pytest.mark.parametrize("cls", [Engine, Cluster])
def test_engine_and_cluster_have_every_method_the_backend_protocol_names(cls):
    assert {"submit", "run", "warm_prefix", "alive", "close"} <= set(_CALLED)
    missing = [n for n in _CALLED if getattr(cls, n, None) is None]
    assert missing == []


@dataclass
class _Fake:
    model_id: str
    alive: bool = True


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(registry, "_default", None)
    monkeypatch.setattr(registry, "_chosen", None)


def test_a_configured_backend_comes_first_and_unsetting_it_returns_to_the_running_default(empty_registry):
    default, chosen = _Fake("default-model"), _Fake("chosen-model")
    relserve.set_default_engine(default)
    relserve.configure(engine=chosen)
    try:
        assert relserve.settings.current().engine is chosen
        assert EngineRef().get() is chosen
    finally:
        relserve.configure(engine=None)
    # the default set before is still the one calls use: no second engine is started
    assert EngineRef().get() is default
    assert registry.running_default_engine() is default


def test_a_dead_default_is_not_handed_out_as_running(empty_registry):
    relserve.set_default_engine(_Fake("m", alive=False))
    assert registry.running_default_engine() is None


def test_request_meta_crosses_extra_args_as_plain_json_and_back():
    meta = RequestMeta("rq1", rel_size=3, arrival=5.0, priority=2, deadline=9.0, tenant="t", weight=2.0, max_running_shared=4)
    extra = json.loads(json.dumps(meta.to_extra_args()))  # what reaches vLLM's engine-core process
    assert RequestMeta.from_extra_args(extra, "rq1-0", now=1.0) == meta


def test_a_request_without_meta_is_a_relquery_of_its_own_arriving_now():
    assert RequestMeta.from_extra_args(None, "warm-1", now=7.0) == RequestMeta("warm-1", rel_size=1, arrival=7.0)
    assert RequestMeta.from_extra_args({"other": 1}, "x", now=2.0) == RequestMeta("x", arrival=2.0)


def test_finished_result_fills_unanswered_rows_and_takes_eq2_from_the_spans():
    h = RelQueryHandle("rq", 3, "null", lambda: None)
    h.row_done(RowResult(2, error="bad row", prompt_tokens=1))
    h.row_done(RowResult(0, text="a", prompt_tokens=4, output_tokens=2, cached_tokens=3))
    h.row_done(RowResult(0, text="late duplicate"))  # the first answer stays
    assert [r.index for r in h.rows_since(1)] == [0]
    result = finished_result(h, "fcfs", arrival=10.0, spans=[(11.0, 12.0, 15.0), (10.5, 13.0, 14.0)])
    assert [(r.text, r.error) for r in result.rows] == [("a", None), (None, "cancelled"), (None, "bad row")]
    st = result.stats
    # waiting: arrival to the first start; core: to the last prefill; tail: to the last token
    assert (st.waiting_s, st.core_s, st.tail_s) == (0.5, 2.5, 2.0)
    assert (st.prompt_tokens, st.output_tokens, st.cached_tokens, st.num_errors, st.policy) == (5, 2, 3, 2, "fcfs")
