#!/usr/bin/env python3
"""In-memory checkpoints on one node, no root needed (tier 4; the multi-node faults are the netns tests): when they
are on and off, and a worker SIGKILLed under meshrun resuming from memory bit-exactly.

  - auto (the default) under meshrun with `checkpoint.resume: auto`: on, its interval measured and said;
  - auto with `resume: none`: off, silently (a restart would not read them); an explicit N there: a warning;
  - `meshtrain train` without meshrun and an explicit N: a warning (nothing would outlive the process);
  - `memory_every 1`, a disk checkpoint only at the end, rank 1 SIGKILLed once step 6 is logged: meshrun starts
    rank 1 again alone, rank 0 keeps its process and regroups with it (in-place restart), both resume from the
    in-memory checkpoint (no disk checkpoint exists) and end with the parameters of an uninterrupted run;
    meshrun's memory directory is gone once it exits;
  - the same under `--in-place-restart off`: meshrun restarts the group, which resumes from memory the same way.
Usage: memory_checkpoints_test.py BIN_DIR SOURCE_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_e2e import kjv_setup, rank_checksums  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "memory_ckpt")
STEPS = 12
TINY = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=1", "model.d_model=32", "data.seq_len=32",
        "train.micro_batch_size=2", "train.threads=1", "logging.every=1", "logging.all_ranks=true",
        "train.eval_every=0", "train.sample_tokens=0", f"train.steps={STEPS}", "checkpoint.every=0"]
failures = []


def check(cond, what, log=""):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        print(log[-4000:])
        failures.append(what)


def sets(name, *extra):
    return [f"--set={s}" for s in (*TINY, f"train.out_dir={os.path.join(work, name)}", *extra)]


# Rank 0 sleeps 150 ms a step (a pacing knob that changes no number), so the kill lands before the run ends.
PACED = dict(os.environ, MESHTRAIN_SLOW_RANK="0:150")


def launch(name, *extra):
    r = subprocess.run([meshrun, "--standalone", "--nproc-per-node", "2", config, *sets(name, *extra)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, env=PACED)
    return r.returncode, r.stdout


def when_on_and_off():
    rc, log = launch("auto", "checkpoint.resume=auto")
    check(rc == 0 and re.search(r"in-memory checkpoints every \d+ step\(s\): one costs [\d.]+ ms", log),
          "auto under meshrun with resume auto: on, its interval measured and said", log)
    rc, log = launch("none")
    check(rc == 0 and "in-memory checkpoints" not in log and "memory_every" not in log,
          "auto with resume none: off, nothing said", log)
    rc, log = launch("none_n", "checkpoint.memory_every=2")
    check(rc == 0 and "only under checkpoint.resume auto (this run has 'none')" in log,
          "memory_every 2 with resume none: off, with a warning", log)
    r = subprocess.run([meshtrain, "train", config, *sets("alone", "checkpoint.memory_every=2",
                                                          "checkpoint.resume=auto")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    check(r.returncode == 0 and "no launcher gave this process a memory directory" in r.stdout,
          "memory_every 2 without meshrun: off, with a warning", r.stdout)


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def owner_pid(d):
    try:
        with open(os.path.join(d, ".owner")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def worker_pids(launcher):
    """{rank: pid} of the launcher's workers."""
    children = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split()
    pids = {}
    for c in children:
        for var in environ(int(c)):
            if var.startswith(b"RANK="):
                pids[int(var[5:])] = int(c)
    return pids


def killed_worker_resumes_from_memory(want, in_place):
    name = "killed_in_place" if in_place else "killed_group"
    p = subprocess.Popen([meshrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                          "--in-place-restart", "auto" if in_place else "off", config,
                          *sets(name, "checkpoint.memory_every=1", "checkpoint.resume=auto")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=PACED)
    lines, before, after = [], None, None
    for line in p.stdout:
        lines.append(line)
        if before is None and re.search(r"\[rank 0\]: .*step +6/", line):
            before = worker_pids(p.pid)
            if 1 in before:
                os.kill(before[1], signal.SIGKILL)
        if after is None and "ranks regrouped" in line:
            after = worker_pids(p.pid)  # the run then has about 6 paced steps to go
    p.wait(timeout=300)
    log = "".join(lines)
    how = "started rank 1 again alone" if in_place else "restarted the group"
    check(before and 1 in before and p.returncode == 0, f"rank 1 SIGKILLed at step 6, meshrun {how} and exited 0 "
                                                        f"(rc {p.returncode})", log)
    if in_place:
        check("starting it again alone" in log and "restarting the worker group" not in log and after is not None
              and after.get(0) == before.get(0) and after.get(1) not in (None, before[1]),
              f"rank 0 kept its process and regrouped with the new rank 1 (pids {before} → {after})", log)
    else:
        check("restarting the worker group" in log and "starting it again alone" not in log,
              "meshrun restarted the whole group", log)
    m = re.search(r"resumed from \S+/rank_0000\d/step_(\d+) at step \d+ \(in-memory checkpoint", log)
    check(m is not None and 4 <= int(m.group(1)) < STEPS, "the restart resumed from an in-memory checkpoint of step "
          f"≥ 4 ({m.group(1) if m else None}; no disk checkpoint exists)", log)
    check(rank_checksums(log.split("restarting the worker group")[-1]) == want,
          "parameters bit-identical to the uninterrupted run", log)
    # Other meshrun jobs may run beside this test: its own directory is the one whose .owner names its pid.
    left = [d for d in os.listdir("/dev/shm") if d.startswith("meshrun-") and owner_pid(f"/dev/shm/{d}") == p.pid]
    check(not left, f"meshrun's memory directory removed at exit ({left})")


when_on_and_off()
rc, ref = launch("reference", "checkpoint.memory_every=0")
want = rank_checksums(ref)
check(rc == 0 and len(want) == 2, f"the uninterrupted run's checksums ({want})", ref)
killed_worker_resumes_from_memory(want, in_place=True)
killed_worker_resumes_from_memory(want, in_place=False)
if failures:
    sys.exit(f"{len(failures)} failure(s); logs in {work}")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
print("memory checkpoints: all ok")
