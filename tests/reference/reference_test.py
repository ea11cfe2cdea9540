#!/usr/bin/env python3
"""Tier-3 reference test: meshtrain's model (C++, reference_driver) against torch_reference.py (plain PyTorch).

For one model variant: Python draws random weights (non-trivial norms and biases too, so that every parameter
matters), writes them with the config and a batch to safetensors, runs `reference_driver IN OUT`, reads back
meshtrain's logits, loss, every parameter's gradient, RoPE's inv_freq, and its greedy generation, and
compares them with the Python model's, all in fp32 on CPU.

Tolerance (fp32, elementwise, as torch.testing): |meshtrain - python| <= ATOL + RTOL * |python| with
ATOL = 1e-5, RTOL = 1e-4, for logits, loss, every gradient and the KV-cache step logits; inv_freq must agree to
1 float32 ulp (rtol 2e-7); greedy tokens must be identical. For scale, the script also runs the Python model
in fp64 and prints how far each fp32 side is from it: meshtrain's error should be of the same order as
Python-fp32's own.

Usage: reference_test.py --driver PATH/reference_driver [--variant NAME|all] [--keep DIR] [--perturb PARAM]
Exit 0 pass, 1 mismatch, 77 skipped (this Python lacks torch / numpy / safetensors).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy  # noqa: F401  (safetensors.torch needs it)
    import torch
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover
    print(f"SKIP: reference test needs torch, numpy and safetensors in {sys.executable}: {e}")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import ModelConfig, Transformer  # noqa: E402

ATOL, RTOL = 1e-5, 1e-4
GEN_TOKENS = 8

# name → (config, batch B, sequence T, prompt length). Tiny, but every code path: tied/untied, MHA/GQA, d_ff
# not a multiple of anything, T = max_seq_len for gpt2 (every position row gets a gradient), RoPE scaling.
VARIANTS = {
    "gpt2_tied": (ModelConfig(family="gpt2", vocab_size=96, n_layer=2, n_head=4, d_model=64, d_ff=200,
                              max_seq_len=32, tie_embeddings=True), 2, 32, 5),
    "gpt2_untied": (ModelConfig(family="gpt2", vocab_size=80, n_layer=3, n_head=2, d_model=48, max_seq_len=24,
                                tie_embeddings=False), 3, 24, 4),
    "llama_mha_tied": (ModelConfig(family="llama", vocab_size=96, n_layer=2, n_head=4, n_kv_head=4, d_model=64,
                                   d_ff=176, max_seq_len=64, rope_theta=10000.0, tie_embeddings=True), 2, 48, 5),
    "llama_gqa_untied": (ModelConfig(family="llama", vocab_size=100, n_layer=2, n_head=8, n_kv_head=2,
                                     d_model=64, d_ff=160, max_seq_len=64, rope_theta=500000.0,
                                     tie_embeddings=False, norm_eps=1e-6), 2, 40, 6),
    # max_seq_len > 8192 turns on Llama 3 frequency scaling; head_dim 16 with theta 5e5 puts frequencies in
    # all three bands (kept / interpolated / divided by 8). T = 96 so the interpolated band's angles move.
    "llama_rope_scaled": (ModelConfig(family="llama", vocab_size=64, n_layer=2, n_head=4, n_kv_head=2,
                                      d_model=64, d_ff=128, max_seq_len=16384, rope_theta=500000.0,
                                      tie_embeddings=False), 1, 96, 5),
}


def random_weights(model: Transformer, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        if "norm" in name:  # weights near 1, biases near 0, neither exactly
            base = 1.0 if name.endswith(".weight") else 0.0
            t = base + 0.1 * torch.randn(p.shape, generator=g)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(p.shape, generator=g)
        elif "embed" in name:
            t = 0.3 * torch.randn(p.shape, generator=g)
        else:  # Linear [out, in]: unit-variance outputs
            t = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
        out[name] = t.float().contiguous()
    return out


def close(name, mine, ref, atol=ATOL, rtol=RTOL):
    """(ok, max abs diff, max |ref|, worst excess over the tolerance)."""
    mine, ref = mine.double(), ref.double()
    if mine.shape != ref.shape:
        return False, float("inf"), 0.0, f"{name}: shape {tuple(mine.shape)} != {tuple(ref.shape)}"
    diff = (mine - ref).abs()
    bound = atol + rtol * ref.abs()
    ok = bool((diff <= bound).all())
    msg = ""
    if not ok:
        i = int((diff - bound).flatten().argmax())
        msg = (f"{name}: max |diff| {diff.max():.3e} exceeds atol {atol:g} + rtol {rtol:g}·|ref| at flat index {i} "
               f"(meshtrain {mine.flatten()[i]:.8g}, python {ref.flatten()[i]:.8g})")
    return ok, float(diff.max()) if diff.numel() else 0.0, float(ref.abs().max()) if ref.numel() else 0.0, msg


def run_variant(name: str, driver: str, workdir: str, perturb: str | None = None) -> tuple[bool, dict]:
    cfg, B, T, P = VARIANTS[name]
    seed = sum(map(ord, name))
    torch.manual_seed(seed)
    model = Transformer(cfg)
    weights = random_weights(model, seed)
    model.load_state_dict(weights, strict=False)  # buffers (inv_freq) are computed, not loaded
    assert set(weights) == {n for n, _ in model.named_parameters()}
    g = torch.Generator().manual_seed(seed + 1)
    c = model.cfg
    tokens = torch.randint(0, c.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, c.vocab_size, (B, T), generator=g)
    prompt = torch.randint(0, c.vocab_size, (P,), generator=g)

    # What meshtrain receives; `perturb` (a parameter name) changes it slightly to prove the test can fail.
    sent = dict(weights)
    if perturb:
        sent[perturb] = sent[perturb].clone()
        sent[perturb].view(-1)[0] += 1e-3
    inp, out = os.path.join(workdir, f"{name}.in.safetensors"), os.path.join(workdir, f"{name}.out.safetensors")
    meta = c.as_overrides()
    meta["generate.tokens"] = str(GEN_TOKENS)
    save_file({**sent, "input.tokens": tokens, "input.targets": targets, "input.prompt": prompt}, inp, metadata=meta)

    t0 = time.perf_counter()
    r = subprocess.run([driver, inp, out], capture_output=True, text=True)
    t_driver = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"[{name}] reference_driver failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        return False, {}
    got = load_file(out)

    # Python side, fp32.
    model.zero_grad()
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    loss.backward()
    assert torch.allclose(loss, model.loss(tokens, targets), rtol=0, atol=0)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    gen, step_logits = model.greedy(prompt.tolist(), GEN_TOKENS)

    # Python side, fp64 (scale of fp32 rounding only).
    m64 = Transformer(cfg).double()
    m64.load_state_dict({k: v.double() for k, v in weights.items()}, strict=False)
    logits64 = m64(tokens)
    torch.nn.functional.cross_entropy(logits64.reshape(-1, logits64.shape[-1]), targets.reshape(-1)).backward()
    grads64 = {n: p.grad for n, p in m64.named_parameters()}

    failures, worst = [], {"logits": 0.0, "loss": 0.0, "grad": 0.0, "step_logits": 0.0}
    extra = set(got) - {"logits", "loss", "generated", "step_logits"} - {f"grad.{n}" for n in grads} - {
        f"buffer.{n}" for n, _ in model.named_buffers()}
    if extra:
        failures.append(f"unexpected outputs {sorted(extra)}")

    def check(kind, key, mine, ref, **tol):
        if mine is None:
            failures.append(f"{key}: missing from the driver's output")
            return
        ok, d, _, msg = close(key, mine, ref, **tol)
        worst[kind] = max(worst.get(kind, 0.0), d)
        if not ok:
            failures.append(msg)

    check("logits", "logits", got.get("logits"), logits.detach())
    check("loss", "loss", got.get("loss"), loss.detach())
    for n, gr in grads.items():
        check("grad", f"grad.{n}", got.get(f"grad.{n}"), gr)
    for n, b in model.named_buffers():
        check("inv_freq", f"buffer.{n}", got.get(f"buffer.{n}"), b, atol=0, rtol=2.4e-7)
    check("step_logits", "step_logits", got.get("step_logits"), step_logits)
    gen_cpp = got["generated"].tolist() if "generated" in got else None
    if gen_cpp != gen:
        failures.append(f"greedy tokens differ: meshtrain {gen_cpp} python {gen}")
    # Smallest top-1/top-2 gap of the Python steps: how safe the token comparison is from rounding ties.
    top2 = step_logits.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())

    # fp32 vs fp64 for scale.
    err_cpp64 = max([float((got["logits"].double() - logits64.detach()).abs().max())] + [
        float((got[f"grad.{n}"].double() - g64).abs().max()) for n, g64 in grads64.items() if f"grad.{n}" in got])
    err_py64 = max([float((logits.detach().double() - logits64.detach()).abs().max())] + [
        float((grads[n].double() - g64).abs().max()) for n, g64 in grads64.items()])

    ok = not failures
    print(f"[{name}] {'PASS' if ok else 'FAIL'}  params {sum(p.numel() for p in model.parameters())}  "
          f"B={B} T={T}  loss {loss.item():.6f}  driver {t_driver:.2f}s")
    print(f"[{name}]   max |meshtrain - python| (fp32): logits {worst['logits']:.2e}  loss {worst['loss']:.2e}  "
          f"grads {worst['grad']:.2e}  kv-cache step logits {worst['step_logits']:.2e}"
          + (f"  inv_freq {worst['inv_freq']:.2e}" if "inv_freq" in worst else ""))
    print(f"[{name}]   vs fp64 python (logits+grads): meshtrain {err_cpp64:.2e}, python fp32 {err_py64:.2e}")
    print(f"[{name}]   greedy {GEN_TOKENS} tokens: {'equal' if gen_cpp == gen else 'DIFFERENT'} "
          f"(min top-2 logit gap {margin:.3f})  {gen[P:]}")
    for f in failures[:20]:
        print(f"[{name}]   MISMATCH {f}")
    if len(failures) > 20:
        print(f"[{name}]   ... and {len(failures) - 20} more")
    return ok, worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", required=True, help="path to the reference_driver executable")
    ap.add_argument("--variant", default="all", choices=["all", *VARIANTS])
    ap.add_argument("--keep", help="write the safetensors files here and keep them")
    ap.add_argument("--perturb", metavar="PARAM", help="self-check: add 1e-3 to one element of PARAM in the weights "
                    "sent to meshtrain only; the test must then FAIL")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"tolerance: |meshtrain - python| <= {ATOL:g} + {RTOL:g}·|python| (fp32, CPU)")
    names = list(VARIANTS) if args.variant == "all" else [args.variant]
    ok = True
    with tempfile.TemporaryDirectory(prefix="mt_reference_") as tmp:
        workdir = args.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        for n in names:
            ok &= run_variant(n, args.driver, workdir, args.perturb)[0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
