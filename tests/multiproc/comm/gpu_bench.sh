#!/usr/bin/env bash
# `meshtrain bench comm --backend nccl` through meshrun on every visible GPU (1 KB .. 1 GB); exit 77 (skipped)
# without a GPU or without an NCCL build. usage: gpu_bench.sh BIN_DIR JSON_OUT
set -euo pipefail
bin=$1
json=$2
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${n:-0}" -lt 1 ]; then echo "gpu_bench: SKIP: no GPU visible"; exit 77; fi
if "$bin/meshtrain" bench comm --backend nccl --max-bytes 1K --min-seconds 0 2>&1 | grep -q "built without"; then
  echo "gpu_bench: SKIP: this meshtrain has no NCCL"; exit 77
fi
rm -f "$json"
"$bin/meshrun" --standalone --nproc-per-node "$n" --no-python "$bin/meshtrain" bench comm --backend nccl \
  --ops all_reduce,all_gather,reduce_scatter,broadcast --min-bytes 1K --max-bytes 1G --min-seconds 0.05 --json "$json"
# The JSON must name the backend and hold the 1 GiB all_reduce row.
grep -q '"backend": "meshtrain-nccl"' "$json"
grep -q '"op": "all_reduce", "bytes": 1073741824' "$json"
echo "gpu_bench: ok ($json)"
