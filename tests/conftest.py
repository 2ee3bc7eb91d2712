"""Shared fixtures. One real vLLM engine serves every engine test of the session (a start costs
about 25 s on these CPUs); tests that need another policy switch it and switch back."""

from __future__ import annotations

import contextlib
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: The test engine's limits: small enough that a 60-row relQuery runs in several waves.
TEST_ENGINE_OPTIONS = dict(policy="relserve", max_num_seqs=16, max_num_batched_tokens=1024, kv_cache_gb=1.0)


@pytest.fixture(autouse=True)
def _fresh_template_memory():
    """Each test chooses its own bootstrapped examples and answer fields, measures its own priors
    and pools its own label means (all are remembered per template for the process): a test that counts first passes or
    probes, or checks picks, does not see another's."""
    from relserve.planner.answer_fields import forget_fields
    from relserve.planner.label_bootstrap import forget_examples
    from relserve.planner.label_history import forget_means
    from relserve.planner.label_prior import forget_priors

    forget_examples()
    forget_means()
    forget_fields()
    forget_priors()
    yield


@pytest.fixture(scope="session")
def engine():
    from relserve import Engine, set_default_engine

    eng = Engine(**TEST_ENGINE_OPTIONS)
    set_default_engine(eng)
    yield eng
    set_default_engine(None)
    eng.close()


@contextlib.contextmanager
def using_policy(engine, name: str, **settings):
    """Run a block under another policy, then return to the session's default."""
    from relserve import PolicySettings

    engine.set_policy(name, PolicySettings(**settings) if settings else None)
    try:
        yield engine
    finally:
        engine.wait_idle()
        engine.set_policy(TEST_ENGINE_OPTIONS["policy"])


@pytest.fixture
def with_policy(engine):
    """``with with_policy("fcfs"): ...`` runs the block on the shared engine under that policy."""
    return lambda name, **settings: using_policy(engine, name, **settings)


@pytest.fixture
def engine_home(engine, tmp_path, monkeypatch):
    """A fresh result cache for the test; the engine is started first, under the real home."""
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


@pytest.fixture
def recording(engine):
    """The shared engine, recording what reaches it."""
    from engine_doubles import RecordingEngine

    return RecordingEngine(engine)


def pytest_collection_modifyitems(config, items):
    """Every test that uses the session engine carries the ``engine`` marker (``-m "not engine"``
    must deselect everything that starts it), even where a module forgot to mark it."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.get("engine") if info is not None else None
        if not defs:
            continue
        func = defs[-1].func  # the closest definition: a module may define its own double
        if func.__module__ == __name__ and func.__name__ == "engine" and item.get_closest_marker("engine") is None:
            item.add_marker(pytest.mark.engine)
