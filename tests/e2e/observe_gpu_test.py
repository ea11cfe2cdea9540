#!/usr/bin/env python3
"""GPU telemetry and the preflight on a real GPU (NVML). Exit 77 (skipped) without an NVIDIA GPU.

  - meshtrain doctor --gpus 1 --save FILE: the table is printed, its exit code is 1 exactly when a line says
    FAILED, and the saved readings have the GPU's name, power, temperature, SM and memory clocks and memory
    in use (real readings, all present and positive) — FILE is a fixture of this node for later;
  - with two or more GPUs: the all-reduce row carries a measured rate;
  - meshtrain train on the GPU, logging every step: every record's "gpu" entry for rank 0 has power,
    temperature, clocks, utilisation and memory in use, "nodes" the node's power, and the console line shows
    the node's max temperature and power ("°C max, … W").
Usage: observe_gpu_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_support import metrics, run, skip_without_gpu

bin_dir, src = sys.argv[1], sys.argv[2]
meshtrain = os.path.join(bin_dir, "meshtrain")
skip_without_gpu()
gpus = [l for l in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
        if l.startswith("GPU ")]
work = tempfile.mkdtemp(prefix="meshtrain_observe_gpu_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


saved = os.path.join(work, "node.json")
p = subprocess.run([meshtrain, "doctor", "--gpus", "1", "--save", saved, "--checkpoint-dir", os.path.join(work, "ck"),
                    "--checkpoint-gb", "1"], capture_output=True, text=True, timeout=600)
print(p.stdout, p.stderr)
check(p.returncode == (1 if "FAILED:" in p.stdout else 0), f"doctor: exit {p.returncode} agrees with its table")
check(p.returncode in (0, 1) and "GPU count" in p.stdout and "temperature" in p.stdout, "doctor: the table is printed")
node = json.load(open(saved))
g0 = node["gpus"][0] if node.get("gpus") else {}
now = g0.get("now", {})
check(len(node.get("gpus", [])) == len(gpus), f"doctor --save: {len(gpus)} GPU(s) saved")
check(bool(g0.get("name")) and bool(g0.get("pci_bus_id")), f"doctor --save: name and bus id ({g0.get('name')})")
for key in ("power_w", "temperature_c", "sm_clock_mhz", "memory_clock_mhz", "memory_used_bytes", "memory_total_bytes"):
    check(now.get(key, 0) > 0, f"NVML reading {key} present and positive: {now.get(key)}")
if len(gpus) >= 2:
    row = [l for l in p.stdout.splitlines() if "all-reduce bus bandwidth" in l]
    check(row and "GB/s" in row[0], f"doctor: the all-reduce row has a measured rate: {row}")

out_dir = os.path.join(work, "run")
log = run([meshtrain, "train", os.path.join(src, "configs", "quickstart.yaml"), "--set=data.train=synthetic",
           "--set=data.val=", "--set=train.device=cuda", "--set=train.steps=4", "--set=logging.every=1", "--set=train.eval_every=0",
           "--set=checkpoint.save_final=false", "--set=train.sample_tokens=0", f"--set=train.out_dir={out_dir}"])
recs = [r for r in metrics(out_dir) if "loss" in r]
check(len(recs) == 4, f"4 logged steps: {len(recs)}")
for r in recs:
    g = r.get("gpu", {}).get("0", {})
    missing = [k for k in ("power_w", "temperature_c", "sm_clock_mhz", "memory_clock_mhz", "gpu_util_pct",
                           "memory_used_mib") if k not in g]
    check(not missing and g["power_w"] > 0 and g["temperature_c"] > 0 and "throttled" in g,
          f"step {r['step']}: rank 0's GPU readings ({g}; missing {missing})")
    check(r.get("nodes", {}).get("0", {}).get("power_w", 0) > 0, f"step {r['step']}: the node's power")
check("°C max" in log, "the console line shows the node's max temperature and power")

shutil.rmtree(work, ignore_errors=True)
if failures:
    sys.exit(f"{len(failures)} check(s) failed: {failures}")
print("observe_gpu: all checks passed")
