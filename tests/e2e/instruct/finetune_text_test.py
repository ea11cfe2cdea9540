#!/usr/bin/env python3
"""A fine-tune's text end to end (tier 4, CPU): a tiny Llama with its own tokenizer and chat template (made here
with transformers, nothing fetched) → `meshtrain import` → instruction shards (scripts/prepare_instruct.py) →
`meshtrain train` with LoRA → `meshtrain export` / `meshtrain eval`.

  samples     train.sample_prompts every train.sample_every steps and at the end go through the model's
              tokenizer and its chat template (instruction data): the log names the tokenizer, metrics.jsonl holds
              each step's samples, TensorBoard's text tab too, and the last ones are what `meshtrain generate
              --chat` samples from the final checkpoint with the same seed.
  LoRA        `--set model.lora_targets=[q_proj,v_proj]` (a YAML flow list, PEFT's names) is taken, and the run
              prints its trainable-parameter count (the q and v adapters of rank 4: 1792).
  export      the merged export carries the tokenizer: transformers' AutoTokenizer.from_pretrained(export) loads,
              encodes texts as meshtrain's tokenizer does (`meshtrain generate --logits` ids) and as the original,
              has the chat template; generation_config.json is there.
  eval        `meshtrain eval --json`'s tokens are the targets the loss counts (the shards' loss masks, without
              document starts), counted here from the flags sidecar, fewer than the window tokens it also reports.
Exit code 77 (skipped) without transformers, tokenizers or tensorboard.
Usage: finetune_text_test.py BIN_DIR SOURCE_DIR
"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(here))  # e2e_support, tiny_llama
try:
    import tokenizers  # noqa: F401
    import transformers
    from safetensors.torch import load_file
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, run, run_checked  # noqa: E402
from tiny_llama import CHATML, make_tiny_llama  # noqa: E402
from tiny_tokenizer import kjv_lines  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshtrain = os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_finetune_text_")
check = Checks()
PROMPTS = ["Who made the light?", "Continue: In the beginning"]
STEPS, EVERY, TOKENS, SEED, MBS = 4, 2, 12, 1337, 2
TEXTS = ["In the beginning God created the heaven and the earth.", "  And the LORD said unto Moses, 42 times!",
         "<|im_start|>user\nhello<|im_end|>"]


def instruction_shards(hf_dir):
    data = os.path.join(work, "sft.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for line in [line for line in kjv_lines(src, 400) if len(line.split()) >= 6][:80]:
            words = line.split()
            half = len(words) // 2
            f.write(json.dumps({"messages": [{"role": "user", "content": "Continue: " + " ".join(words[:half])},
                                             {"role": "assistant", "content": " ".join(words[half:])}]}) + "\n")
    prefix = os.path.join(work, "data", "sft")
    run([sys.executable, os.path.join(src, "scripts", "prepare_instruct.py"), "--tokenizer", hf_dir, "--input", data,
         "--out", prefix, "--quiet"])
    return prefix


def check_samples(log, run_dir, tb_dir):
    check(re.search(r"samples of 12 tokens every 2 steps and at the end, through \S*tokenizer\.json and its chat "
                    r"template", log) is not None, "samples: the log names the tokenizer and its chat template")
    recs = {r["step"]: r["samples"] for r in metrics(run_dir) if "samples" in r}
    check(sorted(recs) == [2, 4] and all([s["prompt"] for s in recs[k]] == PROMPTS for k in recs),
          f"samples: metrics.jsonl holds both prompts' samples at steps 2 and 4: {recs}")
    check("sample 1/2 at step 2 (temperature 0.8, top-k 40):" in log, "samples: logged during training")
    ea = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.TENSORS: 0})
    ea.Reload()
    for i, prompt in enumerate(PROMPTS, 1):
        events = ea.Tensors(f"samples/{i}") if f"samples/{i}" in ea.Tags().get("tensors", []) else []
        texts = [e.tensor_proto.string_val[0].decode() for e in events]
        check([e.step for e in events] == [2, 4] and texts[-1:] == [f"**{prompt}**{recs[4][i - 1]['text']}"],
              f"samples: TensorBoard text samples/{i} at steps 2 and 4: {texts}")
    check(any(s["text"] for s in recs.get(4, [])), "samples: the last samples are not all empty")
    for i, prompt in enumerate(PROMPTS):
        out = run([meshtrain, "generate", os.path.join(run_dir, "checkpoints"), "--chat", "--prompt", prompt,
                   "--tokens", str(TOKENS), "--seed", str(SEED + i)])
        want = recs.get(4, [{}] * 2)[i].get("text")
        check(want is not None and want.strip() in out,
              f"samples: step 4's sample of '{prompt}' is `generate --chat`'s: {want!r} in {out[-300:]!r}")


def meshtrain_ids(ckpt, text):
    path = os.path.join(work, "ids.safetensors")
    run([meshtrain, "generate", ckpt, "--prompt", text, "--logits", path])
    return load_file(path)["ids"].tolist()


def check_export(run_dir, hf_dir):
    exp = os.path.join(work, "export")
    out = run([meshtrain, "export", os.path.join(run_dir, "checkpoints"), "--format", "hf", exp])
    check("tokenizer files copied: tokenizer.json" in out, "export: says which tokenizer files it copied")
    check(os.path.isfile(os.path.join(exp, "generation_config.json")), "export: generation_config.json is there")
    tok = transformers.AutoTokenizer.from_pretrained(exp)
    orig = transformers.AutoTokenizer.from_pretrained(hf_dir)
    for text in TEXTS:
        ours = meshtrain_ids(os.path.join(run_dir, "checkpoints"), text)
        got = tok(text)["input_ids"]
        check(got == ours == orig(text)["input_ids"], f"export: AutoTokenizer encodes {text!r} as meshtrain does")
    check(tok.chat_template == CHATML, "export: the chat template is the model's")


def counted_targets(prefix, windows, seq):
    """Targets the loss counts in the first `windows` windows (in order, packed) of the one train shard."""
    shards = sorted(p for p in glob.glob(f"{prefix}_train_*.bin"))
    assert len(shards) == 1, shards
    with open(shards[0] + ".flags", "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        flags = f.read(header[2])
    n = 0
    for w in range(windows):
        for t in range(w * seq + 1, w * seq + seq + 1):
            n += bool(flags[t] & 1) and not flags[t] & 2
    return n


def check_eval(run_dir, prefix):
    out = run([meshtrain, "eval", os.path.join(run_dir, "checkpoints"), "--data", f"{prefix}_train_*.bin",
               "--batches", "2", "--json"])
    r = json.loads(out.strip().splitlines()[-1])
    want = counted_targets(prefix, 2 * MBS, r["seq_len"])
    check(r["tokens"] == want and r["window_tokens"] == 2 * MBS * r["seq_len"] and r["tokens"] < r["window_tokens"],
          f"eval: tokens {r.get('tokens')} = the {want} targets the loss counts, "
          f"of {r.get('window_tokens')} in the windows")


def main():
    hf_dir, _, _ = make_tiny_llama(src, work)
    imp = os.path.join(work, "imported")
    run([meshtrain, "import", hf_dir, imp])
    prefix = instruction_shards(hf_dir)
    run_dir, tb_dir = os.path.join(work, "run"), os.path.join(work, "tb")
    sets = [f"data.train={prefix}_train_*.bin", "train.device=cpu", "train.threads=1", f"train.steps={STEPS}",
            f"train.micro_batch_size={MBS}", "train.eval_every=0", "logging.every=1", f"train.out_dir={run_dir}",
            "model.lora_rank=4", "model.lora_targets=[q_proj,v_proj]", f"train.sample_tokens={TOKENS}",
            f"train.sample_every={EVERY}", f"train.sample_prompts=['{PROMPTS[0]}', '{PROMPTS[1]}']",
            f"train.seed={SEED}", f"logging.tensorboard={tb_dir}", "schedule.warmup_steps=1"]
    log = run([meshtrain, "train", os.path.join(imp, "config.yaml"), *[f"--set={s}" for s in sets]])
    check("(1792 trainable, " in log and ": LoRA rank 4)" in log, "LoRA: the trainable-parameter count is printed")
    check_samples(log, run_dir, tb_dir)
    check_export(run_dir, hf_dir)
    check_eval(run_dir, prefix)


run_checked(main, check, work)
