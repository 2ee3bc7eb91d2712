"""The soak harness behind bench/bench_soak.py (issue 68), one job per module."""
