#!/usr/bin/env python3
"""Several data sources end to end (docs/data.md "Several sources"), under meshrun with 2 CPU workers.

  mixture   data.train: [A:0.75, B:0.25] (A the King James text as bytes, B the same text upper-cased: other
            tokens), 2 ranks × micro-batch 4 = 8 windows a step: every step's record holds source_tokens with
            exactly 6 × 64 tokens of A and 2 × 64 of B per step so far, the log line says them, and validation over
            [A_val, B_val] reports each source's loss (val_loss_by_source) and the token mean of both.
  resume    the same run killed right after its step-3 checkpoint (MESHTRAIN_CKPT_CRASH_AT) and restarted by
            meshrun resumes with every step's loss and the source counts bit-identical to the uninterrupted run;
            the checkpoint's state.data holds each source's position.
  forms     the YAML mapping {path, weight} and --set A:3,B:1 load to the same list; a plain list without weights
            draws by the sources' windows.
  mistakes  a weight ≤ 0, a source matching no file, a weight on data.val, weights on some sources only: exit 2
            and one line from meshrun's config check, before any worker starts.

Usage: data_mix_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

bin_dir, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked  # noqa: E402

meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
config = os.path.join(src, "configs", "quickstart.yaml")
work = tempfile.mkdtemp(prefix="meshtrain_data_mix_")
check = Checks()
STEPS, SEQ = 6, 64


def prepare():
    text = os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt")
    upper = os.path.join(work, "upper.txt")
    with open(text, encoding="utf-8") as f, open(upper, "w", encoding="utf-8") as g:
        g.write(f.read()[:400_000].upper())
    for name, path in (("a", text), ("b", upper)):
        subprocess.run([meshtrain, "prepare", path, "--out", os.path.join(work, name)], check=True,
                       stdout=subprocess.DEVNULL)
    return [os.path.join(work, f"{n}_{split}.bin") for n in "ab" for split in ("train", "val")]


def launch(out, *sets, env=None, restarts=0):
    e = dict(os.environ)
    e.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    e.update(env or {})
    sets = ["model.n_layer=2", "model.d_model=64", f"data.seq_len={SEQ}", "train.micro_batch_size=4", "train.threads=1",
            "logging.every=1", "train.eval_every=3", "train.eval_batches=2", "train.sample_tokens=0",
            f"train.steps={STEPS}", "checkpoint.every=3", "schedule.warmup_steps=2", f"train.out_dir={out}", *sets]
    cmd = [meshrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts), config,
           *[f"--set={s}" for s in sets]]
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return r.returncode, r.stdout


def records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def by_step(recs, key):
    """step → the last record's `key` (a resumed run appends the steps it redoes)."""
    return {r["step"]: r[key] for r in recs if key in r}


