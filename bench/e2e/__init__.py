"""The end-to-end benchmark (``bench/bench_e2e.py``), one job per module:

* ``workload``: the SQL statements, sessions and seeded arrivals;
* ``sessions``: running one pass of sessions against a contender and timing it;
* ``contenders/``: what each contender is (vLLM's server per row, vLLM offline per statement,
  relserve through its public DuckDB surface against ``relserve serve``);
* ``processes``, ``prometheus``: starting and stopping servers, reading their token counters;
* ``stats``, ``report``: per-pass figures, the comparison, Markdown and the plot;
* ``runner``: each contender in a process of its own, then the report.
"""
