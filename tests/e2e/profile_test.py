#!/usr/bin/env python3
"""`meshtrain bench train --profile DIR` (tier 4): the profiled steps come after the timed ones, every rank
writes a Chrome/Perfetto trace that parses and holds the step scopes, and the summary groups the work by
step phase — forward, backward and optimizer all non-zero. On CPU the rows are ATen ops (self time); with
--device cuda they are CUDA kernels (exit 77, skipped, where there is no NVIDIA GPU).
Usage: profile_test.py BIN_DIR [--device cpu|cuda]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_support import run

bin_dir = sys.argv[1]
device = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--device" else "cpu"
if device == "cuda" and (shutil.which("nvidia-smi") is None
                         or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0):
    print("no NVIDIA GPU here: skipped")
    sys.exit(77)
meshtrain = os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_profile_")
prof = os.path.join(work, "prof")
out = run([meshtrain, "bench", "train", "--preset", "tiny", "--seq", "32", "--batch", "2", "--steps", "2",
           "--warmup", "1", "--profile", prof, "--profile-steps", "2", "--set", f"train.device={device}",
           "--set", f"train.out_dir={work}/run"], cwd=work)

# The table in the log names the phases and where the files are.
for phase in ("forward", "backward", "optimizer"):
    assert f"\n{phase} " in out, f"no {phase} row in the printed table"
assert prof in out

trace = json.load(open(os.path.join(prof, "rank_0.trace.json")))
names = {e.get("name") for e in trace["traceEvents"]}
assert "meshtrain::step" in names and "meshtrain::optimizer" in names, sorted(n for n in names if n)[:50]
# On CUDA the scope is mirrored on the device timeline (cat gpu_user_annotation): count the host's.
steps = [e for e in trace["traceEvents"] if e.get("name") == "meshtrain::step" and e.get("cat") != "gpu_user_annotation"]
assert len(steps) == 2, f"{len(steps)} step scopes in the trace, want the 2 profiled steps"

summary = json.load(open(os.path.join(prof, "rank_0.summary.json")))
assert summary["steps"] == 2, summary["steps"]
# Scopes are spans, not work: a row named after one would count the step twice. (meshtrain's own kernels are
# named meshtrain::… too; a scope is what the trace files as a user annotation.)
scopes = {e.get("name") for e in trace["traceEvents"] if e.get("cat") in ("user_annotation", "gpu_user_annotation")}
assert "meshtrain::step" in scopes, sorted(n for n in scopes if n)[:20]
assert not [r for r in summary["rows"] if r["name"] in scopes], summary["rows"][:5]
assert summary["device"] == (device == "cuda"), summary["device"]
for phase in ("forward", "backward", "optimizer"):
    assert summary["phase_ns"][phase] > 0, (phase, summary["phase_ns"])
assert 0 < summary["busy_ns"] <= summary["wall_ns"], (summary["busy_ns"], summary["wall_ns"])
if device == "cuda":  # the fused AdamW kernel is the optimizer's, the GEMMs are split between the passes
    assert any(r["phase"] == "optimizer" and "adam" in r["name"].lower() for r in summary["rows"]), summary["rows"][:10]
assert not [f for f in os.listdir(prof) if f.endswith(".tmp")], os.listdir(prof)

# A bad flag value is one line and exit 2.
p = subprocess.run([meshtrain, "bench", "train", "--preset", "tiny", "--profile", prof, "--profile-steps", "0"],
                   capture_output=True, text=True, cwd=work)
assert p.returncode == 2 and "--profile-steps" in p.stderr, (p.returncode, p.stderr)
shutil.rmtree(work)
print("ok")
