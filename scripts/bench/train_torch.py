#!/usr/bin/env python3
"""The same training step as meshtrain's, in PyTorch, for side-by-side throughput (tokens/s, MFU).

GPT-2 family as in src/model (pre-norm blocks, LayerNorm, GELU-tanh MLP, learned positions, tied head),
separate q/k/v projections, F.scaled_dot_product_attention(is_causal=True), bf16 autocast over fp32 master
weights, fused AdamW, global-norm clip 1.0 — the choices meshtrain makes, so the ratio compares runtimes,
not recipes. Data: random tokens (throughput does not depend on them).

Usage: train_torch.py --preset gpt2-124m --seq 1024 --batch 16 --steps 30 [--json OUT.json]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # n_layer, n_head, d_model, vocab
    "gpt2-124m": (12, 12, 768, 50257),
    "gpt2-350m": (24, 16, 1024, 50257),
    "tiny": (4, 4, 256, 256),
}


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.h = h
        s.attn_norm, s.mlp_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        s.wq, s.wk, s.wv, s.wo = (nn.Linear(d, d) for _ in range(4))
        s.fc, s.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(s, x):
        B, T, D = x.shape
        y = s.attn_norm(x)
        q, k, v = (p(y).view(B, T, s.h, D // s.h).transpose(1, 2) for p in (s.wq, s.wk, s.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + s.wo(a)
        return x + s.proj(F.gelu(s.fc(s.mlp_norm(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, L, H, D, V, T):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        s.blocks = nn.ModuleList(Block(D, H) for _ in range(L))
        s.norm = nn.LayerNorm(D)

    def forward(s, idx, tgt):
        x = s.tok(idx) + s.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = F.linear(s.norm(x), s.tok.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU")
    ap.add_argument("--json")
    a = ap.parse_args()
    L, H, D, V = PRESETS[a.preset]
    dev = "cuda"
    torch.manual_seed(0)
    model = GPT(L, H, D, V, a.seq).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("tok", "pos"))]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("tok", "pos")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    n_params = sum(p.numel() for p in model.parameters())
    non_embed = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(("tok", "pos")))
    flops_tok = 3 * (2 * (non_embed + D * V) + 4 * L * a.seq * D)
    times = []
    for step in range(a.warmup + a.steps):
        x = torch.randint(0, V, (a.batch, a.seq), device=dev)
        y = torch.randint(0, V, (a.batch, a.seq), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tok_s = a.batch * a.seq / med
    res = {"impl": "pytorch", "preset": a.preset, "params": n_params, "seq": a.seq, "batch": a.batch,
           "step_time_s": med, "tokens_per_s": tok_s, "mfu": tok_s * flops_tok / (a.peak_tflops * 1e12),
           "peak_memory_bytes": torch.cuda.max_memory_allocated()}
    print(json.dumps(res))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
