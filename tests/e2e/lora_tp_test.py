#!/usr/bin/env python3
"""LoRA under tensor parallelism, end to end (tier 4; docs/lora.md "Tensor parallelism"): checkpoints and export.

A tiny Llama (seeded base, byte-level KJV shards) trains LoRA (rank 4, all seven projections, adapter dropout
0.1) for 4 steps with a checkpoint at step 2, once in one process (tp 1) and once under meshrun with tp 2 and sequence
parallelism. Asserts that
  - the tp 2 losses follow the tp 1 run within 1e-4 (fp32 sums in another order; a split adapter counted
    twice, a replicated one's gradient left partial, or ranks dropping different features depart by far more);
  - the tp 2 step-2 checkpoint resumes under tp 1, and the tp 1 one under tp 2 (the adapters' blocks
    resharded on load; the rank the checkpoint lacks takes its TP group's random streams), each ending at the
    losses of the run it left within the same bound;
  - `meshtrain export` of the tp 2 checkpoint — the merged HF directory and the PEFT adapters — gives the
    files of the tp 1 checkpoint: the same names, shapes and dtypes, the same adapter_config.json, and
    values within 1e-4 (the two trainings differ by fp32 rounding only);
  - served (`meshtrain generate --input`, greedy): the tp 2 run's step-2 and step-4 checkpoints give the same
    token ids in one process (the adapters merged at load) and under meshrun over 2 ranks (each rank's adapter
    shards beside its split weights), the step-4 ones those of its merged export, and the two steps' ids differ
    (only the adapters changed between them, so a server that dropped them could not pass).
Exit code 77 (skipped) without safetensors.
Usage: lora_tp_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import sys
import tempfile

try:
    import safetensors.torch
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, prepare_kjv, run, run_checked, tiny_llama_config  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_lora_tp_")
STEPS, HALF, TOL = 4, 2, 1e-4
check = Checks()



TP2 = ["--set=parallel.tp=2", "--set=parallel.sequence_parallel=true"]


def train(cfg, out_dir, tp, extra=()):
    sets = [f"--set=train.out_dir={out_dir}", *extra]
    if tp == 1:
        run([meshtrain, "train", cfg, *sets])
    else:
        run([meshrun, "--standalone", "--nproc-per-node", "2", cfg, *TP2, *sets])
    return [r["loss"] for r in metrics(out_dir) if "loss" in r and "val_loss" not in r]


def close(a, b):
    return len(a) == len(b) and all(abs(x - y) <= TOL * max(1.0, abs(y)) for x, y in zip(a, b))


def resume_from(cfg, run_dir, step, out_dir, tp):
    """Resumes `run_dir`'s step-`step` checkpoint under `tp` in a fresh out_dir; returns the losses it logs."""
    os.makedirs(os.path.join(out_dir, "checkpoints"))
    name = f"step_{step:08d}"
    shutil.copytree(os.path.join(run_dir, "checkpoints", name), os.path.join(out_dir, "checkpoints", name))
    with open(os.path.join(out_dir, "checkpoints", "latest"), "w") as f:
        f.write(name)
    return train(cfg, out_dir, tp, ["--set=checkpoint.resume=auto", "--set=checkpoint.every=0"])


def tensors(path):
    return {k: v.float() for k, v in safetensors.torch.load_file(path).items()}


def same_files(a_dir, b_dir, what):
    """Both export directories hold the same files; safetensors alike within TOL, others byte for byte."""
    names = sorted(os.listdir(a_dir))
    check(names == sorted(os.listdir(b_dir)), f"{what}: the same files {names}")
    for name in names:
        a, b = os.path.join(a_dir, name), os.path.join(b_dir, name)
        if not name.endswith(".safetensors"):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                check(fa.read() == fb.read(), f"{what}: {name} identical")
            continue
        ta, tb = tensors(a), tensors(b)
        check(sorted(ta) == sorted(tb), f"{what}: {name} holds the same {len(ta)} tensors")
        worst = max(((ta[k] - tb[k]).abs().max().item() if ta[k].shape == tb[k].shape else float("inf"))
                    for k in ta if k in tb)
        check(worst <= TOL, f"{what}: {name} within {worst:.2e} of the tp 1 export")


