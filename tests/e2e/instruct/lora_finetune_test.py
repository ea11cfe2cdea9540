#!/usr/bin/env python3
"""A LoRA fine-tune end to end on the CPU (tier 4; docs/lora.md), everything made here, nothing fetched:

  base:     a tiny Llama made with transformers (random init), saved, imported with `meshtrain import`.
  data:     instruction JSONL (chat) → scripts/prepare_instruct.py with a tokenizer trained here on the KJV text.
  train:    LoRA (rank 8, all seven projections) under meshrun with 2 workers, from the imported base.
  resume:   4 steps, then on to 8 from the checkpoint, against 8 straight: the same losses, bit for bit; the
            checkpoint holds only the adapters and names its base (re-read from init_from on resume), and
            resuming it onto another base is one line, exit 2.
  export:   the merged model (an HF directory) loaded by transformers, and the adapters in PEFT's layout
            loaded by peft over the base: both give meshtrain's logits (`meshtrain generate --logits`).
  result:   the held-out loss on assistant tokens, computed by transformers, is lower after fine-tuning than
            before (the base).
Exit code 77 (skipped) without tokenizers, transformers, peft or safetensors.
Usage: lora_finetune_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(here))  # e2e_support
try:
    import peft  # noqa: F401
    import safetensors.torch  # noqa: F401
    import tokenizers  # noqa: F401
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, run, run_checked  # noqa: E402
from tiny_tokenizer import kjv_lines, make_tokenizer  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_lora_")
STEPS, HALF = 40, 4
check = Checks()



def examples(skip, n):
    """Chat examples from verses: the user gives the first half, the assistant answers with the second."""
    out = []
    for line in kjv_lines(src, 4000)[skip:]:
        words = line.split()
        if len(words) < 8:
            continue
        half = len(words) // 2
        out.append({"messages": [{"role": "user", "content": "Continue: " + " ".join(words[:half])},
                                 {"role": "assistant", "content": " ".join(words[half:])}]})
        if len(out) == n:
            break
    return out


def make_base(tok_dir, out_dir, seed):
    """A random tiny Llama as transformers saves it, with the tokenizer beside it."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=None,
                                   eos_token_id=2, pad_token_id=0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out_dir, safe_serialization=True)
    for f in os.listdir(tok_dir):
        shutil.copy(os.path.join(tok_dir, f), out_dir)
    return out_dir