def main():
    a_train, a_val, b_train, b_val = prepare()
    mix = [f"data.train={a_train}:0.75,{b_train}:0.25", f"data.val=[{a_val}, {b_val}]"]

    ref = os.path.join(work, "ref")
    rc, log = launch(ref, *mix)
    check(rc == 0, f"mixture: meshrun exits 0 (rc={rc}; {log[-3000:] if rc else ''})")
    recs = records(ref) if rc == 0 else []
    tokens = by_step(recs, "source_tokens")
    want = {s: {a_train: 6 * SEQ * s, b_train: 2 * SEQ * s} for s in range(1, STEPS + 1)}
    check(tokens == want, f"mixture: source_tokens = 6 : 2 windows of {SEQ} tokens a step, cumulative (got {tokens})")
    check(f"| tokens {a_train} {6 * SEQ * STEPS}, {b_train} {2 * SEQ * STEPS}" in log,
          "mixture: the last step's log line names each source's tokens")
    check(f"data.train: a mixture of 2 sources ({a_train}" in log and "drawn by their weights" in log,
          "mixture: the start-up line names the sources")
    vals = [r for r in recs if "val_loss" in r]
    per = [r.get("val_loss_by_source", {}) for r in vals]
    check(len(vals) == 2 and all(sorted(p) == sorted([a_val, b_val]) for p in per)
          and all(min(p.values()) <= r["val_loss"] <= max(p.values()) for p, r in zip(per, vals)),
          f"validation: each source's loss and their token mean at steps 3 and 6 (got {vals})")
    check(f"validation loss {vals[-1]['val_loss']:.4f} ({a_val} " in log if vals else False,
          "validation: the log line names each source's loss")

    run = os.path.join(work, "run")
    # checkpoint.memory_every=0: the resume from the disk checkpoint, whose meta.json is read below.
    rc, log = launch(run, *mix, "checkpoint.resume=auto", "checkpoint.memory_every=0",
                     env={"MESHTRAIN_CKPT_CRASH_AT": "committed:0:3"}, restarts=1)
    check(rc == 0 and "killing itself at stage 'committed' of step 3" in log
          and f"resumed from {run}/checkpoints/step_00000003 at step 3" in log,
          f"resume: killed after the step-3 checkpoint, resumed from it (rc={rc}; {log[-2000:] if rc else ''})")
    got = records(run) if rc == 0 else []
    check(by_step(got, "loss") == by_step(recs, "loss") and len(by_step(got, "loss")) == STEPS,
          f"resume: every step's loss bit-identical ({by_step(got, 'loss')} vs {by_step(recs, 'loss')})")
    check(by_step(got, "source_tokens") == tokens, "resume: the source counts continue as uninterrupted")
    meta_path = os.path.join(run, "checkpoints", "step_00000003", "meta.json")
    data = json.load(open(meta_path))["state"]["data"] if os.path.exists(meta_path) else {}
    check(len(data.get("sources", [])) == 2 and data.get("cursor") == 24,
          f"resume: state.data holds the stream (24 windows) and each source's position (got {data})")

    # The YAML mapping form and --set's PATTERN:WEIGHT list load alike.
    yaml_cfg = os.path.join(work, "mix.yaml")
    with open(yaml_cfg, "w") as f:
        f.write(f"data:\n  train:\n    - {{path: {a_train}, weight: 3}}\n    - {{path: {b_train}, weight: 1}}\n")
    shown = subprocess.run([meshtrain, "config", yaml_cfg], capture_output=True, text=True)
    shown_set = subprocess.run([meshtrain, "config", yaml_cfg, "--set", f"data.train={a_train}:3,{b_train}:1"],
                               capture_output=True, text=True)
    line = f'train: ["{a_train}:3", "{b_train}:1"]'
    check(shown.returncode == 0 and line in shown.stdout and line in shown_set.stdout,
          f"forms: {{path, weight}} and --set A:3,B:1 both print {line!r} ({shown.stderr.strip()}{shown_set.stderr.strip()})")

    plain = os.path.join(work, "plain")
    rc, log = launch(plain, f"data.train=[{a_train}, {b_train}]", "data.val=", "train.steps=2", "train.eval_every=0",
                     "checkpoint.save_final=false", "checkpoint.every=0")
    check(rc == 0 and "drawn by their windows (no weights given)" in log, f"plain list: drawn by windows (rc={rc})")

    for sets, fragment, what in [
            ([f"data.train={a_train}:0,{b_train}:1"], f"data.train: '{a_train}:0': weight 0; valid a number > 0",
             "a weight of 0"),
            ([f"data.train={a_train}:-1,{b_train}:1"], "weight -1; valid a number > 0", "a negative weight"),
            ([f"data.train={a_train}:1,{work}/nothing_*.bin:1"], f"data.train: '{work}/nothing_*.bin' matches no file",
             "a source matching no file"),
            ([f"data.train={a_train}", f"data.val={a_val}:0.5"], f"data.val: '{a_val}:0.5' has a weight", "a weight on val"),
            ([f"data.train={a_train}:1,{b_train}"], "1 of 2 sources have a weight", "weights on some sources only")]:
        rc, log = launch(os.path.join(work, "bad"), *sets)
        lines = [x for x in log.strip().splitlines() if x.strip()]
        check(rc == 2 and fragment in log and not any("[rank" in x for x in lines) and len(lines) <= 2,
              f"mistake, {what}: exit 2, one line with {fragment!r}, no worker (rc={rc}, {log.strip()[-400:]!r})")


run_checked(main, check, work)
