#!/usr/bin/env bash
# Resharding across processes: save under one layout with N real ranks (meshrun, CPU backend), load under
# others with different world sizes; every rank compares its blocks with the global tensors.
#   reshard_matrix.sh BIN_DIR
set -euo pipefail
BIN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
run() { # NPROC ARGS...
  local n=$1; shift
  "$BIN/meshrun" --standalone --nproc-per-node "$n" --no-python "$BIN/ckpt_worker" "$@"
}
# save_layout:load_layout... (the world size is each layout's)
declare -A WORLD=([single]=1 [ddp2]=2 [fsdp2]=2 [tp2]=2 [fsdp3]=3 [fsdp4]=4 [fsdp2xtp2]=4 [ddp2xtp2]=4)
check() { # SAVE_LAYOUT LOAD_LAYOUT...
  local saved=$1; shift
  local dir="$WORK/$saved"
  run "${WORLD[$saved]}" save "$dir" "$saved" 5 10
  test -f "$dir/step_00000010/meta.json"
  for l in "$@"; do
    out=$(run "${WORLD[$l]}" load "$dir" "$l" 10)
    n=$(grep -c "loaded step 10 (saved by $saved)" <<<"$out" || true)
    if [ "$n" != "${WORLD[$l]}" ]; then echo "FAIL: $saved -> $l: $out" >&2; exit 1; fi
    echo "ok: saved by $saved (${WORLD[$saved]} ranks) -> loaded as $l (${WORLD[$l]} ranks)"
  done
}
# FSDP 4 into 2, 1, 3, TP 2, FSDP 2 × TP 2 — and the reverse directions.
check fsdp4 fsdp2 single fsdp3 tp2 fsdp2xtp2
check fsdp2xtp2 fsdp4 single tp2 ddp2xtp2
check tp2 fsdp4 fsdp3
check ddp2xtp2 fsdp4 single
# Each rank reads only the byte ranges of its own blocks (the worker checks bytes_read loading into the
# saving layout), and a long load's progress lines come from rank 0 alone (thresholds lowered to 0).
out=$(MESHTRAIN_PROGRESS_AFTER_S=0 MESHTRAIN_PROGRESS_EVERY_S=0 run 4 load "$WORK/fsdp4" fsdp4 10 2>&1)
n=$(grep -c "loaded step 10 (saved by fsdp4)" <<<"$out" || true)
p=$(grep -c "load step_00000010: .* done in" <<<"$out" || true)
if [ "$n" != 4 ] || [ "$p" != 1 ]; then echo "FAIL: fsdp4 -> fsdp4 with progress: $out" >&2; exit 1; fi
echo "ok: fsdp4 -> fsdp4: every rank read only its own ranges; one progress line (rank 0)"
echo "reshard matrix: all ok"
