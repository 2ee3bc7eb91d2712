"""``make test`` runs two pytest-xdist workers: every test on real parts in one group, in file
order on one worker (one session engine, one PostgreSQL cluster, no two engines sharing the
cores), the pure-logic tests beside it. The grouping must hold, or the session's engine and
cluster start twice and fight for the cores; pytest-xdist has stopped grouping silently before
(its issue 1386, under pytest 9.2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import OWN_ENGINES_GROUP, REAL_PARTS_GROUP

ROOT = Path(__file__).resolve().parents[1]

GROUPED = '''
import os
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open(os.environ["WHERE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_xdist_runs_a_group_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    where = tmp_path / "where.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:randomly",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "WHERE": str(where)}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = where.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


PRINT_GROUPS = '''
def pytest_collection_finish(session):
    for item in session.items:
        marks = [m.args[0] for m in item.iter_markers("xdist_group")]
        print("GROUP", item.nodeid, marks[0] if marks else "-")
'''


def _groups(tmp_path: Path, *modules: str) -> dict[str, str]:
    """The suite's own items, collected (not run), and the group conftest.py gives each."""
    (tmp_path / "print_groups.py").write_text(PRINT_GROUPS)
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "print_groups", *modules], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return dict(line.split()[1:3] for line in done.stdout.splitlines() if line.startswith("GROUP "))


def test_the_suites_tests_on_real_parts_join_their_groups(tmp_path):
    groups = _groups(tmp_path, "tests/test_plain_scripts.py", "tests/test_faults.py", "tests/test_soak.py",
                     "tests/test_postgres_batch.py", "tests/test_soak_schedule.py", "tests/test_cluster.py")
    assert groups["tests/test_plain_scripts.py::test_script_without_main_guard"] == OWN_ENGINES_GROUP
    assert groups["tests/test_plain_scripts.py::test_hidden_main_restores_the_users_main_module"] == "-"
    assert groups["tests/test_faults.py::test_kill_9_of_the_server_takes_its_engine_processes_with_it"] == OWN_ENGINES_GROUP
    # the same module's test on the session engine stays with the session's parts
    stop = "tests/test_faults.py::test_a_stop_between_submit_and_the_first_engine_step_still_ends_the_stream"
    assert groups[stop] == REAL_PARTS_GROUP
    # the soak's harness starts a server and a cluster of its own; Ray's replicas, which bind
    # threads to the cores the session engine uses, stay in its group
    assert groups["tests/test_soak.py::test_no_row_is_lost_or_duplicated_and_every_error_names_its_cause"] == OWN_ENGINES_GROUP
    assert groups["tests/test_cluster.py::test_a_killed_replica_costs_only_time"] == REAL_PARTS_GROUP
    assert groups["tests/test_postgres_batch.py::test_limit_stops_the_scan_and_cancels_the_rest"] == REAL_PARTS_GROUP
    assert groups["tests/test_soak_schedule.py::test_the_hours_heavy_faults_stay_in_minutes_20_to_35"] == "-"
