#!/usr/bin/env python3
"""A trainer rank SIGKILLed while writing a checkpoint (tier 4): two workers under meshrun save every 2 steps;
rank 0 (the one that writes replicated state) dies half-way through writing step 4's file
(MESHTRAIN_CKPT_CRASH_AT=file_partial:0:4). `latest` stays at step 2; a rerun with `checkpoint.resume: auto`
removes the half-written directory, resumes from step 2 and ends with parameters bit-identical to an uninterrupted run's.
Usage: kill_resume_test.py BIN_DIR SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
from ckpt_e2e import kjv_setup

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "killresume")
STEPS = 6


def train(out, env=None):
    e = dict(os.environ)
    e.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    e.update(env or {})
    cmd = [meshrun, "--standalone", "--nproc-per-node", "2", config, f"--set=data.train={prefix}_train.bin",
           f"--set=data.val={prefix}_val.bin", "--set=logging.every=1", "--set=train.eval_every=0",
           "--set=train.sample_tokens=0", "--set=checkpoint.every=2", f"--set=train.steps={STEPS}",
           f"--set=train.out_dir={out}", "--set=checkpoint.resume=auto", "--set=logging.all_ranks=true"]
    r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return r.returncode, r.stdout


def checksums(out):
    return sorted(set(re.findall(r"parameter checksum ([0-9a-f]{8}) after step (\d+)", out)))


rc, ref = train(os.path.join(work, "ref"))
assert rc == 0, ref
want = checksums(ref)
assert len(want) == 1 and want[0][1] == str(STEPS), want

run = os.path.join(work, "run")
ckpt = os.path.join(run, "checkpoints")
rc, out = train(run, {"MESHTRAIN_CKPT_CRASH_AT": "file_partial:0:4"})
print(out[-2000:])
assert rc != 0, "the killed run must fail"
assert "killing itself at stage 'file_partial' of step 4" in out
assert open(os.path.join(ckpt, "latest")).read().strip() == "step_00000002"
assert os.path.isdir(os.path.join(ckpt, "step_00000004.tmp")), "expected the half-written step 4"

rc, out = train(run)
print(out[-2000:])
assert rc == 0, out
assert f"resumed from {ckpt}/step_00000002 at step 2" in out, "did not resume from step 2"
assert not [d for d in os.listdir(ckpt) if d.endswith(".tmp")], "the half-written directory was not removed"
got = checksums(out)
assert got == want, f"parameters after resume {got} differ from the uninterrupted run's {want}"
shutil.rmtree(work)
print(f"kill during save → resume from step 2: parameters equal the uninterrupted run ({want[0][0]}): ok")
