#!/usr/bin/env python3
"""LoRA fine-tuning throughput on one GPU, side by side in one run: meshtrain (`meshtrain bench train --lora R`)
vs Hugging Face transformers + PEFT with the same shapes and settings (docs/lora.md, the fine-tuning issue's
target: ≥ 1.3× its tokens/s at no more peak memory).

Both: Llama 3.1 8B's shape (full depth, random init), the base frozen in bf16, LoRA rank 16 (alpha 32, no
dropout) on all seven projections (q, k, v, o, gate, up, down) with fp32 adapters and fused AdamW, bf16
autocast, micro-batch 2 × sequence 2048 of random tokens, SDPA attention, global-norm clip 1.0, no activation
(gradient) checkpointing unless --ac, which turns it on for every row (meshtrain: train.activation_checkpointing,
a block's input kept; transformers: gradient_checkpointing_enable, non-reentrant). The median step after warm-up
gives tokens/s; peak memory is the allocator's peak.
A third row, meshtrain-qlora, is the same meshtrain run with the base's block linears in NF4
(`--set model.base_quant=nf4`, docs/lora.md "QLoRA"; the QLoRA issue's target: ≥ 0.8× meshtrain LoRA's tokens/s
at ≤ 0.5× its peak memory). --impls picks the rows (default all three). Prints one table and writes every row to
OUT/lora_compare.json.

Usage: lora_compare.py MESHTRAIN_BIN OUT_DIR [--rank 16] [--batch 2] [--seq 2048] [--layers 0] [--steps 10] [--ac]
                       [--impls meshtrain,meshtrain-qlora,hf-peft]
       lora_compare.py --hf-peft-run [same shape flags] --json FILE     (one HF + PEFT run; what the above calls)
"""
import argparse
import json
import os
import subprocess
import sys
import time

TARGETS_HF = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Llama 3.1 8B (src/core/model_presets.cpp: preset llama3.1-8b).
LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False)


def hf_peft_run(a):
    """One HF transformers + PEFT training run; prints and writes its row."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    dev = "cuda"
    shape = dict(LLAMA_8B)
    if a.layers:
        shape["num_hidden_layers"] = a.layers
    cfg = transformers.LlamaConfig(**shape, max_position_embeddings=max(a.seq, 8192))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    # Built in bf16 straight on the GPU: the base as a bf16 model is loaded for LoRA (no fp32 copy).
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = transformers.LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.config.use_cache = False
    if a.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lcfg = LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, target_modules=TARGETS_HF, bias="none",
                      task_type="CAUSAL_LM")
    model = get_peft_model(model, lcfg)  # adapters in fp32 (PEFT's autocast_adapter_dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.data = p.data.float()
    opt = torch.optim.AdamW(trainable, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    n_params = sum(p.numel() for p in model.parameters())
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(a.warmup + a.steps):
        xy = torch.randint(0, cfg.vocab_size, (a.batch, a.seq + 1), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=xy[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), xy[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    res = {"impl": "hf-peft", "ac": a.ac, "params": n_params, "trainable": sum(p.numel() for p in trainable),
           "seq": a.seq, "batch": a.batch, "step_time_s": med, "tokens_per_s": a.batch * a.seq / med,
           "peak_memory_bytes": torch.cuda.max_memory_allocated(), "last_loss": loss.item(),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "peft": __import__("peft").__version__}}
    print(json.dumps(res))
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)} — see {log}", file=sys.stderr)
        return False
    return True


def compare(a):
    os.makedirs(a.out, exist_ok=True)
    shape = ["--batch", str(a.batch), "--seq", str(a.seq), "--layers", str(a.layers), "--steps", str(a.steps),
             "--warmup", str(a.warmup)]
    ours_ac = ["--set", "train.activation_checkpointing=true"] if a.ac else []
    ours = [a.meshtrain, "bench", "train", "--preset", "llama3.1-8b", "--lora", str(a.rank),
            "--set", "optimizer.weight_decay=0"] + ours_ac + shape  # model.lora_targets' default: all seven
    runs = [("meshtrain", ours),
            ("meshtrain-qlora", ours + ["--set", "model.base_quant=nf4"]),
            ("hf-peft", [sys.executable, os.path.abspath(__file__), "--hf-peft-run", "--rank", str(a.rank)] + shape +
             (["--ac"] if a.ac else []))]
    runs = [r for r in runs if r[0] in a.impls]
    rows = []
    for impl, cmd in runs:
        js = os.path.join(a.out, f"lora.{impl}.json")
        if run(cmd + ["--json", js], os.path.join(a.out, f"lora.{impl}.log")):
            with open(js) as f:
                r = json.load(f)
            r.update(impl=impl, rank=a.rank, layers=a.layers or 32, ac=a.ac)
            rows.append(r)
    with open(os.path.join(a.out, "lora_compare.json"), "w") as f:
        json.dump(rows, f, indent=1)
    hf = next((r for r in rows if r["impl"] == "hf-peft"), None)
    lora = next((r for r in rows if r["impl"] == "meshtrain"), None)
    print(f"LoRA r{a.rank}, Llama 3.1 8B shape ({a.layers or 32} layers), micro-batch {a.batch} × T {a.seq}, bf16, "
          f"activation checkpointing {'on' if a.ac else 'off'}")
    print(f"{'impl':16s} {'tokens/s':>10s} {'peak GiB':>9s} {'× HF tokens/s':>14s} {'× HF memory':>12s} "
          f"{'× LoRA tokens/s':>16s} {'× LoRA memory':>14s}")

    def ratio(r, ref, key):
        return r[key] / ref[key] if ref else float("nan")

    for r in rows:
        print(f"{r['impl']:16s} {r['tokens_per_s']:10.0f} {r['peak_memory_bytes'] / 2**30:9.1f} "
              f"{ratio(r, hf, 'tokens_per_s'):14.2f} {ratio(r, hf, 'peak_memory_bytes'):12.2f} "
              f"{ratio(r, lora, 'tokens_per_s'):16.2f} {ratio(r, lora, 'peak_memory_bytes'):14.2f}")
    return 0 if len(rows) == len(runs) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meshtrain", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--hf-peft-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=0, help="override the 32 layers (0 keeps them)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ac", action="store_true", help="activation (gradient) checkpointing on every row")
    ap.add_argument("--impls", default="meshtrain,meshtrain-qlora,hf-peft",
                    help="comma-separated rows to run: meshtrain, meshtrain-qlora, hf-peft")
    a = ap.parse_args()
    known = {"meshtrain", "meshtrain-qlora", "hf-peft"}
    a.impls = a.impls.split(",")
    if not a.impls or any(i not in known for i in a.impls):
        ap.error(f"--impls {','.join(a.impls)}: valid rows are {', '.join(sorted(known))}, comma-separated")
    if a.hf_peft_run:
        if not a.json:
            ap.error("--hf-peft-run needs --json FILE")
        return hf_peft_run(a)
    if not a.meshtrain or not a.out:
        ap.error("expected MESHTRAIN_BIN and OUT_DIR")
    return compare(a)


if __name__ == "__main__":
    sys.exit(main())
