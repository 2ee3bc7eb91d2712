#!/usr/bin/env bash
# The RelServe experiments on the real engine (paper Fig. 9-11, Table 6), side by side in one run
# per trace: every policy at two loads, each relQuery's isolated time, and the simulator replaying
# the same runs with the machine's calibrated step model.
#   1. the benchmark trace: 20 relQueries (1-20 rows, the five query types of the paper over
#      rotten_tomatoes, amazon_reviews and beer_ratings, seed 5), at x1 and x1.5 of 0.25 relQ/s;
#   2. the long trace: 12 relQueries (1-10 rows, prompts of 200-700 tokens, answers of 64-128
#      tokens, over rotten_tomatoes, amazon_reviews, beer_reviews and movies_small, seed 11), at
#      x2 and x3 of 0.1 relQ/s.
# About 45 minutes on the 2-core CPU machines; results in bench/out/. Run `relserve calibrate`
# first on a new kind of machine (the policy and the simulator use its step model and arranger).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
.venv/bin/relserve bench trace --out bench/out/trace.jsonl \
  --table rotten_tomatoes,amazon_reviews,beer_ratings --n 20 --rate 0.25 --rows 1,20 --seed 5
.venv/bin/relserve bench trace --kind long --out bench/out/trace_long.jsonl \
  --table rotten_tomatoes,amazon_reviews,beer_reviews,movies_small --n 12 --rate 0.1 --rows 1,10 --seed 11
policies="${POLICIES:-vllm,fcfs,sarathi,sp,relserve,relserve-pp,relserve-dp}"
.venv/bin/relserve bench run --trace bench/out/trace.jsonl --loads "${LOADS:-1,1.5}" --policies "$policies" \
  --json bench/out/policies.json --markdown bench/out/policies.md --plots bench/out/plots
.venv/bin/relserve bench run --trace bench/out/trace_long.jsonl --loads "${LONG_LOADS:-2,3}" --policies "$policies" \
  --json bench/out/policies_long.json --markdown bench/out/policies_long.md --plots bench/out/plots_long
