#!/usr/bin/env python3
"""GPU time a step by kind of kernel, for one or more Chrome/Perfetto traces side by side: meshtrain's
(`meshtrain bench train --profile DIR` writes DIR/rank_0.trace.json) beside PyTorch's (`train_torch.py
--profile DIR` writes DIR/trace.json), to see where two runs of one model differ — GEMMs, attention, norms,
the loss, the optimizer, casts — before looking at single kernels.

A kernel's kind comes from its name, the first of KINDS that matches (meshtrain's own kernels are named after
their op: add_norm_*, cross_entropy_*, swiglu_*, gelu_bias_*, rope_*, column_sum_*, fp8_*; torch.compile's
Triton kernels name the ops they fused). Prints, per trace, ms a step for each kind (the traced kernel time
divided by --steps), the total, and the --top kernels by time with their kind; with --json OUT, the same as JSON.

Usage: kernel_kinds.py TRACE.json [TRACE.json ...] [--steps 3] [--top 15] [--json OUT]
"""
import argparse
import json
import re
from collections import defaultdict

from trace_gaps import load  # the traces' device events, one reader for both tools

# (kind, pattern): the first match wins, so the specific names come before the generic ones.
KINDS = (
    ("attention", r"sdpa|flash|fmha|attn|cudnn"),
    ("gemm", r"nvjet|gemm|cutlass|xmma|cublas|splitk|scaled_mm"),
    ("loss", r"cross_entropy|softmax|nll"),
    ("optimizer", r"adam|FusedOptimizer|LpNorm|foreach"),
    ("norm", r"norm"),
    ("rope", r"rope|rotary"),
    ("activation", r"swiglu|silu|gelu"),
    ("fp8 cast", r"fp8|float8"),
    ("cast/copy", r"copy|cast|convert"),
    ("reduction", r"reduce|column_sum|sum"),
    ("memset/memcpy", r"memset|memcpy"),
)


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def summarize(path, steps, top):
    by_kind, by_name = defaultdict(float), defaultdict(float)
    for e in load(path)[0]:
        ms = float(e.get("dur", 0)) / 1000.0 / steps
        by_kind[kind_of(e["name"])] += ms
        by_name[e["name"]] += ms
    names = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    return {"trace": path, "total_ms": sum(by_kind.values()), "kinds": dict(by_kind),
            "top": [{"ms": ms, "kind": kind_of(n), "name": n} for n, ms in names]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", type=float, default=3, help="steps the traces hold (default 3, as --profile records)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.steps <= 0:
        ap.error(f"--steps: given {a.steps}; valid: > 0")
    runs = [summarize(p, a.steps, a.top) for p in a.traces]
    kinds = sorted({k for r in runs for k in r["kinds"]}, key=lambda k: -max(r["kinds"].get(k, 0) for r in runs))
    print(f"GPU time a step (ms), {a.steps:g} steps a trace")
    print(f"{'kind':16s}" + "".join(f"{'#' + str(i + 1):>12s}" for i in range(len(runs))))
    for k in kinds + ["all"]:
        vals = [r["total_ms"] if k == "all" else r["kinds"].get(k, 0.0) for r in runs]
        print(f"{k:16s}" + "".join(f"{v:12.2f}" for v in vals))
    for i, r in enumerate(runs):
        print(f"\n#{i + 1} {r['trace']}: top {len(r['top'])} kernels (ms a step)")
        for t in r["top"]:
            print(f"  {t['ms']:8.2f}  {t['kind']:14s} {t['name'][:100]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": a.steps, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
