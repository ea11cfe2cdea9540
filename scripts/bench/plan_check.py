#!/usr/bin/env python3
"""`meshtrain plan`'s predicted peak memory against the peak `meshtrain bench train` measures, on one GPU.

Runs each case through `meshtrain plan CFG --gpus 1 --json` (the prediction) and `meshtrain bench train` (the
real training loop on synthetic tokens; step_peak_memory_bytes = the caching allocator's peak allocated bytes
during the steps, set-up apart), then
prints predicted vs measured with their ratio and writes OUT/plan_check.json. Cases: the three bench shapes
(GPT-2 124M b32 × T1024, Llama 3.2 1B b8 × T2048, Llama 3.1 8B's shape with 8 layers b4 × T2048) with and
without activation checkpointing, and the whole Llama 3.1 8B at micro-batch 1 × T2048 with and without it and at
micro-batch 2 with it.
The goal is |ratio − 1| ≤ 10 % for every case; the exit status is 1 when a case misses it or fails to run.
It also writes OUT/mfu.json, the measured MFU by shape in the form `meshtrain plan --mfu FILE` reads (the
built-in table in src/plan/mfu_table.cpp comes from the same measurement).

    python3 scripts/bench/plan_check.py build-gpu/bin/meshtrain OUT [--steps 3] [--cases a,b,...] [--gpu NAME]

--gpu names the card it runs on (`meshtrain plan --gpu`'s names; default h200-141gb): the plans are made for it,
and mfu.json's rows carry it, so that `meshtrain plan` takes each row's parameter passes out at that card's
memory bandwidth.
"""
import argparse
import json
import os
import subprocess
import sys
import time

CASES = {  # name: (preset, batch, seq, layers, activation checkpointing)
    "gpt2-124m": ("gpt2-124m", 32, 1024, 0, False),
    "gpt2-124m-ac": ("gpt2-124m", 32, 1024, 0, True),
    "llama3.2-1b": ("llama3.2-1b", 8, 2048, 0, False),
    "llama3.2-1b-ac": ("llama3.2-1b", 8, 2048, 0, True),
    "llama3.1-8b-8L": ("llama3.1-8b", 4, 2048, 8, False),
    "llama3.1-8b-8L-ac": ("llama3.1-8b", 4, 2048, 8, True),
    "llama3.1-8b-b1": ("llama3.1-8b", 1, 2048, 0, False),
    "llama3.1-8b-b1-ac": ("llama3.1-8b", 1, 2048, 0, True),
    "llama3.1-8b-b2-ac": ("llama3.1-8b", 2, 2048, 0, True),
}
GOAL = 0.10


def config_text(preset, batch, seq, layers, ac):
    lines = [f"model: {{preset: {preset}" + (f", n_layer: {layers}" if layers else "") + "}",
             f"data: {{train: synthetic, seq_len: {seq}}}",
             f"train: {{micro_batch_size: {batch}, activation_checkpointing: {'true' if ac else 'false'}}}"]
    return "\n".join(lines) + "\n"


def run(cmd, log, cwd):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=900, cwd=cwd)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)} — see {log}", file=sys.stderr)
    return p.returncode == 0


