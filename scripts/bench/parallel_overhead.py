#!/usr/bin/env python3
"""Overhead of each data-parallel / sharding wrapper at world size 1 against the plain model (goal ≤ 3%).

Runs `meshtrain train` on one GPU with the single-GPU benchmark config (GPT-2 124M, seq 1024, micro-batch 16,
bf16) once per layout, forced through its wrapper with parallel.force_wrapper (a group of one: no
communication, so what is measured is the wrapper's own work — hooks, bucket views, shard copies, gathers).
Rounds interleave the layouts so that drift on a shared machine hits all of them alike. Prints a table and
writes JSON: median tokens/s over the steps after warm-up, its ratio to plain, and peak memory.

  python3 scripts/bench/parallel_overhead.py --build build-gpu --out OUT_DIR [--steps 30] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LAYOUTS = {
    "plain": [],
    "ddp": ["parallel.force_wrapper=true"],
    "zero1": ["parallel.force_wrapper=true", "parallel.zero_stage=1"],
    "zero2": ["parallel.force_wrapper=true", "parallel.zero_stage=2"],
    "fsdp": ["parallel.force_wrapper=true", "parallel.zero_stage=3"],
    "fsdp_no_reshard": ["parallel.force_wrapper=true", "parallel.zero_stage=3",
                        "parallel.fsdp_reshard_after_forward=false"],
}
WARMUP = 5


def run(args, name, round_, data):
    out_dir = os.path.join(args.out, f"{name}_r{round_}")
    cmd = [os.path.join(args.build, "bin", "meshtrain"), "train", args.config, "--set", f"data.train={data}",
           "--set", f"train.out_dir={out_dir}", "--set", f"train.steps={args.steps + WARMUP}"]
    for s in LAYOUTS[name]:
        cmd += ["--set", s]
    with open(out_dir + ".log", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"{name}: meshtrain exited {rc}; see {out_dir}.log")
    recs = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if '"loss"' in l][WARMUP:]
    return [r["tokens_per_s"] for r in recs], max(r["peak_memory_bytes"] for r in recs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory holding bin/meshtrain")
    ap.add_argument("--out", required=True, help="directory for logs, runs and parallel_overhead.json")
    ap.add_argument("--config", default="configs/bench/gpt2-124m-1gpu.yaml")
    ap.add_argument("--data", default="synthetic", help="token shard (default: random tokens made on the device)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    data = args.data
    tok = {n: [] for n in LAYOUTS}
    peak = {n: 0 for n in LAYOUTS}
    for r in range(args.rounds):
        for name in LAYOUTS:
            t, p = run(args, name, r, data)
            tok[name] += t
            peak[name] = max(peak[name], p)
    base = statistics.median(tok["plain"])
    rows = []
    print(f"{'layout (world size 1)':22s} {'tokens/s':>10s} {'vs plain':>9s} {'overhead':>9s} {'peak GiB':>9s}")
    for name in LAYOUTS:
        m = statistics.median(tok[name])
        rows.append({"layout": name, "tokens_per_s": m, "ratio": m / base, "overhead": 1 - m / base,
                     "peak_memory_bytes": peak[name]})
        print(f"{name:22s} {m:10.0f} {m / base:9.3f} {100 * (1 - m / base):8.1f}% {peak[name] / 2**30:9.2f}")
    with open(os.path.join(args.out, "parallel_overhead.json"), "w") as f:
        json.dump({"config": args.config, "steps": args.steps, "rounds": args.rounds, "layouts": rows}, f, indent=1)


if __name__ == "__main__":
    main()
