"""Helpers shared by the end-to-end tests that drive `meshtrain train` (imported from the test's own folder)."""
import json
import os
import subprocess
import sys


def run(cmd, **kw):
    """Runs `cmd`, echoes it and its output, and fails the test (exit 1 with the command) if it fails."""
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, **kw)
    print(p.stdout)
    if p.returncode != 0:
        sys.exit(f"FAILED: exit code {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def metrics(out_dir):
    """The records of a run's metrics.jsonl."""
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def prepare_kjv(meshtrain, src, work):
    """Byte-level shards of the repo's small text (data/kjv) under WORK/data; returns their prefix."""
    prefix = os.path.join(work, "data", "kjv")
    run([meshtrain, "prepare", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"), "--out", prefix])
    return prefix