def main():
    prefix = prepare_kjv(meshtrain, src, work)
    cfg = tiny_llama_config(work, "lora", prefix, STEPS, HALF, lora_rank=4, lora_alpha=8.0, lora_dropout=0.1)
    single, tp2 = os.path.join(work, "tp1"), os.path.join(work, "tp2")
    ref = train(cfg, single, 1)
    got = train(cfg, tp2, 2)
    check(len(ref) == STEPS and close(got, ref), f"tp 2 losses {got} follow tp 1 {ref}")

    # Checkpoints cross layouts: each run's step-HALF checkpoint resumed under the other tp.
    to1 = resume_from(cfg, tp2, HALF, os.path.join(work, "tp2_to_tp1"), 1)
    check(close(to1, got[HALF:]), f"tp 2 checkpoint resumed under tp 1: {to1} = {got[HALF:]}")
    to2 = resume_from(cfg, single, HALF, os.path.join(work, "tp1_to_tp2"), 2)
    check(close(to2, ref[HALF:]), f"tp 1 checkpoint resumed under tp 2: {to2} = {ref[HALF:]}")

    for flags, what in [([], "merged export"), (["--adapters"], "PEFT export")]:
        outs = []
        for run_dir in (single, tp2):
            out = os.path.join(work, os.path.basename(run_dir) + ("_peft" if flags else "_merged"))
            run([meshtrain, "export", os.path.join(run_dir, "checkpoints"), "--format", "hf", *flags, out])
            outs.append(out)
        same_files(*outs, what)
    with open(os.path.join(work, "tp2_peft", "adapter_config.json")) as f:
        check(json.load(f).get("r") == 4, "the PEFT export of the tp 2 run names rank 4")
    served(tp2)


def generate(cmd, source, prompts, out):
    """Greedy token ids of each prompt, through `meshtrain generate --input` as `cmd` runs it."""
    run([*cmd, "generate", source, "--input", prompts, "--output", out, "--temperature", "0", "--max-tokens", "12"])
    with open(out) as f:
        return [json.loads(line)["token_ids"] for line in f]


def served(run_dir):
    """The LoRA checkpoints served in one process and under tensor parallelism, and the merged export."""
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for text in ["In the beginning", "And God said", "Let there be", "the earth was"]:
            f.write(json.dumps({"prompt": list(text.encode())}) + "\n")  # byte-level: one id per byte
    tp2_cmd = [meshrun, "--standalone", "--nproc-per-node", "2", "--no-python", meshtrain]
    ids = {}
    for step in (HALF, STEPS):
        ckpt = os.path.join(run_dir, "checkpoints", f"step_{step:08d}")
        ids[step] = generate([meshtrain], ckpt, prompts, os.path.join(work, f"served_{step}_tp1.jsonl"))
        under_tp = generate(tp2_cmd, ckpt, prompts, os.path.join(work, f"served_{step}_tp2.jsonl"))
        check(under_tp == ids[step] and all(ids[step]),
              f"step {step} served under tp 2 gives tp 1's ids (first prompt: {under_tp[0]} = {ids[step][0]})")
    check(ids[HALF] != ids[STEPS], f"the adapters of steps {HALF} and {STEPS} give other ids: {ids[HALF][0]}, "
                                   f"{ids[STEPS][0]}")
    merged = generate([meshtrain], os.path.join(work, "tp2_merged"), prompts, os.path.join(work, "served_merged.jsonl"))
    check(merged == ids[STEPS], f"the merged export serves the checkpoint's ids (first prompt: {merged[0]})")


run_checked(main, check, work)
