#!/usr/bin/env python3
"""In-place restart and in-memory checkpoints on one GPU (docs/resilience.md "In-place restart"): 2 ranks share the
GPU over the CPU backend (NCCL refuses two ranks on one GPU), a GPT-2 of 8 layers and d_model 512 (51M parameters)
on synthetic tokens, bf16, in-memory checkpoints every step (the device state copied to pinned host memory on a
side stream). Runs, one after another: an uninterrupted reference; the same without snapshots (their cost); rank 1
SIGKILLed once rank 0 logs step 10 under --in-place-restart auto, and under off; memory_every auto with debug logs
(the interval it measures). Prints, per run, the exit code, the recovery line and whether the parameters equal the
reference's, then the mean step with and without snapshots; writes OUT/in_place_restart_gpu.json and each run's
log. Run from the repository root (it reads configs/quickstart.yaml).

Usage: in_place_restart_gpu.py BIN_DIR OUT_DIR"""
import json
import os
import re
import signal
import subprocess
import sys
import time

if len(sys.argv) != 3:
    sys.exit(__doc__)
bin_dir, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
SETS = ["model.vocab_size=50304", "model.n_layer=8", "model.n_head=8", "model.d_model=512",
        "model.max_seq_len=512", "data.train=synthetic", "data.val=", "train.micro_batch_size=4",
        "train.device=cuda", "parallel.backend=cpu",
        "train.steps=20", "train.eval_every=0", "train.sample_tokens=0", "logging.every=1",
        "logging.all_ranks=true", "checkpoint.every=0", "checkpoint.resume=auto", "parallel.timeout_s=60"]
CHECK = re.compile(r"\[rank (\d+)\].*parameter checksum ([0-9a-f]{8}) after step (\d+)")


def env_of(pid):
    try:
        return open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return []


def run(name, flags, sets, kill_at=None):
    cmd = [f"{bin_dir}/meshrun", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2", *flags,
           "configs/quickstart.yaml", *[f"--set={s}" for s in SETS + sets + [f"train.out_dir=/tmp/gi_{name}"]],
           "--overwrite"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, killed = [], None
    for line in p.stdout:
        lines.append(f"{time.monotonic() - t0:8.3f} {line}")
        if kill_at and killed is None and re.search(rf"\[rank 0\]: .*step +{kill_at}/", line):
            kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
            t = [int(k) for k in kids if b"RANK=1" in env_of(int(k))]
            if t:
                os.kill(t[0], signal.SIGKILL)
                killed = time.monotonic() - t0
    p.wait()
    text = "".join(lines)
    open(f"{out}/{name}.log", "w").write(text)
    sums = sorted(set(CHECK.findall(text.split("restarting the worker group")[-1])))
    rec = re.findall(r"recovered from the failure in ([\d.]+) s", text)
    return {"name": name, "rc": p.returncode, "wall_s": round(time.monotonic() - t0, 2), "killed_at_s": killed,
            "checksums": sums, "recovery_lines": [l.split("] ", 1)[-1].strip() for l in text.splitlines()
                                                  if "recovered from" in l or "regrouped in" in l or "resumed from" in l
                                                  or "in-memory checkpoints every" in l
                                                  or "did not regroup" in l],
            "recovery_s": rec}


def mean_step(name, first=5):
    times = []
    for line in open(f"/tmp/gi_{name}/metrics.jsonl"):
        r = json.loads(line)
        if "step_time_s" in r and r.get("step", 0) >= first:
            times.append(r["step_time_s"])
    return sum(times) / max(1, len(times)), len(times)


res = [run("reference", [], ["checkpoint.memory_every=1"])]
res.append(run("off", [], ["checkpoint.memory_every=0"]))
res.append(run("in_place", ["--in-place-restart", "auto"], ["checkpoint.memory_every=1"], kill_at=10))
res.append(run("group", ["--in-place-restart", "off"], ["checkpoint.memory_every=1"], kill_at=10))
res.append(run("auto_interval", [], ["logging.level=debug"]))
blocked = [l.split("] ", 2)[-1].strip() for l in open(f"{out}/auto_interval.log")
           if "in-memory checkpoint of step" in l]
print("snapshot, step loop blocked:", *blocked[:4], sep="\n    ")
for r in res:
    same = r["checksums"] == res[0]["checksums"]
    print(f"{r['name']:14s} rc {r['rc']} wall {r['wall_s']} s, killed at {r['killed_at_s']}, "
          f"recovery {r['recovery_s']}, "
          f"bit-identical to reference: {same}")
    for l in r["recovery_lines"][:8]:
        print("    " + l[:220])
for name in ("reference", "off"):
    m, n = mean_step(name)
    every = "1" if name == "reference" else "0"
    print(f"mean step of steps >= 5 ({name}: memory_every {every}): {m * 1e3:.1f} ms over {n}")
json.dump(res, open(f"{out}/in_place_restart_gpu.json", "w"), indent=1)
