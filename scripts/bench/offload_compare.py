#!/usr/bin/env python3
"""Full fine-tune on one GPU with and without `optimizer.offload: cpu`, side by side in one run (the fine-tuning
issue's target): micro-batch 1 × T 2048 at gradient accumulation 32 (64K tokens per optimizer step) and 4 (8K),
through `meshtrain bench train` (bf16 compute, synthetic tokens, random init). Prints one table — tokens/s, the
offloaded run's ratio to the on-device one, peak GPU memory, the host update time and the bytes moved each way
per step (from the run's metrics.jsonl, median over the timed steps) — and writes every row to
OUT/offload_compare.json.

Model: Llama 3.1 8B when its offloaded state fits in host memory, else Llama 3.2 3B. With accumulation (both
default cases) and without --delay the gradients are held: they sum on the device in bf16 and go down in chunks
at the step, and the host holds 12 bytes a parameter (fp32 master, exp_avg, exp_avg_sq; train/chunked_update.h),
pinned: 8.03e9 × 12 B = 96 GB (90 GiB) for 8B, which fits in a 128 GiB host. At --accum 1 a single process
streams them during the backward, and with --delay they are downloaded whole: 16 bytes a parameter (the
gradient's host buffer too), 120 GiB for 8B, which does not fit beside the process and the OS; 3.21e9 × 16 B =
51 GB (48 GiB) for 3B does. --model forces one (docs/offload.md). --delay adds a third run per accumulation
with `optimizer.offload_delay: 1` (the host update of each step overlapping the next step's forward and
backward; its effect on the loss: scripts/bench/loss_compare.py --variants offload,offload-delay).
Each run is first put to `meshtrain plan` for the card (--gpu, default GPU 0's): one the plan says does not fit is
not started, a line says so, and the offloaded runs beside it print no ratio (the whole 8B at accumulation 32
does not fit on the device even of a 141 GB H200: its bf16 weights, activations and fp32 gradients together).

Usage: offload_compare.py MESHTRAIN_BIN OUT_DIR [--model auto|llama3.1-8b|llama3.2-3b] [--accum 32,4]
                          [--steps N] [--warmup N] [--threads N] [--delay] [--gpu NAME]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from plan_check import config_text  # the config `meshtrain plan` reads for a bench run

PARAMS = {"llama3.1-8b": 8.03e9, "llama3.2-3b": 3.21e9}
HELD_BYTES_PER_PARAM, HOST_BYTES_PER_PARAM = 12, 16
HOST_HEADROOM = 0.85  # of MemTotal the pinned state may take: the process, page cache and the OS need the rest


def host_memory_bytes():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def pick_model(asked, held):
    total = host_memory_bytes()
    for name in ([asked] if asked != "auto" else ["llama3.1-8b", "llama3.2-3b"]):
        need = PARAMS[name] * (HELD_BYTES_PER_PARAM if held else HOST_BYTES_PER_PARAM)
        fits = need <= HOST_HEADROOM * total
        print(f"{name}: offloaded state {need / 2**30:.0f} GiB pinned host memory, "
              f"{'fits' if fits else 'does not fit'} in {HOST_HEADROOM:.0%} of {total / 2**30:.0f} GiB")
        if fits or asked != "auto":
            return name
    sys.exit("no model's offloaded state fits in host memory")


def timed_records(out, warmup):
    recs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line]
    return recs[warmup:]


def median_of(recs, key):
    vals = [r[key] for r in recs if key in r]
    return statistics.median(vals) if vals else float("nan")


OPTIMIZERS = {  # name in the table → settings
    "device": ["optimizer.offload=none"],
    "offload": ["optimizer.offload=cpu"],
    "delayed": ["optimizer.offload=cpu", "optimizer.offload_delay=1"],
}


# nvidia-smi's name (the first pattern it matches) → the card as `meshtrain plan --gpu` names it.
GPUS = [(r"\bH200\b", "h200-141gb"), (r"\bH100\b", "h100-80gb"), (r"\bA100\b.*80GB", "a100-80gb"),
        (r"\bA100\b", "a100-40gb"), (r"\bL4\b", "l4-24gb")]


def gpu_of(asked):
    """The card as `meshtrain plan --gpu` names it: --gpu, else GPU 0's name from nvidia-smi; None if unknown."""
    if asked != "auto":
        return asked
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((plan_name for pattern, plan_name in GPUS if re.search(pattern, name)), None)


