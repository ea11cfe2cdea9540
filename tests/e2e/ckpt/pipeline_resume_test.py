#!/usr/bin/env python3
"""Pipeline checkpoints through the trainer (meshrun, CPU backend, fp32, deterministic; docs/pipeline.md).

  reshard   Saved under pp 2 × fsdp 2 at step 3, resumed under one process (pp 1), pp 4 and fsdp 4 with the same
            global batch (micro_batch_size × data-parallel ranks = 8) and data cursor: steps 4-6 lose what the
            uninterrupted pp 2 × fsdp 2 run lost, within RESHARD_ATOL (only the reduction order differs). Each
            stage writes only its own blocks; the union is the whole model.
  exact     pp 2 × fsdp 2 with --max-restarts 1, rank 0 killing itself right after committing step 3: the
            resumed run's losses of steps 1-6 are bit-identical to the uninterrupted run's. The step log carries
            the measured bubble of every stage (pp_bubble) and the peak live activations (pp_peak_activations).
  tied      Tied embeddings (model.tie_embeddings: true) saved under pp 2 at step 3: the checkpoint holds one
            tok_embed.weight (the first stage's block and its optimizer state; the last stage's copy is written by
            no rank), and loading fills both copies — resumed under pp 2, one process and pp 4, steps 4-6 lose
            what the uninterrupted pp 2 run lost, within RESHARD_ATOL.

Usage: pipeline_resume_test.py BIN_DIR SOURCE_DIR reshard|exact|tied
"""
import json
import os
import shutil
import subprocess
import sys

from ckpt_e2e import kjv_setup  # noqa: E402  (this file's folder)

bin_dir, src, mode = sys.argv[1], sys.argv[2], sys.argv[3]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, f"pipeline_ckpt_{mode}")
STEPS, SAVE_AT = 6, 3
RESHARD_ATOL = 1e-4
LAYOUTS = {  # name → (processes, data-parallel ranks, --set overrides)
    "pp2fsdp2": (4, 2, ["parallel.pp=2", "parallel.fsdp=2"]),
    "pp2": (2, 1, ["parallel.pp=2"]),
    "pp4": (4, 1, ["parallel.pp=4"]),
    "fsdp4": (4, 4, ["parallel.fsdp=4"]),
    "single": (1, 1, []),
}


def train(out, layout, *sets, env=None, restarts=0):
    nproc, data_ranks, lsets = LAYOUTS[layout]
    e = dict(os.environ)
    e.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    e.update(env or {})
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=4", "model.d_model=64",
            "model.tie_embeddings=false", "data.seq_len=64", f"train.micro_batch_size={8 // data_ranks}",
            "train.threads=1", "logging.every=1", "train.eval_every=0", "train.sample_tokens=0",
            f"train.steps={STEPS}", f"checkpoint.every={SAVE_AT}", "schedule.warmup_steps=2",
            "checkpoint.memory_every=0",  # the disk checkpoints' resume (in-memory ones: docs/resilience.md)
            f"train.out_dir={out}", *lsets, *sets]
    cmd = [meshrun, "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", str(restarts), config,
           *[f"--set={s}" for s in sets]]
    r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stdout[-6000:])
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}")
    return r.stdout


def records(out):
    """step → the last metrics record of that step (a resumed run appends the steps it redoes)."""
    got = {}
    for line in open(os.path.join(out, "metrics.jsonl")):
        rec = json.loads(line)
        if "loss" in rec:
            got[rec["step"]] = rec
    return got


