#!/usr/bin/env python3
"""Workers SIGKILLed at random steps, several times in one run (tier 4). One meshrun --standalone group of two DDP
workers (--max-restarts 3, `checkpoint.resume: auto`, a checkpoint every 2 steps) is watched; three times a random
rank is SIGKILLed as soon as the run (resumed after the previous kill) reaches a random step — mid-step or mid-save,
wherever the kill lands. meshrun restarts the group each time and it resumes from its newest usable checkpoint. The
final parameters must be bit-identical to an uninterrupted run's, and each recovery is reported once by the resumed run
(its seconds from the failure to its first step, the steps it redid) in the log and in metrics.jsonl. The seed is fixed, so CI draws the same kill plan
every time; MESHTRAIN_TEST_SEED=N draws another (it is printed, so a failing plan can be repeated).
Usage: random_kill_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from ckpt_e2e import kjv_setup, rank_checksums

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "random_kill")
STEPS, KILLS = 16, 3
seed = int(os.environ.get("MESHTRAIN_TEST_SEED", "1204"))
rng = random.Random(seed)
# Increasing steps, so every kill is reached after the previous restart. From step 5 on, the step-2 checkpoint is
# committed (the step-4 save waited for it), so every restart resumes; none in the last steps (a group killed after
# its final checkpoint has nothing left to train when restarted, which is an error by design).
plan = sorted(rng.sample(range(5, STEPS - 5), KILLS))
ranks = [rng.randrange(2) for _ in plan]
print(f"seed {seed}: kill rank {ranks} at steps {plan}", flush=True)


def command(out, restarts):
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=2", "data.seq_len=64",
            "train.micro_batch_size=8", "train.threads=1", "logging.every=1", "train.eval_every=0",
            "train.sample_tokens=0", f"train.steps={STEPS}", "checkpoint.every=2", "schedule.warmup_steps=2",
            f"train.out_dir={out}", "checkpoint.resume=auto", "logging.all_ranks=true"]
    return [meshrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts), config,
            *[f"--set={s}" for s in sets]]


def worker_pid(launcher, rank):
    """The pid of `launcher`'s child whose RANK is `rank`, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


ref = subprocess.run(command(os.path.join(work, "ref"), 0), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True, timeout=300)
assert ref.returncode == 0, ref.stdout[-4000:]
want = rank_checksums(ref.stdout)
assert len(want) == 2 and want[0][1] == want[1][1] and want[0][2] == str(STEPS), want

p = subprocess.Popen(command(os.path.join(work, "run"), KILLS), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True)
# The log reaches this reader late: when a kill lands, the killed group may already have printed later steps, and
# a kill armed by such a line would hit a worker of that dying group, which restarts nothing. So the next kill is
# armed only once the new group has resumed (both ranks log it); step lines after that are the new group's.
lines, kills, resumed = [], [], 0
for line in p.stdout:
    lines.append(line)
    resumed += "resumed from" in line
    m = re.search(r"step +(\d+)/%d \|" % STEPS, line)
    armed = len(kills) < KILLS and resumed >= 2 * len(kills)
    if m and armed and int(m.group(1)) >= plan[len(kills)]:
        pid = worker_pid(p.pid, ranks[len(kills)])
        if pid:
            os.kill(pid, signal.SIGKILL)
            kills.append((ranks[len(kills)], int(m.group(1))))
            print(f"killed rank {kills[-1][0]} (pid {pid}) at step {kills[-1][1]}", flush=True)
p.wait(timeout=300)
log = "".join(lines)
print(log[-3000:])
assert p.returncode == 0, f"meshrun exited {p.returncode} (seed {seed})"
assert len(kills) == KILLS, f"only {len(kills)} kills landed (seed {seed})"
assert log.count("resumed from") >= 2 * KILLS, "every restart must resume (both ranks log it)"
# Each recovery said by the resumed run, once (rank 0), with its time and the steps it redid: a kill at step k lands
# at most two steps after the newest checkpoint (every 2), plus the steps the dying group logged before it died.
recovered = re.findall(r"recovered from the failure in ([0-9.]+) s .*?; (\d+) step\(s\) redone", log)
print(f"recoveries (seconds, steps redone): {recovered}", flush=True)
assert len(recovered) == KILLS, f"one recovery line per restart, got {recovered}"
assert all(0 < float(s) < 300 and int(n) <= 4 for s, n in recovered), recovered
with open(os.path.join(work, "run", "metrics.jsonl")) as f:
    records = [r for r in map(json.loads, f) if "recovery_s" in r]
assert [r["steps_redone"] for r in records] == [int(n) for _, n in recovered], records
got = rank_checksums(log.split("resumed from")[-1])
assert got == want, f"parameters after {KILLS} kills {got} differ from the uninterrupted run's {want} (seed {seed})"
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
print(f"{KILLS} random kills {kills}: parameters equal the uninterrupted run ({want[0][1]}): ok")
