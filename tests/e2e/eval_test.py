#!/usr/bin/env python3
"""`meshtrain eval` against the trainer's own validation, on the same windows (tier 4, CPU):

  one process:  a tiny model trained for a few steps; eval of its final checkpoint on data.val with
                --batches = train.eval_batches gives the val_loss the trainer logged last (rel 1e-6);
  two ranks:    the same under meshrun (a dp 2 run, eval under meshrun 2); the dp 2 checkpoint in one process
                over the same windows; the one-process checkpoint sharded by FSDP over 2 ranks (rel 1e-5);
  output:       --json (loss, perplexity = exp(loss), tokens), --help, and one-line errors.
Usage: eval_test.py BIN_DIR SOURCE_DIR
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_support import metrics, prepare_kjv, run

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_eval_")
EVAL_BATCHES = 4
prefix = prepare_kjv(meshtrain, src, work)
val = f"{prefix}_val.bin"
config = os.path.join(work, "tiny.yaml")
with open(config, "w") as f:
    f.write(f"""model:
  n_layer: 2
  n_head: 4
  d_model: 64
  max_seq_len: 32
data:
  train: {prefix}_train.bin
  val: {val}
train:
  steps: 8
  micro_batch_size: 4
  device: cpu
  eval_every: 8
  eval_batches: {EVAL_BATCHES}
  threads: 1
logging:
  every: 4
""")
failures = []


def last_val_loss(out_dir):
    return [r["val_loss"] for r in metrics(out_dir) if "val_loss" in r][-1]


def eval_json(cmd):
    out = run(cmd)
    line = [l for l in out.splitlines() if '{"checkpoint"' in l][-1]  # meshrun prefixes "[rank 0]: "
    return json.loads(line[line.index("{"):])


def expect_close(label, got, want, rel):
    ok = abs(got - want) <= rel * abs(want)
    print(f"{'ok  ' if ok else 'FAIL'} {label}: eval {got!r} vs trainer {want!r} (rel {rel:g})")
    if not ok:
        failures.append(label)


one = os.path.join(work, "one")
run([meshtrain, "train", config, f"--set=train.out_dir={one}"])
r = eval_json([meshtrain, "eval", f"{one}/checkpoints", "--data", val, "--batches", str(EVAL_BATCHES), "--json"])
expect_close("one process", r["loss"], last_val_loss(one), 1e-6)
assert r["step"] == 8 and r["tokens"] == EVAL_BATCHES * 4 * 32, r
assert abs(r["perplexity"] - math.exp(r["loss"])) < 1e-9 * r["perplexity"], r
text = run([meshtrain, "eval", f"{one}/checkpoints", "--data", val, "--batches", "2"])
assert "(step 8) on" in text and "perplexity" in text and "256 tokens" in text, text

two = os.path.join(work, "two")
run([meshrun, "--standalone", "--nproc-per-node", "2", config, f"--set=train.out_dir={two}"])
r = eval_json([meshrun, "--standalone", "--nproc-per-node", "2", "--no-python", meshtrain, "eval", f"{two}/checkpoints",
               "--data", val, "--batches", str(EVAL_BATCHES), "--json"])
expect_close("meshrun 2 ranks", r["loss"], last_val_loss(two), 1e-6)
assert r["data_ranks"] == 2 and r["tokens"] == 2 * EVAL_BATCHES * 4 * 32, r
# Rank r of a step takes windows [r·B, (r+1)·B): one process over twice the batches reads the same windows.
r = eval_json([meshtrain, "eval", f"{two}/checkpoints", "--data", val, "--batches", str(2 * EVAL_BATCHES), "--json"])
expect_close("dp 2 checkpoint in one process", r["loss"], last_val_loss(two), 1e-5)
r = eval_json([meshrun, "--standalone", "--nproc-per-node", "2", "--no-python", meshtrain, "eval", f"{one}/checkpoints",
               "--data", val, "--batches", str(EVAL_BATCHES // 2), "--set", "parallel.fsdp=2", "--json"])
expect_close("one-process checkpoint under FSDP 2", r["loss"], last_val_loss(one), 1e-5)

p = subprocess.run([meshtrain, "eval", "--help"], stdout=subprocess.PIPE, text=True)
if p.returncode != 0 or "--batches" not in p.stdout or "val_loss" not in p.stdout:
    failures.append("meshtrain eval --help")
for label, args, fragment in [
    ("no --data", [f"{one}/checkpoints"], "meshtrain eval: --data SHARDS is required"),
    ("too many batches", [f"{one}/checkpoints", "--data", val, "--batches", "100000"], "--batches: given 100000; '"),
    ("no checkpoint", [os.path.join(work, "nothing"), "--data", val], "nothing"),
    ("bad --set", [f"{one}/checkpoints", "--data", val, "--set", "train.micro_batch_size=0"],
     "train.micro_batch_size: given 0; valid ≥ 1"),
]:
    p = subprocess.run([meshtrain, "eval", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = p.returncode == 2 and len(lines) == 1 and fragment in lines[0]
    print(f"{'ok  ' if ok else 'FAIL'} eval / {label}: exit {p.returncode}: {p.stderr.strip()!r}")
    if not ok:
        failures.append(f"eval / {label}")

if failures:
    sys.exit(f"{len(failures)} failed: {failures}")
print("eval: ok")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
