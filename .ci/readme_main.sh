#!/usr/bin/env bash
# The README's main command as a new user runs it: a fresh venv, the project installed without
# extras, then `autotune sweep ... && autotune db list`. CI runs it at the tiny size class
# (--size tiny) with its own DB, so it takes a minute instead of several.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q torch==2.13.0
"$work/venv/bin/python" -m pip install -q -e .
export LOOPNEST_DB="sqlite:///$work/tuning.db" LOOPNEST_CACHE_DIR="$work/cache"
"$work/venv/bin/autotune" sweep softmax layernorm sum_dim0 --backend cpp --trials 12 --size tiny --no-progress
"$work/venv/bin/autotune" db list
