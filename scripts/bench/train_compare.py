#!/usr/bin/env python3
"""Single-GPU training throughput, side by side in one run: meshtrain (`meshtrain bench train`) vs the same
model and recipe in PyTorch eager and torch.compile (scripts/bench/train_torch.py), bf16, synthetic tokens.

Shapes: GPT-2 124M (micro-batch 32, T 1024), Llama 3.2 1B (8, 2048), Llama 3.1 8B's layer shape with 8 layers
(4, 2048), the default three; and the whole Llama 3.1 8B at micro-batch 1 and at micro-batch 2 with activation
checkpointing (T 2048; about 120 GiB: a 141 GB card), named only. Prints a table (tokens/s, MFU, peak memory,
ratios) and writes every row to OUT/train_compare.json.

Usage: train_compare.py MESHTRAIN_BIN OUT_DIR [--shapes NAME,...] [--variants NAME,...] [--no-compile] [--no-eager]
       [--steps N]
"""
import argparse
import json
import os
import subprocess
import sys

SHAPES = {  # name: (preset, batch, seq, layers, activation checkpointing)
    "gpt2-124m": ("gpt2-124m", 32, 1024, 0, False),
    "llama3.2-1b": ("llama3.2-1b", 8, 2048, 0, False),
    "llama3.1-8b-8L": ("llama3.1-8b", 4, 2048, 8, False),
    "llama3.1-8b": ("llama3.1-8b", 1, 2048, 0, False),
    "llama3.1-8b-mb2-ac": ("llama3.1-8b", 2, 2048, 0, True),
}
DEFAULT_SHAPES = ("gpt2-124m", "llama3.2-1b", "llama3.1-8b-8L")
# meshtrain's runs: as configured by default (fused kernels on), without the fused kernels, with the chunked loss,
# and with each fused lever switched off on its own (its gain = meshtrain's tokens/s over the variant's).
# FP8: the blocks' linear layers through FP8 matmuls (train.fp8), tensorwise and rowwise scaling.
# Graph: the forward and backward captured into a CUDA graph and replayed (train.cuda_graph: on).
# Attention: SDPA restricted to flash attention or to cuDNN attention (train.attention_backend; the default run
# is SDPA's own pick), to choose the kernel per shape.
# Adds: without the adds done by the GEMMs (train.fused_adds=false: the residual add and the shared-input
# gradient sums as add kernels). Tuned: cuBLASLt's candidate kernels timed per shape (train.gemm_tuning).
# ATen AdamW: the optimizer's update through at::_fused_adamw_ instead of meshtrain's kernel
# (optimizer.fused_kernel=false). FP8 delayed: tensorwise FP8 scaled from the amaxes of earlier casts
# (train.fp8=delayed: one pass over each operand where tensorwise takes two).
VARIANTS = ("meshtrain", "meshtrain-unfused", "meshtrain-chunked-loss", "meshtrain-no-fused-norm",
            "meshtrain-no-fused-gelu", "meshtrain-no-epilogues", "meshtrain-fp8", "meshtrain-fp8-rowwise",
            "meshtrain-fp8-delayed", "meshtrain-graph",
            "meshtrain-flash", "meshtrain-cudnn", "meshtrain-no-fused-adds", "meshtrain-tuned",
            "meshtrain-aten-adamw")
HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1200)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)} — see {log}", file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meshtrain")
    ap.add_argument("out")
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="of: " + ", ".join(SHAPES))
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-eager", action="store_true", help="no PyTorch eager run (its ratios print as nan)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="meshtrain variants to run, of: " + ", ".join(VARIANTS))
    a = ap.parse_args()
    variants = a.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"--variants: unknown {', '.join(bad)}; valid: {', '.join(VARIANTS)}")
    bad = [s for s in a.shapes.split(",") if s not in SHAPES]
    if bad:
        ap.error(f"--shapes: unknown {', '.join(bad)}; valid: {', '.join(SHAPES)}")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name in a.shapes.split(","):
        preset, batch, seq, layers, ac = SHAPES[name]
        common = ["--preset", preset, "--batch", str(batch), "--seq", str(seq), "--layers", str(layers),
                  "--steps", str(a.steps)]
        torch_cmd = [sys.executable, os.path.join(HERE, "train_torch.py")] + common + (["--ac"] if ac else [])
        mt = [a.meshtrain, "bench", "train"] + (["--activation-checkpointing"] if ac else [])
        runs = [("meshtrain", mt + common),
                # Without the fused CUDA kernels (loss, RoPE, SwiGLU): PyTorch's composite ops, as eager runs them.
                ("meshtrain-unfused", mt + ["--set", "train.fused_kernels=false"] + common),
                # The same run with the chunked head + loss (never holds the full logits: less memory).
                ("meshtrain-chunked-loss", mt + ["--set", "train.loss_chunk_mb=2048"] + common),
                # One lever off, the other kernels on: the residual add + norm kernel; GPT-2's bias + GELU.
                ("meshtrain-no-fused-norm", mt + ["--set", "train.fused_norm=false"] + common),
                ("meshtrain-no-fused-gelu", mt + ["--set", "train.fused_gelu=false"] + common),
                # Without GPT-2's biases, GELU and residual in the GEMMs' cuBLASLt epilogues (the MLP as one
                # function, every biased linear's bias gradient in its weight-gradient GEMM).
                ("meshtrain-no-epilogues", mt + ["--set", "train.gemm_epilogues=false"] + common),
                ("meshtrain-fp8", mt + ["--set", "train.fp8=tensorwise"] + common),
                ("meshtrain-fp8-rowwise", mt + ["--set", "train.fp8=rowwise"] + common),
                ("meshtrain-fp8-delayed", mt + ["--set", "train.fp8=delayed"] + common),
                ("meshtrain-graph", mt + ["--cuda-graph"] + common),
                ("meshtrain-flash", mt + ["--attention", "flash"] + common),
                ("meshtrain-cudnn", mt + ["--attention", "cudnn"] + common),
                ("meshtrain-no-fused-adds", mt + ["--set", "train.fused_adds=false"] + common),
                ("meshtrain-tuned", mt + ["--set", "train.gemm_tuning=true"] + common),
                ("meshtrain-aten-adamw", mt + ["--set", "optimizer.fused_kernel=false"] + common),
                ("pytorch-eager", torch_cmd)]
        runs = [r for r in runs if r[0] in variants or (r[0] == "pytorch-eager" and not a.no_eager)]
        if not a.no_compile:
            runs.append(("pytorch-compile", torch_cmd + ["--compile"]))
        for impl, cmd in runs:
            js = os.path.join(a.out, f"{name}.{impl}.json")
            if run(cmd + ["--json", js], os.path.join(a.out, f"{name}.{impl}.log")):
                r = json.load(open(js))
                r.update(impl=impl, shape=name)
                rows.append(r)
    json.dump(rows, open(os.path.join(a.out, "train_compare.json"), "w"), indent=1)
    # Last-step loss: the meshtrain variants see the same synthetic tokens, so theirs agree within bf16 noise.
    print(f"{'shape':16s} {'impl':24s} {'tokens/s':>10s} {'MFU':>7s} {'peak GiB':>9s} {'vs eager':>9s} "
          f"{'vs compile':>10s} {'loss':>8s}")
    for name in a.shapes.split(","):
        def ref(impl):
            r = next((r for r in rows if r["shape"] == name and r["impl"] == impl), None)
            return r["tokens_per_s"] if r else float("nan")
        eager, compiled = ref("pytorch-eager"), ref("pytorch-compile")
        for r in (r for r in rows if r["shape"] == name):
            print(f"{name:16s} {r['impl']:24s} {r['tokens_per_s']:10.0f} {100 * r['mfu']:6.1f}% "
                  f"{r['peak_memory_bytes'] / 2**30:9.2f} {r['tokens_per_s'] / eager:9.3f} "
                  f"{r['tokens_per_s'] / compiled:10.3f} {r.get('last_loss', float('nan')):8.4f}")


if __name__ == "__main__":
    main()
