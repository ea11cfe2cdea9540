#!/usr/bin/env python3
"""meshtrain doctor and meshrun --preflight, run as a user runs them (tier 4, CPU):

  - readings of a healthy HGX H100 node (tests/fixtures/gpu_health/) pass: exit 0, every GPU row "ok";
  - the node with faults injected: exit 1 and the failing line "FAILED: ECC / retired pages: found GPU 3: …";
  - this machine has no GPU: asking for 8 fails the GPU count row (exit 1); asking for none skips the rows
    (readings absent, never invented) and exits 0;
  - --save writes this node's readings in the fixture format, which --readings reads back;
  - the checkpoint row: a config's checkpoint.dir probed; one that cannot be created fails;
  - meshrun --preflight: a failing doctor stops the launch before any worker starts (its exit code, no
    metrics written); a passing one lets two CPU workers train.
Usage: doctor_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_support import tiny_synthetic_config

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
fixtures = os.path.join(src, "tests", "fixtures", "gpu_health")
work = tempfile.mkdtemp(prefix="meshtrain_doctor_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*cmd):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=300)
    print("+", " ".join(cmd), f"→ {p.returncode}\n{p.stdout}{p.stderr}")
    return p.returncode, p.stdout, p.stderr


ckpt_dir = os.path.join(work, "ckpt")
rc, out, _ = run(meshtrain, "doctor", "--readings", os.path.join(fixtures, "hgx_h100_healthy.json"), "--gpus", "8",
                 "--gpu-model", "H100", "--nvlinks", "18", "--checkpoint-dir", ckpt_dir, "--checkpoint-gb", "0.01")
rows = [l for l in out.splitlines() if l[:4].strip() in ("ok", "FAIL", "skip")]
check(rc == 0 and "FAILED" not in out, f"healthy node: exit 0 (rc={rc})")
check(sum(l.startswith("ok") for l in rows) == 8, f"healthy node: 8 rows ok (7 GPU checks, checkpoint dir): {rows}")

rc, out, _ = run(meshtrain, "doctor", "--readings", os.path.join(fixtures, "hgx_h100_faults.json"))
last = out.strip().splitlines()[-1] if out.strip() else ""
check(rc == 1 and last.startswith("FAILED: ECC / retired pages: found GPU 3: 2 uncorrected ECC errors"),
      f"faulty node: exit 1 and the failing line last (rc={rc}, last={last!r})")
for row in ("NVLink links up", "PCIe link", "clocks not capped", "temperature"):
    check(any(l.startswith("FAIL") and row in l and "GPU 5" in l for l in out.splitlines()), f"faulty node: {row} fails on GPU 5")

rc, out, _ = run(meshtrain, "doctor", "--gpus", "8", "--no-allreduce")
check(rc == 1 and "FAILED: GPU count: found 0" in out, f"no GPU, 8 asked for: exit 1 naming the GPU count (rc={rc})")
saved = os.path.join(work, "here.json")
rc, out, _ = run(meshtrain, "doctor", "--save", saved)
check(rc == 0 and any(l.startswith("skip") and "GPU count" in l for l in out.splitlines()) and "°C" not in out,
      f"no GPU, none asked for: exit 0, the GPU row skipped, no reading invented (rc={rc})")
rc2, out2, _ = run(meshtrain, "doctor", "--readings", saved)
check(os.path.exists(saved) and rc2 == 0 and "0 GPU(s)" in out2, f"--save then --readings: read back (rc={rc2})")

# A config's checkpoint.dir: probed; one under a regular file cannot be created.
blocker = os.path.join(work, "a_file")
open(blocker, "w").write("x")
config = tiny_synthetic_config(work, os.path.join(work, "run"), 2, checkpoint={"save_final": False})
rc, out, _ = run(meshtrain, "doctor", config)
check(rc == 0 and any(l.startswith("ok") and "checkpoint dir" in l for l in out.splitlines()),
      f"config: its checkpoint.dir probed and ok (rc={rc})")
rc, out, err = run(meshrun, "--standalone", "--preflight", "--nproc-per-node", "2", config, f"--set=checkpoint.dir={blocker}/ckpt")
check(rc == 1 and "FAILED: checkpoint dir" in out + err and "no worker started" in err
      and not os.path.exists(os.path.join(work, "run", "metrics.jsonl")),
      f"meshrun --preflight: a failing check stops the launch before any worker (rc={rc})")
rc, out, err = run(meshrun, "--standalone", "--preflight", "--nproc-per-node", "2", config)
check(rc == 0 and os.path.exists(os.path.join(work, "run", "metrics.jsonl")), f"meshrun --preflight: passing, trains (rc={rc})")

shutil.rmtree(work, ignore_errors=True)
if failures:
    sys.exit(f"{len(failures)} check(s) failed: {failures}")
print("doctor: all checks passed")
