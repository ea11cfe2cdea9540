#!/usr/bin/env python3
"""Tensor parallelism on GPUs (NCCL): `meshtrain train` with tp 2 and sequence parallelism on two GPUs against
one GPU, then a bf16 run. Exit 77 (skipped) with fewer than two NVIDIA GPUs.

Asserts that
  - TP 2 (sequence parallel, fp32) follows the single-GPU fp32 run on the same batches within 2e-3 per step
    (matmuls split over two GPUs sum in another order; a gradient counted twice or a rank reading other data
    departs by far more), with the same tokens per step;
  - TP 2 in bf16 (autocast) trains: the loss falls by 1.0 over the run, validation runs, a sample is printed;
  - the worker logs the tp placement (NVLink or the note why not) unless CUDA_VISIBLE_DEVICES is set.
Usage: tp_gpu_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_support import metrics, prepare_kjv, run, skip_without_gpu

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
skip_without_gpu()
gpus = [l for l in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
        if l.startswith("GPU ")]
if len(gpus) < 2:
    print(f"{len(gpus)} GPU(s) here, tensor parallelism needs 2: skipped")
    sys.exit(77)

config = os.path.join(src, "configs", "quickstart.yaml")
STEPS, SEQ = 30, 128
work = tempfile.mkdtemp(prefix="meshtrain_tp_gpu_")


prefix = prepare_kjv(meshtrain, src, work)
common = [f"--set=data.train={prefix}_train.bin", f"--set=data.val={prefix}_val.bin", "--set=train.device=cuda",
          f"--set=model.max_seq_len={SEQ}", f"--set=train.steps={STEPS}", "--set=logging.every=1",
          f"--set=train.eval_every={STEPS}", "--set=train.eval_batches=2", "--set=train.sample_tokens=32",
          "--set=checkpoint.every=0", "--set=checkpoint.save_final=false", "--set=train.micro_batch_size=8"]
fp32 = ["--set=train.dtype=fp32"]

one = os.path.join(work, "one_gpu")
run([meshtrain, "train", config, *common, *fp32, f"--set=train.out_dir={one}"])
tp = os.path.join(work, "tp2_sp")
out = run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, *fp32, "--set=parallel.tp=2",
           "--set=parallel.sequence_parallel=true", f"--set=train.out_dir={tp}"])
if "CUDA_VISIBLE_DEVICES" not in os.environ:  # else NVML's indices need not be CUDA's: the check is skipped
    assert "tp placement:" in out, "no tp placement line"
ref = [r for r in metrics(one) if "loss" in r]
got = [r for r in metrics(tp) if "loss" in r]
assert len(got) == STEPS == len(ref), (len(got), len(ref))
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(got, ref))
print(f"max |loss(tp 2, 2 GPUs) - loss(1 GPU)| over {STEPS} steps (fp32): {worst:.2e}")
assert worst < 2e-3, f"TP departs from one GPU: {[r['loss'] for r in got]} vs {[r['loss'] for r in ref]}"
assert got[-1]["tokens"] == ref[-1]["tokens"] == STEPS * 8 * SEQ, (got[-1]["tokens"], ref[-1]["tokens"])

bf = os.path.join(work, "tp2_bf16")
out = run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, "--set=train.dtype=bf16",
           "--set=parallel.tp=2", "--set=parallel.sequence_parallel=true", f"--set=train.out_dir={bf}"])
recs = metrics(bf)
loss = [r["loss"] for r in recs if "loss" in r]
assert loss[-1] < loss[0] - 1.0, f"bf16 TP loss did not fall: {loss}"
assert any("val_loss" in r for r in recs) and f"sample at step {STEPS} (temperature 0.8, top-k 40):" in out

shutil.rmtree(work)
print("tensor parallelism on GPUs: ok")
