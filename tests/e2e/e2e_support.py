"""Helpers shared by the end-to-end tests that drive `meshtrain train` (imported from the test's own folder)."""
import json
import os
import shutil
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


class Checks:
    """Assertions that all run: `check(cond, what)` prints ok or FAIL with `what` as it goes and keeps the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)


def run_checked(main, check, work):
    """Runs main(), removes `work` however it ends, prints how many of `check`'s assertions failed and exits 1 if
    any did."""
    try:
        main()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(check.failures)} failure(s)")
    sys.exit(1 if check.failures else 0)