def heldout_loss(model, tok, held):
    """Mean cross-entropy over the assistant's tokens of the held-out chats (the prompt is context only)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in held:
            prompt = tok.apply_chat_template(ex["messages"][:1], tokenize=True, add_generation_prompt=True)
            full = tok.apply_chat_template(ex["messages"], tokenize=True)
            if hasattr(prompt, "input_ids"):
                prompt, full = prompt["input_ids"], full["input_ids"]
            ids = torch.tensor([full[:64]])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            for t in range(len(prompt) - 1, ids.size(1) - 1):
                total -= logp[t, targets[t]].item()
                count += 1
    return total / count


def config(path, imported, prefix, out_dir, steps):
    """The imported model's section (what `meshtrain import` wrote) with LoRA on, and the run's settings."""
    import yaml
    with open(os.path.join(imported, "config.yaml")) as f:
        model = yaml.safe_load(f)["model"]
    model.update(lora_rank=8, lora_alpha=16.0)  # lora_targets' default: all seven projections
    cfg = {"model": model,
           "data": {"train": f"{prefix}_train_*.bin"},
           "optimizer": {"lr": 1e-2, "weight_decay": 0.0},
           "schedule": {"kind": "constant", "warmup_steps": 0},
           "train": {"steps": steps, "micro_batch_size": 2, "device": "cpu", "eval_every": 0, "threads": 1,
                     "out_dir": out_dir},
           "checkpoint": {"every": HALF, "init_from": imported},
           "logging": {"every": 1}}
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def losses(out_dir):
    return [r["loss"] for r in metrics(out_dir) if "loss" in r and "val_loss" not in r]


def main():
    tok_dir = make_tokenizer(src, os.path.join(work, "tok"), "chatml")
    hf_base = make_base(tok_dir, os.path.join(work, "hf_base"), seed=0)
    other = make_base(tok_dir, os.path.join(work, "hf_other"), seed=1)
    base_ck, other_ck = os.path.join(work, "base"), os.path.join(work, "other")
    run([meshtrain, "import", hf_base, base_ck])
    run([meshtrain, "import", other, other_ck])

    data = os.path.join(work, "sft.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(e) for e in examples(0, 160)) + "\n")
    prefix = os.path.join(work, "data", "sft")
    run([sys.executable, os.path.join(src, "scripts", "prepare_instruct.py"), "--tokenizer", tok_dir,
         "--input", data, "--out", prefix, "--val-fraction", "0", "--quiet"])
    held = examples(3000, 24)

    full_dir, half_dir = os.path.join(work, "full"), os.path.join(work, "half")
    cfg = config(os.path.join(work, "lora.yaml"), base_ck, prefix, full_dir, STEPS)
    run([meshrun, "--standalone", "--nproc-per-node", "2", cfg])
    full = losses(full_dir)
    check(len(full) == STEPS, f"{len(full)} step losses logged")

    # Exact resume: 2 × HALF steps through a checkpoint equal the first 2 × HALF of the straight run.
    run([meshrun, "--standalone", "--nproc-per-node", "2", cfg, f"--set=train.out_dir={half_dir}", f"--set=train.steps={HALF}"])
    run([meshrun, "--standalone", "--nproc-per-node", "2", cfg, f"--set=train.out_dir={half_dir}", f"--set=train.steps={2 * HALF}",
         "--set=checkpoint.resume=auto"])
    resumed = losses(half_dir)
    check(resumed == full[:2 * HALF], f"resumed at step {HALF}: {resumed[HALF:]} = straight {full[HALF:2 * HALF]}")
    ckpt = os.path.join(full_dir, "checkpoints")  # its newest step (`latest` names it)
    with open(os.path.join(ckpt, "latest")) as f:
        newest = os.path.join(ckpt, f.read().strip())
    with open(os.path.join(newest, "meta.json")) as f:
        meta = json.load(f)
    lora = meta["state"].get("lora", {})
    check(lora.get("base") == base_ck and lora.get("id", "").startswith("crc32c:") and lora.get("rank") == 8
          and lora.get("adapters_only"), f"the checkpoint names its base: {lora}")
    # Only the adapters (and their optimizer state): the frozen base is re-read from init_from.
    saved = [n for n in meta["tensors"] if n.startswith("model.")]
    check(saved and all(n.endswith((".lora_A", ".lora_B")) for n in saved), f"{len(saved)} model tensors saved, all adapters")
    size = sum(os.path.getsize(os.path.join(newest, f)) for f in os.listdir(newest))
    base_dir = os.path.join(base_ck, "step_00000000")
    base_size = sum(os.path.getsize(os.path.join(base_dir, f)) for f in os.listdir(base_dir))
    check(size * 2 < base_size, f"checkpoint {size} bytes against the base's {base_size}")
    # Resuming those adapters onto another base is refused, in one line.
    p = subprocess.run([meshtrain, "train", cfg, f"--set=train.out_dir={half_dir}",
                        f"--set=train.steps={3 * HALF}", "--set=checkpoint.resume=auto",
                        f"--set=checkpoint.init_from={other_ck}"], capture_output=True, text=True, timeout=300)
    err = [line for line in p.stderr.splitlines() if "belong to the base" in line]
    check(p.returncode == 2 and len(err) == 1, f"another base: exit {p.returncode}, {err}")

    merged, adapters = os.path.join(work, "merged"), os.path.join(work, "adapters")
    run([meshtrain, "export", ckpt, "--format", "hf", merged])
    run([meshtrain, "export", ckpt, "--format", "hf", "--adapters", adapters])
    dump = os.path.join(work, "logits.safetensors")
    run([meshtrain, "generate", ckpt, "--tokenizer", tok_dir, "--prompt", "And God said, Let there be light",
         "--logits", dump])
    ours = safetensors.torch.load_file(dump)
    ids = ours["ids"].unsqueeze(0)
    tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
    with torch.no_grad():
        m = transformers.AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32).eval()
        diff = (m(ids).logits[0] - ours["logits"]).abs().max().item()
        check(diff < 1e-4, f"merged export in transformers: logits within {diff:.2e} of meshtrain's")
        after = heldout_loss(m, tok, held)
        base = transformers.AutoModelForCausalLM.from_pretrained(hf_base, torch_dtype=torch.float32).eval()
        before = heldout_loss(base, tok, held)
        with open(os.path.join(adapters, "adapter_config.json")) as f:
            check(sorted(json.load(f)["target_modules"]) ==
                  sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                  "adapter_config.json names the seven projections")
        keys = safetensors.torch.load_file(os.path.join(adapters, "adapter_model.safetensors")).keys()
        check("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys, "PEFT's key names")
        adapted = peft.PeftModel.from_pretrained(base, adapters).eval()
        diff = (adapted(ids).logits[0] - ours["logits"]).abs().max().item()
        check(diff < 1e-4, f"PEFT adapters over the base in peft: logits within {diff:.2e} of meshtrain's")
    check(after < before, f"held-out loss on assistant tokens (transformers): {before:.4f} before → {after:.4f} after")


run_checked(main, check, work)
