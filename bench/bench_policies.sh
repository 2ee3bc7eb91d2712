#!/usr/bin/env bash
# The RelServe experiments on the real engine (paper Fig. 9-11, Table 6), side by side in one run:
# one trace of real rows from ../shared/datasets, replayed at three loads under all seven policies.
# About 45 minutes on the 2-core CPU machines; results in bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
.venv/bin/relserve bench trace --out bench/out/trace.jsonl \
  --table rotten_tomatoes,amazon_reviews,beer_ratings --n 40 --rate 0.25 --rows 1,40 --seed 5
.venv/bin/relserve bench run --trace bench/out/trace.jsonl --loads "${LOADS:-1,1.5,2}" \
  --policies "${POLICIES:-vllm,fcfs,sarathi,sp,relserve,relserve-pp,relserve-dp}" \
  --json bench/out/policies.json --markdown bench/out/policies.md --plots bench/out/plots
