#!/usr/bin/env bash
# Starts N copies of a worker by hand, the way torch.distributed's env:// expects without a launcher: RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (free port); rank 0 hosts the store.
# Exit status: the first non-zero worker status, else 0.   usage: run_local.sh N WORKER [ARGS...]
set -u
n=$1; shift
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    TORCHELASTIC_USE_AGENT_STORE= "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"; rc=$?
  if [[ $rc -ne 0 && $status -eq 0 ]]; then status=$rc; fi
done
exit $status
