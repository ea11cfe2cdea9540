#!/usr/bin/env python3
"""No silent state changes between runs of one directory (tier 4; the real `meshtrain train`, and meshrun with CPU
workers, on a tiny byte-level GPT over the KJV shards):

  out_dir     a second fresh run (checkpoint.resume: none) into a train.out_dir that holds checkpoints and metrics
              is refused — by `meshtrain train` and by meshrun before any worker starts — with exit 2 and one line
              naming both ways on (checkpoint.resume=auto, another train.out_dir or --overwrite); nothing in the
              directory changes. `--overwrite` starts afresh and says what it removed: every step is in
              metrics.jsonl once, no checkpoint of the first run is left. Its byte-level end-of-run sample, no
              valid UTF-8, reaches metrics.jsonl with U+FFFD for the invalid bytes (the run does not fail on it).
  world size  a checkpoint of 2 data-parallel ranks (micro-batch 4: a global batch of 8) resumed by one process
              keeps the global batch: train.grad_accum 1 → 2, said in one line; the tokens per step stay 8
              windows and steps 3-4 lose what the 2-rank run lost (the same windows, another reduction order).
              Resumed again (from the one-process checkpoint) it derives the same accumulation: the checkpoint
              records the batch the run was given. At 3 ranks no accumulation keeps 8: exit 2, one line with the
              arithmetic.
  schedule    raising train.steps on resume says that the learning-rate schedule is re-derived (train.steps
              4 → 6, both rates); an unchanged schedule says nothing.
  validation  train.eval_every: 0 validates never, the end included (data.val set); a data.val too small for one
              step is refused by `meshtrain config` and by meshrun before any worker starts (exit 2, one line),
              and passes where validation is off.
Usage: run_state_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "ckpt"))
from ckpt_e2e import kjv_setup  # noqa: E402
from e2e_support import Checks, metrics, run_checked  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "run_state")
check = Checks()
SEQ = 32
TINY = [f"data.train={prefix}_train.bin", f"data.val={prefix}_val.bin", "model.n_layer=2", "model.d_model=64",
        f"data.seq_len={SEQ}", "train.micro_batch_size=4", "train.threads=1", "logging.every=1",
        "train.eval_every=0", "train.sample_tokens=0", "schedule.warmup_steps=1", "checkpoint.keep=0"]


def sh(cmd):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(p.stdout[-6000:], flush=True)
    return p.returncode, p.stdout


def train(out, *sets, nproc=0, flags=()):
    """`meshtrain train` (nproc 0) or meshrun with nproc CPU workers on the tiny config."""
    args = [config, *[f"--set={s}" for s in [*TINY, f"train.out_dir={out}", *sets]], *flags]
    if nproc:
        return sh([meshrun, "--standalone", "--nproc-per-node", str(nproc), *args])
    return sh([meshtrain, "train", *args])


def error_lines(log):
    """The lines that report an error: meshtrain's `meshtrain: error: …`, meshrun's `CONFIG: …` for a config."""
    return [line for line in log.splitlines() if "error" in line.lower() or line.startswith(config + ":")]


def snapshot(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = (os.path.getsize(p), os.path.getmtime(p))
    return out


def losses(out):
    return {r["step"]: r["loss"] for r in metrics(out) if "loss" in r}


def out_dir_case():
    d = os.path.join(work, "again")
    rc, _ = train(d, "train.steps=2", "checkpoint.every=1")
    check(rc == 0, "out_dir: the first run exits 0")
    before = snapshot(d)
    for name, nproc in (("meshtrain train", 0), ("meshrun", 2)):
        rc, log = train(d, "train.steps=2", "checkpoint.every=1", nproc=nproc)
        check(rc == 2, f"out_dir: {name} into a directory holding a run exits 2 (got {rc})")
        lines = error_lines(log)
        check(len(lines) == 1 and "checkpoint.resume=auto" in lines[0] and "--overwrite" in lines[0]
              and "train.out_dir" in lines[0] and "step_00000002" in lines[0],
              f"out_dir: {name}: one line naming the run and both choices: {lines}")
        check("[rank" not in log and "step      1" not in log, f"out_dir: {name}: no worker started")
        check(snapshot(d) == before, f"out_dir: {name}: nothing in the directory changed")
    rc, log = train(d, "train.steps=3", "checkpoint.every=3", "train.sample_tokens=64", nproc=2, flags=["--overwrite"])
    check(rc == 0, "out_dir: --overwrite under meshrun exits 0")
    # A byte-level model's sample is no valid UTF-8: its bytes are replaced (U+FFFD), never a crash of the run.
    samples = [s for r in metrics(d) if "samples" in r for s in r["samples"]]
    check(len(samples) == 1 and "\ufffd" in samples[0]["text"] and samples[0]["prompt"] == "And God said",
          f"samples: the byte-level sample in metrics.jsonl, invalid bytes replaced: {samples}")
    check(re.search(r"starting afresh in .*again: removed the previous run's .*step_00000001.*metrics\.jsonl", log)
          is not None, "out_dir: --overwrite says what it removed")
    steps = [r["step"] for r in metrics(d) if "loss" in r and "samples" not in r]
    check(steps == [1, 2, 3], f"out_dir: every step in metrics.jsonl once after --overwrite: {steps}")
    ckpts = sorted(e for e in os.listdir(os.path.join(d, "checkpoints")) if e.startswith("step_"))
    check(ckpts == ["step_00000003"], f"out_dir: only the new run's checkpoints: {ckpts}")
    check(not any("val_loss" in r for r in metrics(d)), "validation: train.eval_every 0 never validates")


def world_size_case():
    two, one, again = (os.path.join(work, n) for n in ("two", "one", "again_one"))
    rc, _ = train(two, "train.steps=4", "checkpoint.every=2", nproc=2)
    check(rc == 0, "world size: the 2-rank run exits 0")
    step2 = os.path.join(two, "checkpoints", "step_00000002")
    rc, log = train(one, "train.steps=4", f"checkpoint.resume={step2}")
    check(rc == 0, "world size: resumed by one process, exit 0")
    check(re.search(r"train\.grad_accum 1 → 2 keeps its global batch of 8 \(micro_batch_size 4 × grad_accum 2 × 1 "
                    r"data-parallel rank\)", log) is not None, "world size: one line says the accumulation derived")
    check("learning-rate schedule is re-derived" not in log, "schedule: an unchanged schedule says nothing")
    recs = [r for r in metrics(one) if "loss" in r]
    check(recs and recs[-1]["step"] == 4 and recs[-1]["tokens"] == 4 * 8 * SEQ,
          f"world size: 8 windows per step kept: {[(r['step'], r['tokens']) for r in recs]}")
    a, b = losses(two), losses(one)
    for s in (3, 4):
        check(s in a and s in b and abs(a[s] - b[s]) < 1e-3,
              f"world size: step {s} loss {b.get(s)} = 2 ranks' {a.get(s)}")
    # The one-process checkpoint resumed again, train.steps raised: the same derivation, and the schedule said.
    rc, log = train(again, "train.steps=6", f"checkpoint.resume={os.path.join(one, 'checkpoints')}")
    check(rc == 0, "schedule: resumed with train.steps 6, exit 0")
    check("train.grad_accum 1 → 2 keeps its global batch of 8" in log,
          "world size: a second resume derives from the batch the run was given")
    check(re.search(r"learning-rate schedule is re-derived from this run's settings \(train\.steps 4 → 6\): lr "
                    r"[0-9.e+-]+ at step 4, where the saved run's schedule had [0-9.e+-]+", log) is not None,
          "schedule: raising train.steps says the schedule is re-derived, with both rates")
    rc, log = train(os.path.join(work, "three"), "train.steps=4", f"checkpoint.resume={step2}", nproc=3)
    lines = [line for line in error_lines(log) if "global batch" in line]
    check(rc == 2, f"world size: 3 ranks exit 2 (got {rc})")
    check(lines and "8 (micro_batch_size 4 × grad_accum 1 × 2 data-parallel ranks)" in lines[0]
          and "8 is not a multiple of 4 × 3" in lines[0], f"world size: one line with the arithmetic: {lines[:1]}")


def small_val_case():
    small = os.path.join(work, "small_val.bin")
    with open(small, "wb") as f:
        f.write(bytes(2 * 40))  # 40 uint16 tokens: one window of 33 at most; 2 ranks need one each
    sets = [f"--set={s}" for s in [*TINY, f"data.val={small}", "train.eval_every=2",
                                   f"train.out_dir={os.path.join(work, 'small')}"]]
    for name, cmd in (("meshtrain config", [meshtrain, "config", config, "--world-size", "2", *sets]),
                      ("meshrun", [meshrun, "--standalone", "--nproc-per-node", "2", config, *sets])):
        rc, log = sh(cmd)
        lines = error_lines(log)
        check(rc == 2 and len(lines) == 1 and "data.val" in lines[0] and "holds at most 1 windows" in lines[0]
              and "validation needs one a data-parallel rank(2)" in lines[0],
              f"validation: {name} refuses a data.val without a window for each rank: {lines}")
        check("[rank" not in log, f"validation: {name}: no worker started")
    rc, _ = sh([meshtrain, "config", config, *sets, "--set=train.eval_every=0"])
    check(rc == 0, "validation: the same data.val passes where validation is off")
    # Two windows: fewer than a step's micro_batch_size × ranks, one for each rank: validated in smaller batches.
    two = os.path.join(work, "two_val.bin")
    with open(two, "wb") as f:
        f.write(bytes(2 * 80))
    rc, log = sh([meshrun, "--standalone", "--nproc-per-node", "2", config, *sets, f"--set=data.val={two}",
                  "--set=train.steps=2", f"--set=train.out_dir={os.path.join(work, 'two_val')}"])
    check(rc == 0 and "read in micro-batches of 1 (of the" in log and "validation loss" in log,
          f"validation: a data.val of 2 windows on 2 ranks is read in micro-batches of 1 (rc={rc}; {log[-1500:]})")


def main():
    out_dir_case()
    world_size_case()
    small_val_case()


run_checked(main, check, work)
