#!/usr/bin/env python3
"""The same training step as meshtrain's, in PyTorch, for side-by-side throughput (tokens/s, MFU, memory).

Both families as in src/model: GPT-2 (pre-norm LayerNorm blocks, GELU-tanh MLP, learned positions, biases,
tied head) and Llama (RMSNorm, RoPE in rotate-half layout, grouped-query attention through SDPA's enable_gqa,
SwiGLU, no biases, tied or untied head). Separate q/k/v projections, F.scaled_dot_product_attention
(is_causal=True), bf16 autocast over fp32 master weights, fused AdamW with decay groups, global-norm clip 1.0
— the choices meshtrain makes, so the ratio compares runtimes, not recipes. `--compile` wraps the model in
torch.compile; `--ac` recomputes each block in the backward (torch.utils.checkpoint, non-reentrant), as meshtrain's
`--activation-checkpointing` does. Data: random tokens generated on the GPU (throughput does not depend on them).

FLOPs per token (docs/metrics.md): 6 × non-embedding params + 6·V·d (output head) + 6·L·T·d (causal attention).

`--profile DIR` profiles three more steps after the timed ones (torch.profiler): DIR/trace.json (Chrome/Perfetto)
and DIR/kernels.txt, the GPU kernels by total time — the same view as `meshtrain bench train --profile`, so the
two runtimes' kernels can be set side by side.

`--memory-snapshot FILE` records the CUDA caching allocator's history over the whole run (every allocation with
its Python stack) and saves it for pytorch.org/memory_viz — the same file `meshtrain bench train
--memory-snapshot` writes, so the two peaks can be taken apart block by block.

Usage: train_torch.py --preset gpt2-124m --seq 1024 --batch 32 [--layers L] [--compile] [--ac] [--json OUT.json]
       [--profile DIR] [--memory-snapshot FILE]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# family, n_layer, n_head, n_kv_head, d_model, d_ff, vocab, tied — as src/core/model_presets.cpp
PRESETS = {
    "tiny": ("gpt2", 2, 4, 4, 64, 256, 256, True),
    "gpt2-124m": ("gpt2", 12, 12, 12, 768, 3072, 50257, True),
    "gpt2-350m": ("gpt2", 24, 16, 16, 1024, 4096, 50257, True),
    "llama3.2-1b": ("llama", 16, 32, 8, 2048, 8192, 128256, True),
    "llama3.2-3b": ("llama", 28, 24, 8, 3072, 8192, 128256, True),
    "llama3.1-8b": ("llama", 32, 32, 8, 4096, 14336, 128256, False),
}


class Block(nn.Module):
    def __init__(s, llama, d, h, hkv, ff):
        super().__init__()
        s.llama, s.h, s.hkv, s.hd = llama, h, hkv, d // h
        norm = (lambda: nn.RMSNorm(d, eps=1e-5)) if llama else (lambda: nn.LayerNorm(d, eps=1e-5))
        s.attn_norm, s.mlp_norm = norm(), norm()
        bias = not llama
        s.wq = nn.Linear(d, h * s.hd, bias=bias)
        s.wk = nn.Linear(d, hkv * s.hd, bias=bias)
        s.wv = nn.Linear(d, hkv * s.hd, bias=bias)
        s.wo = nn.Linear(h * s.hd, d, bias=bias)
        if llama:
            s.w1, s.w3, s.w2 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), nn.Linear(ff, d, bias=False)
        else:
            s.fc, s.proj = nn.Linear(d, ff), nn.Linear(ff, d)

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        rot = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos.to(x.dtype) + rot * sin.to(x.dtype)

    def forward(s, x, cos, sin):
        B, T, D = x.shape
        y = s.attn_norm(x)
        q = s.wq(y).view(B, T, s.h, s.hd).transpose(1, 2)
        k = s.wk(y).view(B, T, s.hkv, s.hd).transpose(1, 2)
        v = s.wv(y).view(B, T, s.hkv, s.hd).transpose(1, 2)
        if s.llama:
            q, k = s.rope(q, cos, sin), s.rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=s.hkv != s.h)
        x = x + s.wo(a.transpose(1, 2).reshape(B, T, s.h * s.hd))
        m = s.mlp_norm(x)
        if s.llama:
            return x + s.w2(F.silu(s.w1(m)) * s.w3(m))
        return x + s.proj(F.gelu(s.fc(m), approximate="tanh"))


class Model(nn.Module):
    def __init__(s, family, L, H, Hkv, D, FF, V, tied, T, ac=False):
        super().__init__()
        s.llama, s.ac = family == "llama", ac
        s.tok = nn.Embedding(V, D)
        if not s.llama:
            s.pos = nn.Embedding(T, D)
        s.blocks = nn.ModuleList(Block(s.llama, D, H, Hkv, FF) for _ in range(L))
        s.norm = nn.RMSNorm(D, eps=1e-5) if s.llama else nn.LayerNorm(D, eps=1e-5)
        s.head = None if tied else nn.Linear(D, V, bias=False)
        hd = D // H
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv.float())
        emb = torch.cat((ang, ang), -1)
        s.register_buffer("cos", emb.cos(), persistent=False)
        s.register_buffer("sin", emb.sin(), persistent=False)

    def forward(s, idx, tgt):
        T = idx.shape[1]
        x = s.tok(idx)
        if not s.llama:
            x = x + s.pos(torch.arange(T, device=idx.device))
        cos, sin = s.cos[:T], s.sin[:T]
        for b in s.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, cos, sin, use_reentrant=False) if s.ac else b(x, cos, sin)
        x = s.norm(x)
        logits = s.head(x) if s.head is not None else F.linear(x, s.tok.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layers", type=int, default=0, help="override the preset's layer count")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--ac", action="store_true", help="activation checkpointing: each block recomputed in backward")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU")
    ap.add_argument("--json")
    ap.add_argument("--profile", metavar="DIR", help="profile 3 steps after the timed ones into DIR")
    ap.add_argument("--memory-snapshot", metavar="FILE", help="save the allocator's history of the run to FILE")
    a = ap.parse_args()
    if a.memory_snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    family, L, H, Hkv, D, FF, V, tied = PRESETS[a.preset]
    if a.layers:
        L = a.layers
    dev = "cuda"
    torch.manual_seed(0)
    model = Model(family, L, H, Hkv, D, FF, V, tied, a.seq, ac=a.ac).to(dev)
    emb = ("tok.", "pos.", "head.")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(emb)]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(emb))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    n_params = sum(p.numel() for p in model.parameters())
    non_embed = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(emb))
    flops_tok = 6 * non_embed + 6 * V * D + 6 * L * a.seq * D
    step_fn = torch.compile(model) if a.compile else model
    def train_step():
        xy = torch.randint(0, V, (a.batch, a.seq + 1), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(xy[:, :-1], xy[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    times = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tok_s = a.batch * a.seq / med
    res = {"impl": "pytorch-compile" if a.compile else "pytorch-eager", "preset": a.preset, "layers": L,
           "params": n_params, "seq": a.seq, "batch": a.batch, "activation_checkpointing": a.ac,
           "step_time_s": med, "tokens_per_s": tok_s,
           "mfu": tok_s * flops_tok / (a.peak_tflops * 1e12), "peak_memory_bytes": torch.cuda.max_memory_allocated()}
    print(json.dumps(res))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    if a.memory_snapshot:
        torch.cuda.memory._dump_snapshot(a.memory_snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    if a.profile:
        profile_steps(train_step, a.profile, steps=3)


def profile_steps(train_step, out_dir, steps):
    """Profiles `steps` steps; writes the trace and the GPU kernels by total time (per step) to out_dir."""
    import os
    from torch.profiler import ProfilerActivity, profile
    os.makedirs(out_dir, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            train_step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(out_dir, "trace.json"))
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            calls, us = kernels.get(e.name, (0, 0.0))
            kernels[e.name] = (calls + 1, us + e.time_range.elapsed_us())
    total = sum(us for _, us in kernels.values())
    lines = [f"GPU time per step: {total / steps / 1e3:.2f} ms over {len(kernels)} kernels",
             f"{'ms/step':>8} {'share':>6} {'calls/step':>10}  kernel"]
    for name, (calls, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]:
        lines.append(f"{us / steps / 1e3:8.2f} {100 * us / total:5.1f}% {calls / steps:10.1f}  {name[:150]}")
    text = "\n".join(lines)
    print(text)
    open(os.path.join(out_dir, "kernels.txt"), "w").write(text + "\n")


if __name__ == "__main__":
    main()
