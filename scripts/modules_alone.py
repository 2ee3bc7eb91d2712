#!/usr/bin/env python3
"""Every test module passes alone (issue 66): each tests/test_*.py runs in a pytest process of its
own, so a module that passes only because another module ran first (a warmed cache, a kept label
plan, a configured default) fails here.

    .venv/bin/python scripts/modules_alone.py            # the fast tier of each module (make test-alone)
    .venv/bin/python scripts/modules_alone.py --all      # every test of each module (engine, PostgreSQL)
    .venv/bin/python scripts/modules_alone.py tests/test_cascade.py tests/test_polars.py

A module with no test in the tier (all deselected) is counted apart, not as a pass. Exit status 0
when every module passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the Makefile's test-fast
FAST = "not engine and not postgres and not cluster and not gpu"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every test of each module, not only the fast tier")
    ap.add_argument("modules", nargs="*", help="the modules (default: every tests/test_*.py)")
    args = ap.parse_args()
    modules = args.modules or sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py"))
    passed, empty, failed = [], [], []
    t_all = time.monotonic()
    for module in modules:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", module,
               *([] if args.all else ["-m", FAST])]
        t0 = time.monotonic()
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        took = time.monotonic() - t0
        last = ([line for line in out.stdout.splitlines() if line.strip()] or ["(no output)"])[-1]
        # pytest: 0 passed, 5 no test collected (the module's tests are all outside the tier)
        verdict = "pass" if out.returncode == 0 else "none" if out.returncode == 5 else "FAIL"
        (passed if verdict == "pass" else empty if verdict == "none" else failed).append(module)
        print(f"{verdict:5} {took:6.1f} s  {module}: {last}", flush=True)
        if verdict == "FAIL":
            print("\n".join("      " + line for line in out.stdout.splitlines()
                            if line.startswith(("FAILED", "ERROR"))), flush=True)
    print(f"\n{len(modules)} modules in {time.monotonic() - t_all:.0f} s: {len(passed)} passed alone, "
          f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}, "
          f"{len(empty)} with no test in the tier")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