def predicted(meshtrain, cfg, out, gpu):
    p = subprocess.run([meshtrain, "plan", cfg, "--gpus", "1", "--gpu", gpu, "--json"], capture_output=True,
                       text=True, cwd=out)
    if p.returncode != 0:
        print(f"FAILED: meshtrain plan {cfg}: {p.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(p.stdout)["layouts"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meshtrain", help="path to the meshtrain binary (a CUDA build)")
    ap.add_argument("out", help="directory for configs, logs and plan_check.json")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    ap.add_argument("--steps", type=int, default=3, help="timed steps per case (after one warm-up step)")
    ap.add_argument("--gpu", default="h200-141gb", help="the GPU this runs on, as `meshtrain plan --gpu` names it")
    a = ap.parse_args()
    cases = a.cases.split(",")
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown {', '.join(bad)}; valid: {', '.join(CASES)}")
    os.makedirs(a.out, exist_ok=True)
    meshtrain = os.path.abspath(a.meshtrain)
    rows, ok, t0 = [], True, time.time()
    for i, name in enumerate(cases):
        preset, batch, seq, layers, ac = CASES[name]
        print(f"[{i + 1}/{len(cases)}] {name} ({time.time() - t0:.0f} s so far)", flush=True)
        cfg = os.path.join(os.path.abspath(a.out), f"{name}.yaml")
        with open(cfg, "w") as f:
            f.write(config_text(preset, batch, seq, layers, ac))
        plan = predicted(meshtrain, cfg, a.out, a.gpu)
        js = os.path.join(os.path.abspath(a.out), f"{name}.bench.json")
        cmd = [meshtrain, "bench", "train", "--preset", preset, "--batch", str(batch), "--seq", str(seq),
               "--layers", str(layers), "--steps", str(a.steps), "--warmup", "1", "--json", js]
        if ac:
            cmd.append("--activation-checkpointing")
        if plan is None or not run(cmd, os.path.join(a.out, f"{name}.bench.log"), a.out):
            ok = False
            continue
        bench = json.load(open(js))
        pred = plan["memory"]["peak_allocated_bytes"]
        meas = bench["step_peak_memory_bytes"]  # the steps: what the plan predicts (set-up apart)
        ratio = pred / meas
        ok = ok and abs(ratio - 1) <= GOAL
        rows.append({"case": name, "preset": preset, "batch": batch, "seq": seq, "layers": layers,
                     "activation_checkpointing": ac, "predicted_peak_bytes": pred, "measured_peak_bytes": meas,
                     "ratio": ratio, "peak_at": plan["memory"]["peak_at"], "items": plan["memory"]["items"],
                     "predicted_step_s": plan["time"]["step_s"], "measured_step_s": bench["step_time_s"],
                     "measured_tokens_per_s": bench["tokens_per_s"], "measured_mfu": bench["mfu"],
                     "params": bench["params"]})
    json.dump(rows, open(os.path.join(a.out, "plan_check.json"), "w"), indent=1)
    # MFU by shape, from the runs without recomputation (what the step-time model divides FLOPs by), with the
    # model's parameters and the step time, so that the plan takes the step's parameter passes out of it.
    mfu = [{"family": "gpt2" if r["preset"].startswith("gpt2") else "llama",
            "d_model": {"gpt2-124m": 768, "llama3.2-1b": 2048, "llama3.1-8b": 4096}[r["preset"]],
            "tokens": r["batch"] * r["seq"], "mfu": r["measured_mfu"], "params": r["params"],
            "step_s": r["measured_step_s"], "source": f"plan_check {r['case']}", "gpu": a.gpu}
           for r in rows if not r["activation_checkpointing"] and r["measured_mfu"] > 0]
    if mfu:
        json.dump(mfu, open(os.path.join(a.out, "mfu.json"), "w"), indent=1)
    print(f"\n{'case':20s} {'predicted GiB':>14s} {'measured GiB':>13s} {'ratio':>7s} {'peak at':>20s} "
          f"{'pred step s':>12s} {'meas step s':>12s}")
    for r in rows:
        flag = "" if abs(r["ratio"] - 1) <= GOAL else "  MISSES the 10 % goal"
        print(f"{r['case']:20s} {r['predicted_peak_bytes'] / 2**30:14.2f} {r['measured_peak_bytes'] / 2**30:13.2f} "
              f"{r['ratio']:7.3f} {r['peak_at']:>20s} {r['predicted_step_s']:12.3f} {r['measured_step_s']:12.3f}{flag}")
    print(f"\n{len(rows)}/{len(cases)} cases measured in {time.time() - t0:.0f} s; "
          f"{'all within' if ok else 'NOT all within'} ±{GOAL:.0%}; JSON in {os.path.join(a.out, 'plan_check.json')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
