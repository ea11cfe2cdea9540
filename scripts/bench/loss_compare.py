#!/usr/bin/env python3
"""Loss curves on real text, one run per variant (the speed issue's accuracy targets: the fused kernels' loss
curve over the first 200 steps equal to the unfused run's within bf16 noise; FP8's loss after 1,000 steps
within 1 % of bf16). Trains the same byte-level Llama-shaped model on the King James text (data/kjv) from the
same seed, once per variant, on one GPU, and compares each with the first variant: the largest relative gap of
the 20-step mean train loss over the first 200 steps, the train loss over the last 50 steps, and the
validation loss at the end. Prints one table and writes OUT/loss_compare.json.

Variants: bf16 (every fused kernel), unfused (train.fused_kernels=false), fp8 (train.fp8=tensorwise),
fp8-rowwise (train.fp8=rowwise), fp8-delayed (train.fp8=delayed: scales from earlier casts' amaxes), offload
(optimizer.offload=cpu), offload-delay (the same with optimizer.offload_delay=1: each step's gradient one update
stale; docs/offload.md).

--small trains a 2-layer, 128-wide model on 128-token sequences (micro-batch 8) instead: minutes on a CPU,
for variants whose effect on the loss does not depend on the model's size (offload, offload-delay).

Usage: loss_compare.py MESHTRAIN_BIN OUT_DIR [--steps 1000] [--variants bf16,unfused,fp8,fp8-rowwise]
                       [--device cuda] [--small] [--lr 1e-3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every linear dimension a multiple of 16 (FP8 GEMMs need it); the vocabulary is the 256 bytes.
MODEL = {"n_layer": 8, "n_head": 8, "d_model": 512, "d_ff": 1536, "max_seq_len": 512, "micro_batch_size": 16}
SMALL = {"n_layer": 2, "n_head": 4, "d_model": 128, "d_ff": 384, "max_seq_len": 128, "micro_batch_size": 8}
CONFIG = """model:
  family: llama
  vocab_size: 256
  n_layer: {n_layer}
  n_head: {n_head}
  n_kv_head: 4
  d_model: {d_model}
  d_ff: {d_ff}
  max_seq_len: {max_seq_len}
data:
  train: {data}_train.bin
  val: {data}_val.bin
optimizer:
  lr: {lr}
  weight_decay: 0.1
  grad_clip: 1.0
schedule:
  kind: cosine
  warmup_steps: 50
  min_lr_ratio: 0.1
train:
  steps: {steps}
  micro_batch_size: {micro_batch_size}
  grad_accum: 1
  device: {device}
  dtype: bf16
  seed: 1234
  eval_every: {steps}
  eval_batches: 32
  sample_tokens: 0
  out_dir: {out}
checkpoint:
  every: 0
logging:
  every: 1
"""


def run(cmd, log):
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"{' '.join(cmd)} exited {rc}; its output: {log}")


VARIANTS = {  # name: its settings over CONFIG (every fused kernel, no FP8, the optimizer on the device)
    "bf16": [],
    "unfused": ["train.fused_kernels=false"],
    # Every layer in FP8 (train.fp8_min_width 0): the check is FP8's numerics, on a model narrower than the default
    # width FP8 starts at.
    "fp8": ["train.fp8=tensorwise", "train.fp8_min_width=0"],
    "fp8-rowwise": ["train.fp8=rowwise", "train.fp8_min_width=0"],
    "fp8-delayed": ["train.fp8=delayed", "train.fp8_min_width=0"],
    "offload": ["optimizer.offload=cpu"],
    "offload-delay": ["optimizer.offload=cpu", "optimizer.offload_delay=1"],
}


def smoothed(losses, window=20):
    return [statistics.mean(losses[i:i + window]) for i in range(0, len(losses) - window + 1, window)]


def train(a, data, name):
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    cfg = os.path.join(out, "config.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(data=data, steps=a.steps, out=out, device=a.device, lr=a.lr,
                              **(SMALL if a.small else MODEL)))
    run([a.meshtrain, "train", cfg, *[f"--set={s}" for s in VARIANTS[name]]], os.path.join(out, "train.log"))
    recs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    losses = [r["loss"] for r in recs if "loss" in r]
    vals = [r["val_loss"] for r in recs if "val_loss" in r]
    tok_s = [r["tokens_per_s"] for r in recs if "tokens_per_s" in r]
    return {"variant": name, "steps": len(losses), "curve200": smoothed(losses[:200]),
            "train_loss_last50": statistics.mean(losses[-50:]),
            "val_loss": vals[-1] if vals else float("nan"), "tokens_per_s": statistics.median(tok_s[10:] or tok_s)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("meshtrain")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke run, bf16/unfused)")
    p.add_argument("--small", action="store_true", help="a 2-layer, 128-wide model on 128-token sequences")
    p.add_argument("--lr", type=float, default=1e-3, help="optimizer.lr (peak, after 50 warmup steps)")
    a = p.parse_args()
    names = a.variants.split(",")
    for n in names:
        if n not in VARIANTS:
            sys.exit(f"--variants: unknown '{n}'; valid: {', '.join(VARIANTS)}")
    os.makedirs(a.out, exist_ok=True)
    data = os.path.join(a.out, "data", "kjv")
    os.makedirs(os.path.dirname(data), exist_ok=True)
    run([a.meshtrain, "prepare", os.path.join(ROOT, "data", "kjv", "kjv-genesis-2kings.txt"), "--out", data,
         "--val-fraction", "0.05"], os.path.join(a.out, "prepare.log"))
    rows = [train(a, data, n) for n in names]
    base = rows[0]
    vs = "vs " + base["variant"]
    print(f"{'variant':<14} {'steps':>6} {'200-step curve gap':>19} {'train loss (last 50)':>21} {vs:>10} "
          f"{'val loss':>9} {vs:>10} {'tokens/s':>10}")
    for r in rows:
        r["curve200_max_rel_gap"] = max(abs(x / y - 1) for x, y in zip(r["curve200"], base["curve200"]))
        r["train_loss_ratio"] = r["train_loss_last50"] / base["train_loss_last50"]
        r["val_loss_ratio"] = r["val_loss"] / base["val_loss"]
        print(f"{r['variant']:<14} {r['steps']:>6} {100 * r['curve200_max_rel_gap']:>18.2f}% "
              f"{r['train_loss_last50']:>21.4f} {r['train_loss_ratio']:>10.4f} {r['val_loss']:>9.4f} "
              f"{r['val_loss_ratio']:>10.4f} {r['tokens_per_s']:>10.0f}")
    with open(os.path.join(a.out, "loss_compare.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
