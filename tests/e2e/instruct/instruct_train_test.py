#!/usr/bin/env python3
"""Instruction fine-tuning end to end on the CPU (tier 4): JSONL made here → scripts/prepare_instruct.py (a
tokenizer trained here on the KJV text) → `meshtrain train` under meshrun with 2 workers.

  global mean: 2 ranks × grad_accum 2 × micro-batch 1 against one process with one micro-batch of 4 — the
               same sequences, the loss the mean over every assistant token of the step in both. Every
               example's answer has its own length, so the unmasked counts vary between micro-batches and
               ranks: a mean of per-micro-batch means would differ from the one-process value. Losses of the
               first steps agree within fp32 rounding (step 1: the loss; later steps: the gradients that made
               them), packed (documents sharing a sequence) and unpacked (one document per sequence, padded).
               Packed, also tensor parallel 2, FSDP 2 with activation checkpointing and a pipeline of 2 stages
               (its 4 micro-batches re-cut from the step's rows, each with its documents and loss weight; the
               model's embeddings tied, so the last stage holds a copy) against one process.
  training:    the 2-worker packed run's loss on assistant tokens is finite and falls.
Exit code 77 (skipped) without tokenizers or transformers.
Usage: instruct_train_test.py BIN_DIR SOURCE_DIR
"""
import json
import math
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(here))  # e2e_support
try:
    import tokenizers  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, run, run_checked  # noqa: E402
from tiny_tokenizer import kjv_lines, make_tokenizer  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_instruct_train_")
STEPS, COMPARED = 24, 3
check = Checks()



def make_examples(n=120):
    """Verses split in two: the first half asks, the second answers, in the three formats; no two answers
    have the same length in characters (so their token counts vary too)."""
    out, seen = [], set()
    for line in kjv_lines(src, 3000):
        words = line.split()
        if len(words) < 8:
            continue
        half = len(words) // 2
        ask, answer = " ".join(words[:half]), " ".join(words[half:])
        if len(answer) in seen:
            continue
        seen.add(len(answer))
        i = len(out)
        if i % 3 == 0:
            out.append({"messages": [{"role": "user", "content": f"Continue: {ask}"},
                                     {"role": "assistant", "content": answer}]})
        elif i % 3 == 1:
            out.append({"instruction": "Continue the verse.", "input": ask, "output": answer})
        else:
            out.append({"prompt": f"{ask} ", "completion": answer})
        if len(out) == n:
            break
    return out


def config(path, data_prefix, packing):
    with open(path, "w") as f:
        f.write(f"""model:
  family: llama
  vocab_size: 512
  n_layer: 2
  n_head: 4
  n_kv_head: 2
  d_model: 64
  max_seq_len: 64
data:
  train: {data_prefix}_train_*.bin
  packing: {str(packing).lower()}
optimizer:
  lr: 3e-3
schedule:
  warmup_steps: 2
train:
  steps: {STEPS}
  device: cpu
  eval_every: 0
  threads: 1
checkpoint:
  save_final: false
logging:
  every: 1
""")
    return path


def losses(out_dir):
    return [r["loss"] for r in metrics(out_dir) if "loss" in r and "val_loss" not in r]


def main():
    tok = make_tokenizer(src, os.path.join(work, "tok"), "chatml")
    data = os.path.join(work, "sft.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(e) for e in make_examples()) + "\n")
    prefix = os.path.join(work, "data", "sft")
    out = subprocess.run([sys.executable, os.path.join(src, "scripts", "prepare_instruct.py"), "--tokenizer", tok,
                          "--input", data, "--out", prefix, "--val-fraction", "0", "--quiet"], capture_output=True, text=True, timeout=300)
    print(out.stdout, out.stderr)
    check(out.returncode == 0, "prepare_instruct.py exits 0")
    if out.returncode:
        return
    for packing in (True, False):
        cfg = config(os.path.join(work, f"sft_{packing}.yaml"), prefix, packing)
        two, one = os.path.join(work, f"two_{packing}"), os.path.join(work, f"one_{packing}")
        run([meshrun, "--standalone", "--nproc-per-node", "2", cfg, f"--set=train.out_dir={two}", "--set=train.grad_accum=2",
             "--set=train.micro_batch_size=1"])
        run([meshtrain, "train", cfg, f"--set=train.out_dir={one}", "--set=train.micro_batch_size=4",
             f"--set=train.steps={COMPARED}"])
        a, b = losses(two), losses(one)
        label = "packed" if packing else "unpacked"
        check(len(a) == STEPS and len(b) == COMPARED, f"{label}: {len(a)} and {len(b)} step losses logged")
        for s in range(min(COMPARED, len(a), len(b))):
            check(abs(a[s] - b[s]) <= 2e-5 * abs(b[s]),
                  f"{label} step {s + 1}: 2 ranks × 2 micro-batches {a[s]:.7f} = one batch of 4 {b[s]:.7f}")
        if packing:
            # The same global batch through the other layouts: the vocab-parallel loss with masked targets
            # (tp 2: both ranks read the batch of 4), FSDP with activation checkpointing (2 × 2) and a pipeline
            # (pp 2: both stages read the batch of 4, cut into 4 pipeline micro-batches of one sequence).
            for name, sets in (("tp 2", ["parallel.tp=2", "train.micro_batch_size=4"]),
                               ("fsdp 2 + checkpointing", ["parallel.fsdp=2", "train.micro_batch_size=2",
                                                           "train.activation_checkpointing=true"]),
                               ("pp 2", ["parallel.pp=2", "train.micro_batch_size=4"])):
                d = os.path.join(work, name.split()[0])
                run([meshrun, "--standalone", "--nproc-per-node", "2", cfg, f"--set=train.out_dir={d}", f"--set=train.steps={COMPARED}",
                     *[f"--set={s}" for s in sets]])
                c = losses(d)
                check(len(c) == COMPARED and all(abs(x - y) <= 2e-5 * abs(y) for x, y in zip(c, b)),
                      f"{label} {name}: {c} = one process {b}")
            finite = all(math.isfinite(x) for x in a)
            first, last = sum(a[:4]) / 4, sum(a[-4:]) / 4
            check(finite and last < 0.9 * first,
                  f"{label}: loss on assistant tokens finite and falling ({first:.3f} → {last:.3f})")


run_checked(main, check, work)
