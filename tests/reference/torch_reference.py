"""The meshtrain transformer written again in plain PyTorch: the tier-3 reference (docs/architecture.md "Test
tiers"). No meshtrain code is used; it is written from the published architectures, with meshtrain's
parameter names so that one safetensors file of weights loads into both sides unchanged:

  tok_embed.weight, pos_embed.weight (gpt2), blocks.{i}.attn_norm.{weight,bias}, blocks.{i}.attn.{wq,wk,wv,wo}.
  {weight,bias}, blocks.{i}.mlp_norm.*, blocks.{i}.mlp.{fc,proj | w1,w2,w3}.*, final_norm.*, lm_head.weight
  (untied only). Buffer: inv_freq (llama).

  gpt2:  LayerNorm with bias, learned positions, GELU (tanh approximation), biases everywhere, tied head optional.
  llama: RMSNorm (weight only), RoPE in Hugging Face's "rotate half" layout with Llama 3's frequency scaling
         (factor 8 over 8192 original positions, low/high frequency factors 1 and 4) when max_seq_len > 8192,
         grouped-query attention (each kv head serves n_head / n_kv_head consecutive query heads, as HF's
         repeat_kv and SDPA's enable_gqa), SwiGLU w2(silu(w1 x) * w3 x), no biases, tied head optional.

Attention is written out (scores, causal mask, softmax, values) rather than calling SDPA, and RMSNorm by hand,
so the reference does not share kernels with the code under test. The loss is the mean next-token
cross-entropy of the fp32 logits. The model runs in whatever dtype it is cast to (fp32 for the comparison,
fp64 to measure fp32's own rounding).

inv_freq is computed in float64 and rounded once to float32 (Hugging Face computes it in float32; the two
differ in the last bits). The RoPE angle table is pos (float32) × inv_freq (float32), as HF and meshtrain do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    family: str = "gpt2"  # gpt2 | llama
    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 0  # 0 = n_head
    d_model: int = 256
    d_ff: int = 0  # 0 = family default
    max_seq_len: int = 256
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    def resolved(self) -> "ModelConfig":
        c = ModelConfig(**{f.name: getattr(self, f.name) for f in fields(self)})
        if c.n_kv_head == 0:
            c.n_kv_head = c.n_head
        if c.d_ff == 0:
            c.d_ff = 4 * c.d_model if c.family == "gpt2" else (int(8 * c.d_model / 3) + 255) // 256 * 256
        assert c.family in ("gpt2", "llama"), c.family
        assert c.d_model % c.n_head == 0 and c.n_head % c.n_kv_head == 0
        return c

    def as_overrides(self) -> dict[str, str]:
        """The config as meshtrain `model.key=value` overrides (what reference_driver reads)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f"model.{f.name}"] = ("true" if v else "false") if isinstance(v, bool) else repr(v) if isinstance(
                v, float) else str(v)
        return out


# --- RoPE -------------------------------------------------------------------------------------------------

def rope_inv_freq(head_dim: int, theta: float, max_seq_len: int) -> torch.Tensor:
    """[head_dim / 2] inverse frequencies; Llama 3.1 scaling when max_seq_len > 8192 (HF's rope_type llama3)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    original, factor, low_ff, high_ff = 8192, 8.0, 1.0, 4.0
    if max_seq_len > original:
        low_wavelen, high_wavelen = original / low_ff, original / high_ff
        wavelen = 2 * math.pi / inv
        # Long wavelengths (low frequencies) are slowed down by `factor`; short ones are kept.
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        # In between, interpolate between the two.
        smooth = (original / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv.float()


def rope_cos_sin(inv_freq: torch.Tensor, offset: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.arange(offset, offset + T, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq.float())  # [T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


# --- layers -----------------------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.hd = c.n_head, c.n_kv_head, c.d_model // c.n_head
        bias = c.family == "gpt2"
        self.wq = nn.Linear(c.d_model, self.n_head * self.hd, bias=bias)
        self.wk = nn.Linear(c.d_model, self.n_kv_head * self.hd, bias=bias)
        self.wv = nn.Linear(c.d_model, self.n_kv_head * self.hd, bias=bias)
        self.wo = nn.Linear(self.n_head * self.hd, c.d_model, bias=bias)

    def forward(self, x, cos, sin):  # x: [B, T, D]
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_head, self.hd).transpose(1, 2)  # [B, H, T, hd]
        k = self.wk(x).view(B, T, self.n_kv_head, self.hd).transpose(1, 2)  # [B, Hkv, T, hd]
        v = self.wv(x).view(B, T, self.n_kv_head, self.hd).transpose(1, 2)
        if cos is not None:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        k = k.repeat_interleave(rep, dim=1)  # [B, H, T, hd]: query head h reads kv head h // rep
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)  # [B, H, T, T]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.n_head * self.hd)
        return self.wo(y)


class Mlp(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.swiglu = c.family == "llama"
        if self.swiglu:
            self.w1 = nn.Linear(c.d_model, c.d_ff, bias=False)
            self.w2 = nn.Linear(c.d_ff, c.d_model, bias=False)
            self.w3 = nn.Linear(c.d_model, c.d_ff, bias=False)
        else:
            self.fc = nn.Linear(c.d_model, c.d_ff)
            self.proj = nn.Linear(c.d_ff, c.d_model)

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        h = self.fc(x)
        # GELU, tanh approximation, written out.
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))
        return self.proj(h)


class Block(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        Norm = RMSNorm if c.family == "llama" else LayerNorm
        self.attn_norm = Norm(c.d_model, c.norm_eps)
        self.attn = Attention(c)
        self.mlp_norm = Norm(c.d_model, c.norm_eps)
        self.mlp = Mlp(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c = self.cfg = cfg.resolved()
        llama = c.family == "llama"
        self.tok_embed = nn.Embedding(c.vocab_size, c.d_model)
        if not llama:
            self.pos_embed = nn.Embedding(c.max_seq_len, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.final_norm = (RMSNorm if llama else LayerNorm)(c.d_model, c.norm_eps)
        if not c.tie_embeddings:
            self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if llama:
            self.register_buffer("inv_freq", rope_inv_freq(c.d_model // c.n_head, c.rope_theta, c.max_seq_len))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens: [B, T] → logits [B, T, V]
        T = tokens.shape[1]
        assert T <= self.cfg.max_seq_len
        x = self.tok_embed(tokens)
        cos = sin = None
        if self.cfg.family == "gpt2":
            x = x + self.pos_embed(torch.arange(T))
        else:
            cos, sin = rope_cos_sin(self.inv_freq, 0, T)
        for b in self.blocks:
            x = b(x, cos, sin)
        x = self.final_norm(x)
        w = self.tok_embed.weight if self.cfg.tie_embeddings else self.lm_head.weight
        return x @ w.t()

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    @torch.no_grad()
    def greedy(self, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
        """Greedy decoding without a cache (full recompute each step). Returns the tokens (prompt + new) and
        the last-position logits of each step [n, V]."""
        seq, steps = list(prompt), []
        for _ in range(n):
            if len(seq) >= self.cfg.max_seq_len:
                break
            logits = self(torch.tensor([seq]))[0, -1]
            steps.append(logits)
            seq.append(int(logits.argmax()))
        return seq, torch.stack(steps)
