#!/usr/bin/env bash
# The quickstart: set up if needed, build, prepare the King James text as byte-level shards, and train a
# small GPT with two CPU workers under meshrun:  meshrun --nproc-per-node 2 configs/quickstart.yaml
# Leaves runs/quickstart/{metrics.jsonl,checkpoints/} behind. Extra arguments go to the trainer
# (e.g. --set train.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_TARGETS="meshrun meshtrain" scripts/build.sh
mkdir -p runs/quickstart/data
if [ ! -f runs/quickstart/data/kjv_train.bin ]; then
  build/bin/meshtrain prepare data/kjv/kjv-genesis-2kings.txt --out runs/quickstart/data/kjv --val-fraction 0.05
fi
# --overwrite: a second quickstart starts its run afresh (on purpose: the log says what it removed) rather
# than stop at the first run's checkpoints; --set checkpoint.resume=auto continues them instead.
build/bin/meshrun --nproc-per-node 2 configs/quickstart.yaml --overwrite "$@"
echo
echo "quickstart: metrics in runs/quickstart/metrics.jsonl, checkpoints in runs/quickstart/checkpoints/"
echo "quickstart: sample again with  build/bin/meshtrain generate runs/quickstart/checkpoints --prompt 'And Moses'"
