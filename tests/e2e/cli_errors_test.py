#!/usr/bin/env python3
"""Bad input through the real binaries: each mistake is one line on stderr naming the file/key/flag and what
is valid, and exit code 2 — from `meshtrain config`, `meshtrain train` and `meshrun` (which validates a config
before any worker starts).
Usage: cli_errors_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_cli_")
data = os.path.join(work, "tokens.bin")
with open(data, "wb") as f:
    f.write(bytes(4096))  # raw uint16 tokens: enough for a valid config


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


good = write("good.yaml", f"data:\n  train: {data}\ntrain:\n  steps: 1\n  device: cpu\n")
cases = [
    # (what, file, extra args, expected fragment of the one line)
    ("unknown key", write("unknown.yaml", f"data:\n  train: {data}\noptimizer:\n  lrr: 1e-3\n"), [],
     "unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?"),
    ("bad value", write("bad.yaml", f"data:\n  train: {data}\nmodel:\n  family: bert\n"), [],
     "model.family"),
    ("wrong type", write("type.yaml", f"data:\n  train: {data}\ntrain:\n  steps: many\n"), [], "train.steps"),
    ("malformed yaml", write("broken.yaml", "data:\n  train: [unclosed\n"), [], "broken.yaml:"),
    ("malformed json", write("broken.json", '{"data": {"train": }}'), [], "broken.json:1:"),
    ("missing data", write("nodata.yaml", "data:\n  train: /nonexistent/shard_*.bin\n"), [],
     "data.train: '/nonexistent/shard_*.bin' matches no file"),
    ("bad override", good, ["--set", "optimizer.lr"], "--set"),
    ("unknown override", good, ["--set", "train.stesp=3"], "did you mean 'train.steps'"),
    ("missing file", os.path.join(work, "absent.yaml"), [], "absent.yaml"),
    ("bad extension", write("cfg.toml", ""), [], "cfg.toml"),
]

failures = []


def check(label, cmd, fragment):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = p.returncode == 2 and len(lines) == 1 and fragment in lines[0]
    print(f"{'ok  ' if ok else 'FAIL'} {label}: exit {p.returncode}: {p.stderr.strip()!r}")
    if not ok:
        failures.append(label)


for what, path, extra, fragment in cases:
    check(f"meshtrain config / {what}", [meshtrain, "config", path, *extra], fragment)
    check(f"meshtrain train / {what}", [meshtrain, "train", path, *extra], fragment)
    if what != "bad extension":  # meshrun, like torchrun, runs any other file as a Python script
        check(f"meshrun / {what}", [meshrun, "--nproc-per-node", "2", path, *extra], fragment)

check("meshrun / world size arithmetic", [meshrun, "--nproc-per-node", "3", good, "--set", "parallel.tp=2"],
      "world size 3 is not divisible by pp(1) × fsdp(1) × tp(2) = 2")
p = subprocess.run([meshtrain, "--help"], stdout=subprocess.PIPE, text=True)
if p.returncode != 0 or "train CONFIG" not in p.stdout:
    failures.append("meshtrain --help")
p = subprocess.run([meshtrain, "config", good], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
if p.returncode != 0 or "optimizer:" not in p.stdout:
    failures.append(f"meshtrain config good.yaml: {p.returncode} {p.stderr}")

if failures:
    sys.exit(f"{len(failures)} failed: {failures}")
print("cli errors: ok")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
