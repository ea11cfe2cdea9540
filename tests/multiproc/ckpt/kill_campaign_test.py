#!/usr/bin/env python3
"""A seeded kill -9 campaign against training (two DDP workers of `meshtrain train` under meshrun, CPU backend,
`checkpoint.resume: auto`, a checkpoint every 2 steps).

Each trial SIGKILLs one random target at a random step:
  worker    a random rank, as the run reaches the step; meshrun (--max-restarts 1) restarts the group, which
            resumes from its newest usable checkpoint;
  meshrun   the launcher itself (its workers die with it: PDEATHSIG); a second meshrun resumes;
  mid-save  a random rank at a random stage of a save (the crash points of ckpt/crash_point.h through
            MESHTRAIN_CKPT_CRASH_AT); a second meshrun resumes.
Every trial must end with parameters bit-identical to an uninterrupted run's (the per-rank checksums the trainer
logs), and `latest` must never dangle: whenever it is looked at (on every log line while a run goes, after each
kill, at the end) it names a complete checkpoint (a step directory with its meta.json).

Kills are triggered by what the run shows (a step line, a crash point reached), never by a sleep. The seed is
fixed (so CI runs the same trials every time) and printed with the trial list; `--seed N` replays another
campaign, `--trials K` sizes it.

    kill_campaign_test.py BIN_DIR SOURCE_DIR [--seed N] [--trials K]
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("bin_dir")
parser.add_argument("source_dir")
parser.add_argument("--seed", type=int, default=29)
parser.add_argument("--trials", type=int, default=5)
args = parser.parse_args()
sys.path.insert(0, os.path.join(args.source_dir, "tests", "e2e", "ckpt"))
from ckpt_e2e import kjv_setup, rank_checksums  # noqa: E402  (the checkpoint tests' shared set-up)

STEPS, EVERY = 12, 2
EVERY_RANK = ["host_copy", "file_partial", "file_synced"]  # save stages every rank passes (crash_point.h)
RANK0_ONLY = ["meta_written", "renamed", "committed"]
TARGETS = ["worker", "meshrun", "mid-save"]
# What the trial trains: the plain model, with the optimizer offloaded to host threads, or LoRA adapters over a
# frozen base (Llama: LoRA's family). Each has its own uninterrupted reference run.
VARIANTS = {"plain": [], "offload": ["optimizer.offload=cpu", "optimizer.offload_threads=1"],
            "lora": ["model.family=llama", "model.tie_embeddings=false", "model.lora_rank=4"]}

meshrun, meshtrain, config, work, prefix = kjv_setup(args.bin_dir, args.source_dir, "kill_campaign")


def plan(seed, trials):
    """The campaign: every target at least once (when trials >= 3), the rest random; steps and ranks random.
    Worker and launcher kills land from step 5 (the step-2 checkpoint is committed by then, so every restart
    resumes) to the middle of the run (far from its end, so the kill lands before the run could finish);
    mid-save kills at a save of step 4..STEPS-2 (one before it is complete, none at the final save)."""
    rng = random.Random(seed)

    def covering(choices):  # each choice once (as far as the trials go), the rest at random, shuffled
        picks = choices[:trials] + [rng.choice(choices) for _ in range(trials - len(choices))]
        rng.shuffle(picks)
        return picks

    out = []
    for t, variant in zip(covering(TARGETS), covering(list(VARIANTS))):
        if t == "mid-save":
            stage = rng.choice(EVERY_RANK + RANK0_ONLY)
            rank = rng.randrange(2) if stage in EVERY_RANK else 0
            out.append({"target": t, "rank": rank, "stage": stage, "step": rng.randrange(4, STEPS - 1, EVERY)})
        else:
            out.append({"target": t, "rank": rng.randrange(2), "step": rng.randrange(5, STEPS // 2 + 2)})
        out[-1]["variant"] = variant
    return out


def describe(t):
    if t["target"] == "mid-save":
        what = f"rank {t['rank']} killed at save stage '{t['stage']}' of step {t['step']}"
    elif t["target"] == "meshrun":
        what = f"meshrun killed at step {t['step']}"
    else:
        what = f"rank {t['rank']} killed at step {t['step']}"
    return f"{t['variant']}: {what}"


def command(out, restarts, variant):
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=1", "model.d_model=64", "model.n_head=2",
            "data.seq_len=32", "train.micro_batch_size=4", "train.threads=1", "logging.every=1",
            "train.eval_every=0", "train.sample_tokens=0", f"train.steps={STEPS}", f"checkpoint.every={EVERY}",
            "schedule.warmup_steps=2", f"train.out_dir={out}", "checkpoint.resume=auto", "logging.all_ranks=true",
            *VARIANTS[variant]]
    return [meshrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts), config,
            *[f"--set={s}" for s in sets]]


def environment(crash_at=None):
    env = dict(os.environ)
    env.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    if crash_at:
        env["MESHTRAIN_CKPT_CRASH_AT"] = crash_at
    return env


def fail(what, log=""):
    print(log[-4000:])
    print(f"FAIL (seed {args.seed}; replay: kill_campaign_test.py BIN_DIR SOURCE_DIR --seed {args.seed} --trials "
          f"{args.trials}): {what}")
    sys.exit(1)


def check_latest(ckpt, where, log=""):
    """`latest`, if present, names a complete checkpoint. A save may move it between our two reads (it moves
    last, after the step directory is complete, and only older directories are removed), so a named
    directory that is missing counts only if `latest` still names it."""
    path = os.path.join(ckpt, "latest")
    for _ in range(3):
        try:
            with open(path) as f:
                name = f.read().strip()
        except FileNotFoundError:
            return
        if os.path.isfile(os.path.join(ckpt, name, "meta.json")):
            return
        try:
            with open(path) as f:
                if f.read().strip() == name:
                    fail(f"{where}: latest names {name!r}, which is not a complete checkpoint "
                         f"(in {ckpt}: {sorted(os.listdir(ckpt))})", log)
        except FileNotFoundError:
            return
    fail(f"{where}: latest kept moving", log)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except FileNotFoundError:
        return []


def worker_pid(launcher, rank):
    """The pid of `launcher`'s child whose RANK is `rank`, or None."""
    for pid in children(launcher):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return pid
        except OSError:
            continue
    return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def watch(t, out, restarts):
    """Runs meshrun, reading its log; once a step line reaches the trial's step, kills the trial's target
    (a worker, or meshrun itself). Returns (exit code, log)."""
    ckpt = os.path.join(out, "checkpoints")
    p = subprocess.Popen(command(out, restarts, t["variant"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=environment())
    lines, killed = [], None
    for line in p.stdout:
        lines.append(line)
        check_latest(ckpt, "while training", "".join(lines))
        m = re.search(r"step +(\d+)/%d \|" % STEPS, line)
        if killed or not m or int(m.group(1)) < t["step"]:
            continue
        if t["target"] == "meshrun":
            workers = [c for c in children(p.pid)]
            p.kill()
            p.wait()
            deadline = time.time() + 60
            while any(alive(w) for w in workers) and time.time() < deadline:
                time.sleep(0.05)
            if any(alive(w) for w in workers):
                fail("workers outlived a SIGKILLed meshrun", "".join(lines))
            killed = m.group(1)
            break
        pid = worker_pid(p.pid, t["rank"])
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed = m.group(1)
            lines.append(f"(campaign: SIGKILL to rank {t['rank']}, pid {pid}, at step {m.group(1)})\n")
    rc = p.wait(timeout=300)
    log = "".join(lines)
    if not killed:
        fail(f"the run ended before the kill at step {t['step']} landed", log)
    print(f"trial: SIGKILL landed as the log showed step {killed}", flush=True)
    return rc, log


def run(out, variant, crash_at=None):
    p = subprocess.run(command(out, 0, variant), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=environment(crash_at), timeout=300)
    return p.returncode, p.stdout


def reference(variant, cache={}):
    """The per-rank checksums of `variant`'s uninterrupted run (run once)."""
    if variant not in cache:
        rc, log = run(os.path.join(work, f"reference_{variant}"), variant)
        want = rank_checksums(log)
        if rc != 0 or len(want) != 2 or want[0][1] != want[1][1] or want[0][2] != str(STEPS):
            fail(f"the uninterrupted {variant} run: rc {rc}, checksums {want}", log)
        cache[variant] = want
    return cache[variant]


def trial(i, t):
    want = reference(t["variant"])
    out = os.path.join(work, f"trial{i}")
    ckpt = os.path.join(out, "checkpoints")
    if t["target"] == "worker":
        rc, log = watch(t, out, 1)
        if rc != 0 or log.count("resumed from") < 2:
            fail(f"trial {i} ({describe(t)}): meshrun exited {rc}; the restarted group must resume and finish", log)
        final = log
    else:
        if t["target"] == "meshrun":
            rc, log = watch(t, out, 0)
        else:
            rc, log = run(out, t["variant"], f"{t['stage']}:{t['rank']}:{t['step']}")
            if f"killing itself at stage '{t['stage']}' of step {t['step']}" not in log:
                fail(f"trial {i} ({describe(t)}): the crash point did not fire", log)
        if rc == 0:
            fail(f"trial {i} ({describe(t)}): the killed run exited 0", log)
        check_latest(ckpt, f"trial {i} after the kill", log)
        rc, final = run(out, t["variant"])
        if rc != 0 or final.count("resumed from") < 2:
            fail(f"trial {i} ({describe(t)}): the resumed run exited {rc}, or did not resume", final)
    check_latest(ckpt, f"trial {i} at the end", final)
    got = rank_checksums(final.split("resumed from")[-1])
    if got != want:
        fail(f"trial {i} ({describe(t)}): parameters {got} differ from the uninterrupted run's {want}", final)
    print(f"trial {i}: {describe(t)}: resumed, parameters bit-identical ({want[0][1]}), latest never dangled",
          flush=True)


trials = plan(args.seed, args.trials)
print(f"seed {args.seed}, {len(trials)} trials:", flush=True)
for i, t in enumerate(trials):
    print(f"  trial {i}: {describe(t)}", flush=True)
t0 = time.time()
for i, t in enumerate(trials):
    trial(i, t)
shutil.rmtree(work, ignore_errors=True)  # kept only when a trial fails
print(f"kill campaign (seed {args.seed}): {len(trials)} trials ok in {time.time() - t0:.0f} s")
