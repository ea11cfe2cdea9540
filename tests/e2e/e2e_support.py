"""Helpers shared by the end-to-end tests that drive `meshtrain train` (imported from the test's own folder)."""
import json
import os
import shutil
import subprocess
import sys


def skip_without_gpu():
    """Exits 77, which the GPU tests' SKIP_RETURN_CODE reports as skipped, where no NVIDIA GPU is here."""
    if shutil.which("nvidia-smi") is None:
        print("no NVIDIA GPU here: skipped")
        sys.exit(77)


def run(cmd, **kw):
    """Runs `cmd`, echoes it and its output, and fails the test (exit 1 with the command) if it fails."""
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, **kw)
    print(p.stdout)
    if p.returncode != 0:
        sys.exit(f"FAILED: exit code {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def metrics(out_dir):
    """The records of a run's metrics.jsonl."""
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def prepare_kjv(meshtrain, src, work):
    """Byte-level shards of the repo's small text (data/kjv) under WORK/data; returns their prefix."""
    prefix = os.path.join(work, "data", "kjv")
    run([meshtrain, "prepare", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"), "--out", prefix])
    return prefix


def tiny_llama_config(work, name, prefix, steps, every, **model):
    """A 2-layer Llama (d_model 64, 4 heads over 2 kv heads, untied) on the byte-level shards PREFIX_train.bin, fp32
    on the CPU, constant LR 1e-2, a checkpoint every `every` steps, a log line every step; `model` adds or
    overrides model keys (LoRA's). Writes WORK/NAME.yaml and returns its path."""
    import yaml
    cfg = {"model": {"family": "llama", "vocab_size": 256, "n_layer": 2, "n_head": 4, "n_kv_head": 2,
                     "d_model": 64, "d_ff": 128, "max_seq_len": 32, "tie_embeddings": False, **model},
           "data": {"train": f"{prefix}_train.bin", "seq_len": 32},
           "optimizer": {"lr": 1e-2, "weight_decay": 0.0, "grad_clip": 1.0},
           "schedule": {"kind": "constant", "warmup_steps": 0},
           "train": {"steps": steps, "micro_batch_size": 4, "device": "cpu", "dtype": "fp32", "eval_every": 0,
                     "sample_tokens": 0, "threads": 1},
           "checkpoint": {"every": every, "keep": 4},
           "logging": {"every": 1}}
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def tiny_synthetic_config(work, out_dir, steps, **sections):
    """A 1-layer GPT (d_model 32, 2 heads, 16 positions) on synthetic tokens, on the CPU, micro-batch 2, one thread,
    no validation; `sections` add or override keys section by section (train's too). Written as JSON (a YAML
    subset the loader reads by its .json name, so no yaml package is needed) to WORK/tiny.json; returns its path."""
    cfg = {"model": {"n_layer": 1, "n_head": 2, "d_model": 32, "max_seq_len": 16},
           "data": {"train": "synthetic"},
           "train": {"steps": steps, "micro_batch_size": 2, "device": "cpu", "eval_every": 0, "threads": 1,
                     "out_dir": out_dir}}
    for name, keys in sections.items():
        cfg.setdefault(name, {}).update(keys)
    path = os.path.join(work, "tiny.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


class Checks:
    """Assertions that all run: `check(cond, what)` prints ok or FAIL with `what` as it goes and keeps the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)


def run_checked(main, check, work):
    """Runs main(), removes `work` however it ends, prints how many of `check`'s assertions failed and exits 1 if
    any did."""
    try:
        main()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(check.failures)} failure(s)")
    sys.exit(1 if check.failures else 0)
