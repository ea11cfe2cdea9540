#!/usr/bin/env python3
"""Watching a run: TensorBoard event files, GPU telemetry, stragglers (tier 4, CPU, two ranks under meshrun).

  one run of 6 steps, logging every 2, on synthetic tokens, with MESHTRAIN_SLOW_RANK=1:300 (rank 1 sleeps
  300 ms at the start of every step) and logging.tensorboard set:
  - tensorboard: the event file read back with the `tensorboard` package's EventAccumulator holds every
    number of every metrics.jsonl record (same step, float32 of the same value); a copy cut in the middle of
    its last record still reads, up to the record before;
  - telemetry: no GPU here, so no record has a "gpu" entry (readings absent, never invented); every logged
    record has both ranks' step and compute times;
  - stragglers: the log names rank 1 as the straggler, and the records' "straggler" entries say rank 1;
  - comm.nccl_env (given as a mapping): meshrun names what every worker gets; an unknown NCCL variable is
    one line naming it and the nearest valid one, exit 2, before any worker starts.
Exit code 77 (skipped) without the tensorboard package.
Usage: observe_test.py BIN_DIR SOURCE_DIR
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print(f"skipped: tensorboard is not installed ({sys.executable} -m pip install tensorboard)")
    sys.exit(77)

from e2e_support import metrics, run

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun = os.path.join(bin_dir, "meshrun")
work = tempfile.mkdtemp(prefix="meshtrain_observe_")
out_dir, tb_dir = os.path.join(work, "run"), os.path.join(work, "tb")
config = os.path.join(work, "tiny.yaml")
with open(config, "w") as f:
    f.write(f"""model:
  n_layer: 1
  n_head: 2
  d_model: 32
  max_seq_len: 16
data:
  train: synthetic
train:
  steps: 6
  micro_batch_size: 2
  device: cpu
  eval_every: 0
  threads: 1
  out_dir: {out_dir}
checkpoint:
  save_final: false
comm:
  nccl_env:
    NCCL_DEBUG: WARN
    NCCL_IB_HCA: mlx5_0,mlx5_1
logging:
  every: 2
  tensorboard: {tb_dir}
  straggler_threshold: 0.2
""")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def flatten(prefix, v, out):
    if isinstance(v, bool) or isinstance(v, (int, float)):
        out[prefix] = float(v)
    elif isinstance(v, dict):
        for k, x in v.items():
            flatten(f"{prefix}/{k}" if prefix else k, x, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            flatten(f"{prefix}/{i}", x, out)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def scalars(path_or_dir):
    acc = event_accumulator.EventAccumulator(path_or_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


env = dict(os.environ, MESHTRAIN_SLOW_RANK="1:300")
log = run([meshrun, "--standalone", "--nproc-per-node", "2", config], env=env)
records = [r for r in metrics(out_dir) if "loss" in r]
check([r["step"] for r in records] == [1, 2, 4, 6], f"logged steps 1, 2, 4, 6: {[r['step'] for r in records]}")

check("every worker gets NCCL_DEBUG=WARN NCCL_IB_HCA=mlx5_0,mlx5_1 (comm.nccl_env)" in log,
      "meshrun names the NCCL variables every worker gets")
p = subprocess.run([meshrun, "--standalone", "--nproc-per-node", "2", config, "--set=comm.nccl_env=NCCL_IB_HCAS=mlx5_0"],
                   capture_output=True, text=True, timeout=120)
err = p.stderr.strip().splitlines()
check(p.returncode == 2 and len(err) == 1 and "comm.nccl_env: unknown NCCL variable 'NCCL_IB_HCAS'; did you mean "
      "'NCCL_IB_HCA'?" in err[0] and "valid: NCCL_ALGO" in err[0], f"unknown NCCL variable: one line, exit 2 ({p.returncode}, {err})")

# Telemetry: absent without a GPU; both ranks' times in every logged record.
check(all("gpu" not in r and "nodes" not in r for r in records), "no GPU readings on a machine without a GPU")
check(all(len(r["ranks"]["step_time_s"]) == 2 and len(r["ranks"]["compute_time_s"]) == 2 for r in records),
      "every logged record has both ranks' step and compute times")

# Stragglers: rank 1 named in the log and the records (step 1 pays for warm-up: from step 2 on).
later = [r for r in records if r["step"] >= 2]
check(all(r.get("straggler", {}).get("rank") == 1 for r in later),
      f"records name rank 1 as the straggler: {[r.get('straggler') for r in later]}")
check(all(r["ranks"]["compute_time_s"][1] > r["ranks"]["compute_time_s"][0] + 0.2 for r in later),
      "rank 1's compute time is 300 ms above rank 0's")
check("straggler: rank 1 computed for" in log, "the step log names rank 1 as the straggler")

# TensorBoard: every number of every record, at its step.
files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
check(len(files) == 1, f"one event file in {tb_dir}: {files}")
tb = scalars(tb_dir)
want = {}
for r in metrics(out_dir):
    flat = {}
    flatten("", {k: v for k, v in r.items() if k != "step"}, flat)
    for tag, v in flat.items():
        want.setdefault(tag, {})[r["step"]] = v
check(set(tb) == set(want), f"the same tags: missing {sorted(set(want) - set(tb))}, extra {sorted(set(tb) - set(want))}")
bad = [(t, s) for t in want for s in want[t] if t in tb and (s not in tb[t] or tb[t][s] != f32(want[t][s]))]
check(not bad, f"every value at its step (float32): {bad[:5]}")
check("loss" in tb and "ranks/compute_time_s/1" in tb, "loss and per-rank compute times are scalars")

# A crash mid-record: the prefix stays readable.
cut_dir = os.path.join(work, "tb_cut")
os.makedirs(cut_dir)
data = open(files[0], "rb").read()
cut = os.path.join(cut_dir, os.path.basename(files[0]))
open(cut, "wb").write(data[:-7])
tb_cut = scalars(cut_dir)
check(tb_cut.get("loss", {}) and max(tb_cut["loss"]) == 4 and tb_cut["loss"] == {s: v for s, v in tb["loss"].items() if s <= 4},
      f"a file cut inside its last record reads up to the record before: loss steps {sorted(tb_cut.get('loss', {}))}")

shutil.rmtree(work, ignore_errors=True)
if failures:
    sys.exit(f"{len(failures)} check(s) failed: {failures}")
print("observe: all checks passed")