def expect(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def resumed_diff(out, layout, saved, ref, ranks, *sets):
    """Resumes `saved` (written by `ranks` ranks) under `layout`: the largest |loss diff| of the steps after it
    against the uninterrupted run's `ref`."""
    log = train(out, layout, *sets, f"checkpoint.resume={saved}")
    expect(f"resumed from {saved} at step {SAVE_AT} (saved by {ranks} rank(s)" in log, f"{layout}: no resume line")
    got = {s: r["loss"] for s, r in records(out).items()}
    expect(sorted(got) == list(range(SAVE_AT + 1, STEPS + 1)), f"{layout}: steps {sorted(got)}")
    diff = max(abs(got[s] - ref[s]) for s in got)
    expect(diff <= RESHARD_ATOL, f"{layout}: losses {got} vs the uninterrupted {ref}: max diff {diff:.3g}")
    return diff


def reshard():
    ref_out = os.path.join(work, "pp2fsdp2")
    train(ref_out, "pp2fsdp2")
    ref = {s: r["loss"] for s, r in records(ref_out).items()}
    saved = os.path.join(ref_out, "checkpoints", f"step_{SAVE_AT:08d}")
    for layout in ("single", "pp4", "fsdp4"):
        diff = resumed_diff(os.path.join(work, layout), layout, saved, ref, 4)
        print(f"reshard pp2×fsdp2 → {layout}: steps {SAVE_AT + 1}-{STEPS} max |loss diff| {diff:.2e} "
              f"≤ {RESHARD_ATOL}: ok")


def exact():
    ref_out = os.path.join(work, "ref")
    train(ref_out, "pp2fsdp2")
    ref = records(ref_out)
    expect(sorted(ref) == list(range(1, STEPS + 1)), f"steps {sorted(ref)}")
    bubbles = ref[STEPS].get("pp_bubble")
    expect(bubbles is not None and len(bubbles) == 4 and all(0 <= b < 1 for b in bubbles),
           f"pp_bubble per rank missing or out of [0, 1): {bubbles}")
    run_out = os.path.join(work, "run")
    log = train(run_out, "pp2fsdp2", "checkpoint.resume=auto", env={"MESHTRAIN_CKPT_CRASH_AT": f"committed:0:{SAVE_AT}"},
                restarts=1)
    expect("killing itself at stage 'committed' of step 3" in log, "the crash point did not fire")
    expect(f"resumed from {run_out}/checkpoints/step_00000003 at step 3" in log, "did not resume from step 3")
    got = records(run_out)
    for s in range(1, STEPS + 1):
        expect(got[s]["loss"] == ref[s]["loss"], f"step {s} loss {got[s]['loss']!r} after resume, "
                                                 f"{ref[s]['loss']!r} uninterrupted")
    print(f"exact resume pp2×fsdp2: losses of steps 1-{STEPS} bit-identical; measured bubble per rank at step "
          f"{STEPS}: {', '.join(f'{b:.2f}' for b in bubbles)}: ok")


def tied():
    ref_out = os.path.join(work, "pp2")
    train(ref_out, "pp2", "model.tie_embeddings=true")
    ref = {s: r["loss"] for s, r in records(ref_out).items()}
    saved = os.path.join(ref_out, "checkpoints", f"step_{SAVE_AT:08d}")
    tensors = json.load(open(os.path.join(saved, "meta.json")))["tensors"]
    expect("model.lm_head.weight" not in tensors, "a tied model saved an lm_head.weight")
    for name in ("model.tok_embed.weight", "optim.tok_embed.weight.exp_avg"):
        shards = tensors[name]["shards"]
        expect(len(shards) == 1, f"{name} saved {len(shards)} times (the last stage's copy must not be written)")
    for layout in ("pp2", "single", "pp4"):
        diff = resumed_diff(os.path.join(work, f"tied_{layout}"), layout, saved, ref, 2, "model.tie_embeddings=true")
        print(f"tied pp2 → {layout}: one tok_embed.weight saved; steps {SAVE_AT + 1}-{STEPS} max |loss diff| "
              f"{diff:.2e} ≤ {RESHARD_ATOL}: ok")


{"reshard": reshard, "exact": exact, "tied": tied}[mode]()
shutil.rmtree(work)  # kept only when the test fails (every failure exits above)
