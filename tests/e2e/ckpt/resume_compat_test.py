#!/usr/bin/env python3
"""A resume whose config does not fit the newest checkpoint stops with one line, and never falls back to an older
checkpoint that the run would then overwrite (tier 4; `meshtrain train`, one process on the CPU, a tiny Llama on the
King James text).

  lora_targets   LoRA adapters on all seven projections resumed with model.lora_targets q,v (the k, o, gate, up,
                 down adapters would be dropped from the next checkpoint), and adapters on q,v resumed with all seven
                 (the newest checkpoint "misses a tensor"): exit 2, one line naming model.lora_targets and the
                 targets the checkpoint holds.
  lora_alpha     the same adapters resumed with another model.lora_alpha: exit 2, one line naming it.
  incompatible   a complete step_4 saved by another model (another d_ff) beside this run's step_2: exit 2, one line
                 naming the tensor, instead of resuming from step_2 and saving a step_4 over it.
Each refusal leaves every checkpoint as it was.
Usage: resume_compat_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys

from ckpt_e2e import kjv_setup

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "resume_compat")
failures = []
LLAMA = ["model.family=llama", "model.n_kv_head=2", "model.tie_embeddings=false", "model.n_layer=2", "model.d_model=64",
         "data.seq_len=32", "model.max_seq_len=32"]
ALL = "q,k,v,o,gate,up,down"


def check(cond, what, log=""):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
        print(log[-4000:])


def train(out, steps, *sets):
    """`meshtrain train` of the tiny Llama for `steps` steps into `out`, a checkpoint every 2 steps, resume auto."""
    sets = [f"data.train={prefix}_train.bin", "data.val=", *LLAMA, "train.micro_batch_size=2", "train.threads=1",
            "logging.every=1", "train.eval_every=0", "train.sample_tokens=0", f"train.steps={steps}",
            "checkpoint.every=2", "checkpoint.keep=0", "schedule.warmup_steps=1", f"train.out_dir={out}",
            "checkpoint.resume=auto", *sets]
    cmd = [meshtrain, "train", config, *[f"--set={s}" for s in sets]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def trained(out, steps, *sets):
    rc, so, se = train(out, steps, *sets)
    if rc != 0:
        print(so[-3000:], se[-3000:])
        sys.exit(f"FAIL: training {out} exited {rc}")


def snapshot(ckpt):
    """Every file under a checkpoint directory with its size and modification time."""
    out = {}
    for root, _, files in os.walk(ckpt):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, ckpt)] = (os.path.getsize(p), os.stat(p).st_mtime_ns)
    return out


def refused(case, out, steps, needles, *sets):
    """Resuming `out` with `sets` must exit 2 with one stderr line holding every needle, and touch no checkpoint."""
    ckpt = os.path.join(out, "checkpoints")
    before = snapshot(ckpt)
    rc, so, se = train(out, steps, *sets)
    lines = [line for line in se.splitlines() if all(n in line for n in needles)]
    check(rc == 2 and len(lines) == 1, f"{case}: exit {rc} (want 2), one line with {needles}", so + se)
    if lines:
        print(f"     {lines[0]}")
    check(snapshot(ckpt) == before, f"{case}: every checkpoint as it was", so + se)


base_out = os.path.join(work, "base")
trained(base_out, 2)
base = os.path.join(base_out, "checkpoints", "step_00000002")
lora = ["model.lora_rank=4", "model.lora_alpha=8", f"checkpoint.init_from={base}"]

# All seven targets, saved at steps 2 and 4; resumed for 6 steps with q,v.
all_out = os.path.join(work, "lora_all")
trained(all_out, 4, *lora, f"model.lora_targets={ALL}")
refused("lora_targets all → q,v", all_out, 6,
        ["step_00000004", "holds LoRA adapters on " + ALL, "model.lora_targets is q,v", "valid " + ALL],
        *lora, "model.lora_targets=q,v")
refused("lora_alpha 8 → 16", all_out, 6, ["step_00000004", "lora_alpha 8", "model.lora_alpha is 16"],
        *[s for s in lora if "alpha" not in s], "model.lora_alpha=16", f"model.lora_targets={ALL}")

# q,v saved; resumed with all seven: the newest checkpoint is refused, not skipped for an older one.
qv_out = os.path.join(work, "lora_qv")
trained(qv_out, 4, *lora, "model.lora_targets=q,v")
refused("lora_targets q,v → all", qv_out, 6,
        ["step_00000004", "holds LoRA adapters on q,v", "model.lora_targets is " + ALL], *lora,
        f"model.lora_targets={ALL}")

# A complete step_4 of another model (d_ff 128) beside this run's step_2: not damage to skip.
ours, other = os.path.join(work, "ours"), os.path.join(work, "other")
trained(ours, 2)
trained(other, 4, "model.d_ff=128")
shutil.copytree(os.path.join(other, "checkpoints", "step_00000004"), os.path.join(ours, "checkpoints", "step_00000004"))
with open(os.path.join(ours, "checkpoints", "latest"), "w") as f:
    f.write("step_00000004\n")
refused("incompatible newest", ours, 6, ["step_00000004", "the current run needs", "checkpoint.resume=auto stops here"])

shutil.rmtree(work, ignore_errors=True)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
