"""Shared fixtures. One real vLLM engine serves every engine test of the session (a start costs
about 25 s on these CPUs); tests that need another policy switch it and switch back.

No server outlives the run: pytest becomes the reaper of every process its tests start (a
PostgreSQL started by ``pg_ctl`` leaves its parent, and would otherwise belong to init), and
ends whatever of them is still running once every fixture is torn down, naming it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite runs several engines on the same cores at once (the session's beside the other
# worker's own engines), each with an OpenMP thread per core. libgomp's threads spin at every
# barrier by default, and a spinning thread holds a core the other engine needs: two engines
# running one LLM-only pass at once took 127 s each spinning and 99-101 s passive; one engine alone
# 49.5 s and 47.9 s (7 Dec, AMD EPYC 2 cores: docs/testing-mutants.md). Every
# engine process the tests start inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _own_home() -> None:
    """The run's own relserve home (``RELSERVE_HOME``), so that no test reads or writes the user's
    result cache or label plans: a test whose statements were answered from a cache an earlier
    run (or the user's work) left would see no prompt reach its engine. The converted model and
    the calibrations are the user's home's, linked: converting the model again costs a minute per
    worker, and the calibrations are this machine's. A test that needs a home of its own sets
    ``RELSERVE_HOME`` itself."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from relserve import paths

    real = paths.home()
    own = Path(tempfile.mkdtemp(prefix="relserve-tests-home-"))
    for name in ("models", "calibrations"):
        (real / name).mkdir(parents=True, exist_ok=True)
        (own / name).symlink_to(real / name, target_is_directory=True)
    os.environ["RELSERVE_HOME"] = str(own)
    atexit.register(shutil.rmtree, own, ignore_errors=True)  # (the links go, not what they point to)


_own_home()

from relserve.policy import PolicySettings  # noqa: E402  (plain Python: no engine is imported)

#: The test engine's limits: small enough that a 60-row relQuery runs in several waves. It runs
#: the default policy settings, not the arranger `relserve calibrate` may have stored for this
#: machine: the scheduling tests check the defaults' decisions, and a calibrated arranger (mixed
#: steps) turned a preemption into a mixed step.
# float32, not the default's bfloat16 (where the CPU has it): the golden references are float32
# computed outside relserve, and the tests' exact answers are the same on every CPU;
# tests/test_default_dtype.py runs the default engine itself. 2.5 GB of KV cache (about 55,000
# float32 tokens of this model): a test that runs the same rows twice with the result cache off
# (an LLM-only reference beside a cascade, a statement in three qual orders) finds the first
# run's prompts in the engine's prefix cache; at 1 GB test_cascade_engine.py took 250 s alone,
# at 2.5 GB 199 s, with the same answers
TEST_ENGINE_OPTIONS = dict(policy="relserve", max_num_seqs=16, max_num_batched_tokens=1024, kv_cache_gb=2.5,
                           policy_settings=PolicySettings(), dtype="float32")


@pytest.fixture(autouse=True)
def label_memory():
    """Each test gets a label memory of its own (relserve/labels/memory.py: the calls' label plans
    and chosen answer fields), empty, in the process only: a test that counts first passes or
    probes, or checks picks, does not see another's plans, nor any left in relserve's home."""
    from relserve import answer_lengths
    from relserve.estimate import selectivity
    from relserve.labels.memory import LabelMemory, use_memory

    memory = LabelMemory()
    use_memory(memory)
    answer_lengths.forget()
    selectivity.forget()
    yield memory
    use_memory(None)


@pytest.fixture(scope="session")
def engine():
    from relserve import Engine, set_default_engine

    eng = Engine(**TEST_ENGINE_OPTIONS)
    set_default_engine(eng)
    yield eng
    set_default_engine(None)
    eng.close()


@pytest.fixture(scope="session")
def reference_scorer(engine):
    """The default model in transformers, outside relserve (tests/reference_scores.py): loaded
    once for every test that checks scores against it."""
    from reference_scores import ReferenceScorer

    return ReferenceScorer(engine.model_path)


@pytest.fixture(scope="session")
def pg_cluster():
    """The session's one PostgreSQL cluster (tests/test_postgres.py: each module's ``cluster`` is a
    database of its own on it, made from a template)."""
    from test_postgres import session_cluster

    with session_cluster() as pg:
        yield pg


@contextlib.contextmanager
def using_policy(engine, name: str, cost_model=None, **settings):
    """Run a block under another policy (and cost model), then return to the session's default."""
    from relserve import PolicySettings

    before = engine.cost_model
    # the engine's own settings (its calibrated ones, say) with the block's changes
    engine.set_policy(name, PolicySettings(**{**engine.policy_settings.model_dump(), **settings}) if settings else None,
                      cost_model=cost_model)
    try:
        yield engine
    finally:
        assert engine.wait_idle(300), "the engine did not become idle after the block"
        engine.set_policy(TEST_ENGINE_OPTIONS["policy"], cost_model=before)


@pytest.fixture
def with_policy(engine):
    """``with with_policy("fcfs"): ...`` runs the block on the shared engine under that policy
    (``cost_model=``: and that cost model; other keywords: PolicySettings)."""
    return lambda name, cost_model=None, **settings: using_policy(engine, name, cost_model, **settings)


@pytest.fixture
def engine_home(engine, tmp_path, monkeypatch):
    """A fresh result cache for the test; the engine is started first, under the real home."""
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


@pytest.fixture
def recording(engine):
    """The shared engine, recording what reaches it."""
    from engine_doubles import RecordingEngine

    return RecordingEngine(engine)


#: the markers of tests on real parts: the session's one engine, PostgreSQL cluster and Ray
#: cluster, the browser, engines and servers of their own
REAL_PARTS = ("engine", "postgres", "cluster", "gpu", "browser", "soak")
#: their pytest-xdist group: one worker runs them all, in file order, so the session's engine and
#: PostgreSQL start once and no two engines share the cores; the other worker meanwhile takes
#: the pure-logic tests, which are single-threaded Python (``make test`` runs ``-n 2``)
REAL_PARTS_GROUP = "real-parts"
#: tests that start engines of their own (a subprocess's, a server's, a stock or default engine,
#: the soak's server) and never touch the session's: their group runs on the other worker, where
#: their start-ups and waits (single-threaded imports, kills, the soak's fixed four minutes, mostly)
#: overlap the session engine's tests. Ray's replicas stay with the session's parts: their threads
#: are bound to the same two cores, and beside a busy session engine their start-ups and restarts
#: slowed several-fold (docs/testing-mutants.md)
OWN_ENGINES_GROUP = "own-engines"
OWN_ENGINES_MODULES = ("test_plain_scripts.py", "test_faults.py", "test_default_dtype.py", "test_bench_replay.py",
                       "test_soak.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the tests' ids
def pytest_collection_modifyitems(config, items):
    """Every test that uses the session engine carries the ``engine`` marker (``-m "not engine"``
    must deselect everything that starts it), even where a module forgot to mark it; every test
    on real parts joins its xdist group."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.get("engine") if info is not None else None
        if defs:
            func = defs[-1].func  # the closest definition: a module may define its own double
            if func.__module__ == __name__ and func.__name__ == "engine" and item.get_closest_marker("engine") is None:
                item.add_marker(pytest.mark.engine)
        if any(item.get_closest_marker(m) is not None for m in REAL_PARTS):
            own = item.path.name in OWN_ENGINES_MODULES and not _uses_the_session_parts(item)
            item.add_marker(pytest.mark.xdist_group(OWN_ENGINES_GROUP if own else REAL_PARTS_GROUP))


def _uses_the_session_parts(item) -> bool:
    # fixturenames holds every fixture the test needs, those its fixtures ask for too (recording,
    # with_policy, reference_scorer and engine_home all ask for the engine)
    return bool({"engine", "pg_cluster"} & set(getattr(item, "fixturenames", ())))


# ---------------------------------------------------------------- no process outlives the run

#: prctl(PR_SET_CHILD_SUBREAPER): orphaned descendants are re-parented to this process, not init
_PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config):
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _leftovers() -> list:
    """Descendants still running, less multiprocessing's resource tracker (it ends with pytest)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "multiprocessing.resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _xdist_controller(config) -> bool:
    return getattr(config.option, "numprocesses", None) not in (None, 0) and not hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """After every fixture's teardown: end the processes the tests left running (a PostgreSQL
    cluster, a server, an engine), naming them. Under pytest-xdist each worker does it for its
    own tests; the controller's only children are the workers."""
    import psutil

    if _xdist_controller(session.config):
        return

    left = _leftovers()
    if left:  # an engine's processes may still be on their way out after its close()
        _, left = psutil.wait_procs(left, timeout=15)
        left = [p for p in left if p in _leftovers()]
    if not left:
        return
    names = []
    for p in left:
        try:
            names.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(left, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    sys.stderr.write("\nprocesses the tests left running (ended now):\n  " + "\n  ".join(names) + "\n")
