#!/usr/bin/env python3
"""NF4 with double-quantized scales: meshtrain's codec (model/nf4_tensor.h) against

  a reference written here from the QLoRA paper's definition (Dettmers et al. 2023, section 3): the 16 levels
      the quantiles of N(0, 1) — 8 for the positive half and 7 for the negative, their probabilities evenly
      spaced from 0.5 to 0.9677083 (in fp32), plus an exact 0 — scaled to [-1, 1]; each value coded as the
      nearest level to value / absmax of its block of 64 (the decision at the midpoint between two levels,
      a tie going to the lower); the absmaxes, less their mean, coded blockwise (256) the same way on the signed
      8-bit dynamic map of Dettmers 2015 (bitsandbytes' create_dynamic_map), each block over its own fp32
      absmax; dequantized as level · (map[code] · scale + mean), every product in fp32, then once into bf16.
      Codes, scales and dequantized values must equal meshtrain's bit for bit. Two fp32 quantities are computed
      in an order the definition leaves open — the mean of the absmaxes (a sum), and the dynamic map's grid
      (bitsandbytes' torch.linspace rounds per CPU vector width; meshtrain holds bitsandbytes' values as a
      table) — so those must agree within 2 ulp (the mean) and 1 ulp (each map entry), and the reference then
      takes meshtrain's;
  bitsandbytes (quantize_4bit(..., quant_type="nf4", compress_statistics=True) on the CPU), bit for bit, where
      it imports (it is no dependency of meshtrain: `pip install bitsandbytes` beside torch makes this part run).

On random data of several scales, zeros, constant blocks, values exactly on the midpoints, and sizes that are
not multiples of 64 or 256. Exit 77 (skipped) without numpy.

    nf4_test.py DRIVER
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from statistics import NormalDist

try:
    import numpy as np
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

DRIVER = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="meshtrain_nf4_")
atexit.register(shutil.rmtree, WORK, True)
F32 = np.float32
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def linspace32(start, end, steps):
    """An evenly spaced fp32 grid computed as bitsandbytes' torch.linspace computes it: the step in fp32, the
    first half counted up from start and the second down from end (numpy's float32 linspace rounds otherwise)."""
    start, end = F32(start), F32(end)
    step = F32((end - start) / F32(steps - 1))
    half = steps // 2
    return np.array([start + step * F32(i) if i < half else end - step * F32(steps - i - 1) for i in range(steps)],
                    dtype=F32)


def nf4_levels():
    """The paper's NF4: normal quantiles with an exact zero, normalised to [-1, 1] (bitsandbytes' offset)."""
    ppf = NormalDist().inv_cdf
    offset = 0.9677083
    pos = [ppf(float(p)) for p in linspace32(offset, 0.5, 9)[:-1]]
    neg = [-ppf(float(p)) for p in linspace32(offset, 0.5, 8)[:-1]]
    v = np.array(sorted(pos + [0.0] + neg), dtype=F32)
    return v / v.max()


def dynamic_map():
    """Signed dynamic 8-bit map: for exponent i = 0..6 the 2^i midpoints of the grid 0.1 … 1 in 2^i steps,
    times 10^(i - 6), both signs, then 0 and 1; exact arithmetic, rounded once to fp32."""
    data = []
    for i in range(7):
        b = np.linspace(0.1, 1.0, 2**i + 1)
        means = (b[:-1] + b[1:]) / 2.0
        data += (means * 10.0 ** (i - 6)).tolist() + (-means * 10.0 ** (i - 6)).tolist()
    data += [0.0, 1.0]
    return np.sort(np.array(data, dtype=np.float64)).astype(F32)


def blockwise(x, code, block):
    """Codes (nearest entry of `code`, ties to the lower) and absmaxes of x in blocks of `block`."""
    n = x.size
    bounds = ((code[:-1] + code[1:]) / F32(2)).astype(F32)
    codes, absmax = [], []
    for s in range(0, n, block):
        b = x[s:s + block]
        am = np.abs(b).max()
        if b.size == block:  # a full block: times the reciprocal (a short one: divided), as bitsandbytes rounds
            scaled = b * (F32(1.0) / max(am, F32(1e-38)))
            absmax.append(am)
        else:
            am = max(am, F32(1e-38))
            scaled = b / am
            absmax.append(am)
        scaled = np.clip(scaled.astype(F32), F32(-1), F32(1))
        codes.append(np.searchsorted(bounds, scaled, side="left"))
    return np.concatenate(codes).astype(np.uint8), np.array(absmax, dtype=F32)


def reference(x, offset_from, dmap):
    levels = nf4_levels()
    q, absmax = blockwise(x, levels, 64)
    offset = F32(offset_from)
    aq, scales = blockwise((absmax - offset).astype(F32), dmap, 256)
    # An odd count is padded with a value 0, whose code is level 7 (the exact zero).
    padded = np.concatenate([q, np.full(q.size % 2, np.searchsorted(((levels[:-1] + levels[1:]) / F32(2)), 0))])
    packed = ((padded[0::2] << 4) | padded[1::2]).astype(np.uint8)
    am = (dmap[aq] * np.repeat(scales, 256)[:aq.size]).astype(F32)
    am = (am + offset).astype(F32)
    deq = (levels[q] * np.repeat(am, 64)[:x.size]).astype(F32)
    return {"codes": packed, "absmax_codes": aq, "absmax_scales": scales, "offset": np.mean(absmax, dtype=np.float64),
            "dequant": deq}


def bf16_bits(f):
    """fp32 → bf16 bits, round to nearest even (finite values)."""
    u = f.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def ours(x):
    src, out = os.path.join(WORK, "in.f32"), os.path.join(WORK, "out")
    x.astype("<f4").tofile(src)
    r = subprocess.run([DRIVER, src, out], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL:", DRIVER, r.stderr)
        sys.exit(1)
    read = lambda ext, dt: np.fromfile(out + "." + ext, dtype=dt)
    return {"codes": read("codes", np.uint8), "absmax_codes": read("absmax_codes", np.uint8),
            "absmax_scales": read("absmax_scales", "<f4"), "offset": read("offset", "<f4")[0],
            "dequant": read("dequant", "<f4"), "dequant_bf16": read("dequant_bf16", "<u2"), "map": read("map", "<f4")}


def cases():
    rng = np.random.default_rng(0)
    yield "random 4096x64", (rng.standard_normal(4096 * 64) * 0.02).astype(F32)
    yield "random, 1 value", rng.standard_normal(1).astype(F32)
    yield "random, 63 values", rng.standard_normal(63).astype(F32)
    yield "random, 65 values", rng.standard_normal(65).astype(F32)
    yield "random, 64*256+7 (a short block of both levels)", (rng.standard_normal(64 * 256 + 7) * 3).astype(F32)
    spread = rng.standard_normal(3 * 64 * 256 + 100).astype(F32)
    spread *= np.repeat(np.exp(rng.uniform(-12, 4, spread.size // 64 + 1)), 64)[:spread.size].astype(F32)
    yield "blocks from 1e-5 to 50", spread.astype(F32)
    yield "zeros", np.zeros(300, F32)
    const = rng.standard_normal(64 * 10).astype(F32)
    const[128:256] = F32(0.125)
    const[512:] = F32(-7.0)
    yield "constant blocks among random ones", const
    lv = nf4_levels()
    ties = np.concatenate([[F32(1.0)], ((lv[:-1] + lv[1:]) / F32(2)).astype(F32), lv[:-1]]).astype(F32)
    yield "the levels and the midpoints between them (absmax 1)", np.tile(ties, 4)[: 64 * 2 - 2]


def main():
    lv = nf4_levels()
    base = np.concatenate([lv, np.zeros(48, F32)])  # one block of absmax 1: the levels come back as they are
    first = ours(base)
    check(np.array_equal(first["dequant"][:16], lv), "NF4 levels: the normal quantiles of the paper")
    dmap, ulp = dynamic_map(), np.spacing(np.abs(dynamic_map()))
    check(bool(np.all(np.abs(first["map"].astype(np.float64) - dmap) <= ulp)),
          "dynamic map: each entry within 1 ulp of its definition")
    for name, x in cases():
        got = ours(x)
        off_ref = np.float32(np.mean(np.concatenate([blockwise(x, lv, 64)[1]]), dtype=np.float64))
        ulp = np.spacing(np.abs(off_ref)) if off_ref != 0 else np.float32(0)
        check(abs(np.float64(got["offset"]) - np.float64(off_ref)) <= 2 * ulp + 1e-38,
              f"{name}: offset {got['offset']!r} ≈ {off_ref!r}")
        ref = reference(x, got["offset"], got["map"])
        for key in ("codes", "absmax_codes", "absmax_scales", "dequant"):
            a, b = got[key], ref[key]
            same = a.shape == b.shape and np.array_equal(a.view(np.uint8), np.asarray(b).view(np.uint8))
            check(same, f"{name}: {key} equal ({a.size} values)"
                  + ("" if same else f"; {np.count_nonzero(a != b) if a.shape == b.shape else 'shape'} differ"))
        check(np.array_equal(got["dequant_bf16"], bf16_bits(ref["dequant"])), f"{name}: bf16 dequant equal")
    against_bitsandbytes()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all equal")


def against_bitsandbytes():
    """bitsandbytes' NF4 codes and offset bit for bit; its 8-bit absmax codes where its native CPU library's
    table search (BinSearch, not the nearest entry in every case: its pure-PyTorch kernel, whose rule meshtrain
    follows, is) lands on the nearest entry — elsewhere ours must be the nearer one and theirs a neighbour; the
    dequantized values equal (as numbers: -0 = 0) in every block whose absmax code agrees."""
    try:
        import torch
        import bitsandbytes.functional as bnbf
    except Exception as e:  # noqa: BLE001 — any reason it cannot run here
        print(f"bitsandbytes: not compared ({type(e).__name__}: {e})")
        return
    for name, x in cases():
        got = ours(x)
        packed, st = bnbf.quantize_4bit(torch.from_numpy(x.copy()), blocksize=64, quant_type="nf4",
                                        compress_statistics=True)
        deq = bnbf.dequantize_4bit(packed, st).reshape(-1).numpy()
        check(np.array_equal(packed.reshape(-1).numpy(), got["codes"]), f"bitsandbytes, {name}: NF4 codes equal")
        check(np.float32(st.offset.item()) == got["offset"], f"bitsandbytes, {name}: offset equal")
        theirs_q, ours_q = st.absmax.numpy(), got["absmax_codes"]
        differ = np.nonzero(theirs_q != ours_q)[0]
        dmap = got["map"]
        _, absmax = blockwise(x, nf4_levels(), 64)
        a = (absmax - got["offset"]).astype(F32)
        scale = np.repeat(np.maximum(st.state2.absmax.numpy(), F32(1e-38)), 256)[:a.size]
        target = np.where(scale > 0, a / scale, 0).astype(np.float64)
        nearer = all(abs(target[i] - dmap[ours_q[i]]) <= abs(target[i] - dmap[theirs_q[i]])
                     and abs(int(theirs_q[i]) - int(ours_q[i])) == 1 for i in differ
                     # a block of zeros dequantizes to 0 whatever its absmax; absmax − offset 0 (a lone block)
                     # to the offset whatever the code, which times a zero scale is 0
                     if np.any(x[64 * i:64 * i + 64]) and a[i] != 0)
        check(nearer, f"bitsandbytes, {name}: absmax codes equal but {len(differ)} of {a.size}, ours the nearest")
        same_blocks = np.repeat(theirs_q == ours_q, 64)[:x.size]
        check(np.array_equal(deq[same_blocks], got["dequant"][same_blocks]),
              f"bitsandbytes, {name}: dequantized equal in the {int(same_blocks.sum())} values of agreeing blocks")


if __name__ == "__main__":
    main()
