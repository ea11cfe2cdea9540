#!/usr/bin/env python3
"""What in-memory checkpoints (checkpoint.memory_every) cost a training step, measured side by side in one run:
the same job under meshrun with them off and at each interval asked, CPU backend, synthetic tokens. Prints a table
(mean step time of the steps after the first few — the mean, since a snapshot every k steps slows one step in k, the overhead against off, the state each rank copies) and
writes memory_checkpoint_overhead.json. docs/resilience.md records the figures; the target is ≤ 3 % at the
interval used.

  scripts/bench/memory_checkpoint_overhead.py build/bin OUT [--nproc 2] [--steps 40] [--every 1,4,-1]
      [--d-model 256] [--layers 4] [--repeats 2]      (every: checkpoint.memory_every values, -1 = auto)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "quickstart.yaml")
WARMUP = 5  # steps left out of the mean: allocation and thread start
AUTO_LINE = re.compile(r"in-memory checkpoints every (\d+) step\(s\): one costs")


def run(args, out, every, repeat):
    run_dir = os.path.join(out, f"every{every}_{repeat}")
    sets = [f"model.n_layer={args.layers}", "model.n_head=4", f"model.d_model={args.d_model}",
            "model.max_seq_len=128", "data.train=synthetic", "data.val=", "train.micro_batch_size=4",
            "train.eval_every=0", "train.sample_tokens=0", "train.threads=1", f"train.steps={args.steps}",
            "checkpoint.every=0", "checkpoint.save_final=false", "checkpoint.resume=auto", "logging.every=1",
            f"checkpoint.memory_every={every}", f"train.out_dir={run_dir}"]
    shutil.rmtree(run_dir, ignore_errors=True)  # resume auto (what snapshots need) would find an earlier run's
    cmd = [os.path.join(args.bin_dir, "meshrun"), "--nproc-per-node", str(args.nproc), CONFIG,
           *[f"--set={s}" for s in sets]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        sys.exit(f"memory_every={every}: meshrun exited {p.returncode}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [json.loads(l) for l in f if '"step_time_s"' in l]
    chosen = AUTO_LINE.search(p.stdout + p.stderr)  # auto: the interval the run measured and chose
    interval = int(chosen.group(1)) if chosen else every
    return [s["step_time_s"] for s in steps if s["step"] > WARMUP], interval


def state_mb(args):
    """fp32 parameters + AdamW's two moments per rank (DDP: every rank holds all), in MB."""
    d, v, t = args.d_model, 256, 128
    params = v * d + t * d + args.layers * (12 * d * d + 13 * d) + 2 * d
    return 12 * params / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("out")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", default="1,4,-1", help="comma-separated checkpoint.memory_every values (-1: auto); "
                    "0 (off, the baseline) is always run")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="runs per interval, alternating (their steps pooled)")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    everies = [int(x) for x in args.every.split(",")]
    if 0 not in everies:
        everies.insert(0, 0)
    os.makedirs(args.out, exist_ok=True)
    times = {e: [] for e in everies}
    chosen = {}
    for r in range(args.repeats):
        for e in everies:
            t, chosen[e] = run(args, args.out, e, r)
            times[e] += t
    base = statistics.fmean(times[0])
    rows = []
    print("| memory_every | interval | mean step (ms) | overhead | state per rank (MB) |")
    print("| --- | --- | --- | --- | --- |")
    for e in everies:
        med = statistics.fmean(times[e])
        rows.append({"memory_every": e, "interval": chosen[e], "mean_step_s": med, "overhead": med / base - 1,
                     "steps": len(times[e])})
        label = {0: "off", -1: "-1 (auto)"}.get(e, str(e))
        print(f"| {label} | {chosen[e] or '-'} | {med * 1e3:.2f} | {100 * (med / base - 1):+.1f} % | "
              f"{state_mb(args):.1f} |")
    result = {"nproc": args.nproc, "d_model": args.d_model, "layers": args.layers, "steps": args.steps,
              "repeats": args.repeats, "state_mb_per_rank": state_mb(args), "rows": rows}
    with open(os.path.join(args.out, "memory_checkpoint_overhead.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
