#!/usr/bin/env python3
"""Preemption (tier 4): SIGUSR1 to meshrun — Slurm's warning before it kills a job — is forwarded to both
workers, which agree on a step, save a complete checkpoint there and exit with 128 + SIGUSR1; a new run with
`checkpoint.resume: auto` continues from that step.
Usage: preempt_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
config = os.path.join(src, "configs", "quickstart.yaml")
work = tempfile.mkdtemp(prefix="meshtrain_preempt_")
prefix = os.path.join(work, "kjv")
subprocess.run([meshtrain, "prepare", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"), "--out", prefix],
               check=True, stdout=subprocess.DEVNULL)
ckpt = os.path.join(work, "run", "checkpoints")
common = [f"--set=data.train={prefix}_train.bin", f"--set=data.val={prefix}_val.bin", "--set=logging.every=1",
          "--set=train.eval_every=0", "--set=train.eval_batches=1", "--set=train.sample_tokens=0",
          "--set=checkpoint.every=0", f"--set=train.out_dir={os.path.join(work, 'run')}",
          "--set=checkpoint.resume=auto"]

p = subprocess.Popen([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, "--set=train.steps=1000"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines = []
for line in p.stdout:
    lines.append(line)
    print(line, end="")
    if "step      3/1000" in line:
        p.send_signal(signal.SIGUSR1)
        break
rest, _ = p.communicate(timeout=300)
print(rest)
out = "".join(lines) + rest
rc = p.returncode
assert rc == 128 + signal.SIGUSR1, f"meshrun exit code {rc}, expected {128 + signal.SIGUSR1}"
assert "stop signal 10 (User defined signal 1)" in out, "the trainer did not report the signal"
latest = open(os.path.join(ckpt, "latest")).read().strip()
step = int(latest.split("_")[1])
assert 3 <= step < 1000, latest
assert os.path.exists(os.path.join(ckpt, latest, "meta.json")), "checkpoint incomplete"
assert not [d for d in os.listdir(ckpt) if d.endswith(".tmp")], "a .tmp directory was left behind"

r = subprocess.run([meshrun, "--standalone", "--nproc-per-node", "2", config, *common, f"--set=train.steps={step + 2}"],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
print(r.stdout)
assert r.returncode == 0, r.returncode
assert f"resumed from {ckpt}/{latest} at step {step}" in r.stdout, "did not resume from the preemption checkpoint"
print(f"preempt: stopped and saved at step {step}, resumed: ok")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
