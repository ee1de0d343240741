#!/usr/bin/env bash
# One prepared GPU check (benchmarks/gpu_check.py): lmlab's step against nanoGPT and Hugging
# Face, compiled and eager, and `lmlab pretrain` at its defaults; writes OUT_DIR/gpu_check.json.
# Offline: nothing is fetched; lmlab is imported from this checkout. nanoGPT's model.py is
# read from $NANOGPT (its row is left out, with a note, without it).
#   [NANOGPT=path/model.py] [WHEELS=folder] bash benchmarks/gpu_check.sh OUT_DIR [--device cpu --tiny ...]
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: benchmarks/gpu_check.sh OUT_DIR [options of benchmarks/gpu_check.py]" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"
shift
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# A GPU image may lack one of lmlab's light dependencies (zstandard, say): with no network,
# $WHEELS may name a folder of wheels brought along, installed from there and nowhere else.
if [ -n "${WHEELS:-}" ] && [ -d "$WHEELS" ]; then
    python -m pip install --quiet --no-index --no-deps "$WHEELS"/*.whl
fi
export PYTHONUNBUFFERED=1
python "$root/benchmarks/gpu_check.py" "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
