"""bench_quality.py with the label plan's worked examples written by the model (issue 62).

Runs ``bench/bench_quality.py`` with its own arguments, the adaptive plan's two worked examples
replaced as in ``plan_stability_examples.py --variants checked``: two rows the model writes for
the question ('"<question>" Write an example <column> where the answer is yes.', and "no"), kept
only where the model recognises them (each scored alone in the chosen layout lies beyond half of
the sampled rows in its own direction), else the table's rows as built. Compare
against bench_quality.py's own run of the same arguments:

    .venv/bin/python bench/bench_quality.py --prevalence --configs default --group tuning --out bench/out/q_built.json
    .venv/bin/python bench/experiments/written_examples_quality.py --prevalence --configs default --group tuning --out bench/out/q_written.json

Written up in the notebook (quality-passes.md, "Examples the model writes itself").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_quality  # noqa: E402
from plan_stability_examples import model_written_examples  # noqa: E402

if __name__ == "__main__":
    with model_written_examples(by_question=True, checked=True):
        bench_quality.main()