def device_fit(a, model, sets, gpu):
    """Whether `meshtrain plan` predicts the run fits `gpu` (True where no card is known), and its line."""
    if gpu is None:
        return True, "no card known to `meshtrain plan` (--gpu): run unchecked"
    cfg = os.path.join(a.out, f"{model}.plan.yaml")
    with open(cfg, "w") as f:
        f.write(config_text(model, 1, 2048, 0, False))  # the bench run's shape; `sets` carry the rest
    p = subprocess.run([a.meshtrain, "plan", cfg, "--gpu", gpu, "--json"] + [f"--set={s}" for s in sets],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return True, f"`meshtrain plan` failed ({p.stderr.strip()}): run unchecked"
    mem = json.loads(p.stdout)["layouts"][0]["memory"]
    line = (f"the plan predicts {mem['device_total_bytes'] / 2**30:.2f} GiB on a {gpu} "
            f"of {mem['device_memory_bytes'] / 2**30:.2f} GiB")
    return bool(mem["fits"]), line


def run_one(a, model, accum, optimizer, gpu):
    name = f"{model}.accum{accum}.{optimizer}"
    offload = optimizer != "device"
    out = os.path.join(a.out, name)
    js = os.path.join(a.out, name + ".json")
    sets = [f"train.grad_accum={accum}", f"train.out_dir={out}", "train.sample_tokens=0", *OPTIMIZERS[optimizer]]
    if offload and a.threads:
        sets.append(f"optimizer.offload_threads={a.threads}")
    fits, line = device_fit(a, model, sets, gpu)
    if not fits:  # the on-device run would end in an out-of-memory error: say so instead, and leave no ratio
        print(f"{name}: not run, {line}", file=sys.stderr)
        return None
    cmd = [a.meshtrain, "bench", "train", "--preset", model, "--batch", "1", "--seq", "2048",
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--json", js] + [f"--set={s}" for s in sets]
    with open(os.path.join(a.out, name + ".log"), "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)} — see {log.name}", file=sys.stderr)
        return None
    r = json.load(open(js))
    recs = timed_records(out, a.warmup)
    r.update(model=model, accum=accum, tokens_per_step=accum * 2048, offload=offload, optimizer=optimizer,
             host_update_ms=median_of(recs, "optimizer_host_update_ms"),
             d2h_mb=median_of(recs, "optimizer_D2H_MB"), h2d_mb=median_of(recs, "optimizer_H2D_MB"))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meshtrain")
    ap.add_argument("out")
    ap.add_argument("--model", default="auto", choices=["auto", *PARAMS])
    ap.add_argument("--accum", default="32,4", help="gradient accumulation steps to run, comma-separated")
    ap.add_argument("--steps", type=int, default=3, help="timed optimizer steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="untimed optimizer steps first")
    ap.add_argument("--threads", type=int, default=0, help="optimizer.offload_threads (0: the CPUs it may use, ≤ 16)")
    ap.add_argument("--delay", action="store_true", help="also run optimizer.offload_delay=1")
    ap.add_argument("--gpu", default="auto",
                    help="the card, as `meshtrain plan --gpu` names it (default: GPU 0's, from nvidia-smi); a run "
                         "the plan says does not fit it is not started")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    accums = [int(x) for x in a.accum.split(",")]
    model = pick_model(a.model, held=min(accums) > 1 and not a.delay)
    gpu = gpu_of(a.gpu)
    rows = []
    for accum in accums:
        for optimizer in ("device", "offload", "delayed") if a.delay else ("device", "offload"):
            r = run_one(a, model, accum, optimizer, gpu)
            if r:
                rows.append(r)
    json.dump(rows, open(os.path.join(a.out, "offload_compare.json"), "w"), indent=1)
    print(f"{'model':12s} {'tokens/step':>11s} {'optimizer':9s} {'tokens/s':>9s} {'vs device':>9s} "
          f"{'peak GiB':>8s} {'host ms':>8s} {'D2H GB':>7s} {'H2D GB':>7s}")
    for r in rows:
        base = next((b for b in rows if b["accum"] == r["accum"] and not b["offload"]), None)
        ratio = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        print(f"{r['model']:12s} {r['tokens_per_step']:11d} {r['optimizer']:9s} "
              f"{r['tokens_per_s']:9.0f} {ratio:9.2f} {r['peak_memory_bytes'] / 2**30:8.1f} "
              f"{r['host_update_ms']:8.0f} {r['d2h_mb'] / 1e3:7.1f} {r['h2d_mb'] / 1e3:7.1f}")
    print(f"rows: {os.path.join(a.out, 'offload_compare.json')}")


if __name__ == "__main__":
    main()
