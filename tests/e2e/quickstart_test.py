#!/usr/bin/env python3
"""End-to-end (tier 4): the quickstart config for a few steps under meshrun, two CPU workers.

Asserts that
  - the loss falls (first logged loss vs last) and the run leaves metrics JSONL and a checkpoint;
  - both data-parallel ranks hold bit-identical parameters (each rank logs a CRC-32 of its parameters);
  - the two-rank run follows the single-process run with the same global batch (2 × 8 = 1 × 16): the
    averaged gradient is the same up to fp32 summation order, so losses agree within 2e-3 over 12 steps;
  - gradient accumulation (micro-batch 8 × 2) follows the single batch of 16 within the same tolerance;
  - the loss curve stays within tolerance of the baseline kept in tests/e2e/quickstart_baseline.json
    (regenerate with MESHTRAIN_UPDATE_BASELINE=1 after an intended change);
  - resuming from the step-6 checkpoint reproduces steps 7..12 bit for bit (losses and parameters);
  - resuming from the saved checkpoint continues the run (`checkpoint.resume: auto`).
Usage: quickstart_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import re
import shutil
import sys
import tempfile

from e2e_support import metrics, prepare_kjv, run

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
config = os.path.join(src, "configs", "quickstart.yaml")
baseline_path = os.path.join(src, "tests", "e2e", "quickstart_baseline.json")
STEPS = 12
work = tempfile.mkdtemp(prefix="meshtrain_e2e_")


def losses(out_dir):
    recs = metrics(out_dir)
    return [r["loss"] for r in recs if "loss" in r], [r["val_loss"] for r in recs if "val_loss" in r]


prefix = prepare_kjv(meshtrain, src, work)
common = [f"--set=data.train={prefix}_train.bin", f"--set=data.val={prefix}_val.bin",
          f"--set=train.steps={STEPS}", "--set=logging.every=1", f"--set=train.eval_every={STEPS}",
          "--set=train.eval_batches=2", "--set=train.sample_tokens=16", "--set=checkpoint.every=6"]

# Two workers under meshrun.
dp_dir = os.path.join(work, "dp")
out = run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, f"--set=train.out_dir={dp_dir}"])
sums = dict(re.findall(r"\[rank (\d)\]: .*parameter checksum ([0-9a-f]{8}) after step", out))
assert set(sums) == {"0", "1"}, f"expected a checksum line from both ranks, got {sums}"
assert sums["0"] == sums["1"], f"ranks diverged: rank 0 {sums['0']} vs rank 1 {sums['1']}"
dp_loss, dp_val = losses(dp_dir)
assert len(dp_loss) == STEPS, dp_loss
assert dp_loss[-1] < dp_loss[0] - 1.0, f"loss did not fall: {dp_loss}"
assert dp_val and dp_val[-1] < 4.0, f"validation loss too high: {dp_val}"
ckpt = os.path.join(dp_dir, "checkpoints")
assert open(os.path.join(ckpt, "latest")).read().strip() == f"step_{STEPS:08d}"
assert os.path.exists(os.path.join(ckpt, f"step_{6:08d}", "meta.json"))

# Exact resume: restarting from the step-6 checkpoint reproduces steps 7..12 bit for bit (losses as logged,
# and the final parameter checksum).
rs_dir = os.path.join(work, "resumed")
out_rs = run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, f"--set=train.out_dir={rs_dir}",
              f"--set=checkpoint.resume={ckpt}/step_{6:08d}"])
rs_loss, _ = losses(rs_dir)
assert rs_loss == dp_loss[6:], f"resumed losses {rs_loss} differ from the uninterrupted run's {dp_loss[6:]}"
rs_sums = dict(re.findall(r"\[rank (\d)\]: .*parameter checksum ([0-9a-f]{8}) after step", out_rs))
assert rs_sums == sums, f"resumed parameters {rs_sums} differ from the uninterrupted run's {sums}"

# One process, the same global batch.
sp_dir = os.path.join(work, "single")
run([meshtrain, "train", config, *common, "--set=train.micro_batch_size=16", f"--set=train.out_dir={sp_dir}"])
sp_loss, _ = losses(sp_dir)
worst = max(abs(a - b) for a, b in zip(dp_loss, sp_loss))
print(f"max |loss(dp 2) - loss(single)| over {STEPS} steps: {worst:.2e}")
assert worst < 2e-3, f"data-parallel run departs from the single-process run: {dp_loss} vs {sp_loss}"

# Gradient accumulation: 2 micro-batches of 8 equal one batch of 16 (same windows, mean of the two losses).
acc_dir = os.path.join(work, "accum")
run([meshtrain, "train", config, *common, "--set=train.micro_batch_size=8", "--set=train.grad_accum=2",
     f"--set=train.out_dir={acc_dir}"])
acc_loss, _ = losses(acc_dir)
worst = max(abs(a - b) for a, b in zip(acc_loss, sp_loss))
print(f"max |loss(8 × 2 accumulated) - loss(16)| over {STEPS} steps: {worst:.2e}")
assert worst < 2e-3, f"accumulation departs from the large batch: {acc_loss} vs {sp_loss}"

# Baseline curve (tier 4).
if os.environ.get("MESHTRAIN_UPDATE_BASELINE") == "1":
    with open(baseline_path, "w") as f:
        json.dump({"config": "configs/quickstart.yaml", "steps": STEPS, "loss": dp_loss}, f, indent=1)
    print("baseline written:", baseline_path)
base = json.load(open(baseline_path))["loss"]
drift = max(abs(a - b) for a, b in zip(dp_loss, base))
print(f"max |loss - baseline|: {drift:.2e}")
assert drift < 0.05, f"loss curve departs from the baseline {base}: {dp_loss}"

# Resume: a new run of 4 more steps starts from the latest checkpoint.
out = run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, f"--set=train.out_dir={dp_dir}",
           f"--set=train.steps={STEPS + 4}", "--set=checkpoint.resume=auto"])
assert f"resumed from {ckpt}/step_{STEPS:08d} at step {STEPS}" in out, "did not resume"
more, _ = losses(dp_dir)
assert len(more) == STEPS + 4 and more[-1] < dp_loss[0] - 1.0, more

shutil.rmtree(work)
print("quickstart e2e: ok")
