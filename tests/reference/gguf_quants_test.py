#!/usr/bin/env python3
"""GGUF block formats: meshtrain's (ckpt/gguf/ggml_types.h) against llama.cpp's `gguf` Python package.

  dequantize  every type meshtrain reads, bit for bit against gguf.quants.dequantize: on blocks the package
              quantized where it quantizes the type, and on random blocks (random bytes, finite fp16 scales)
              for every type;
  quantize    bit for bit against gguf.quants.quantize where the package quantizes (F16, BF16, Q4_0, Q4_1,
              Q5_0, Q5_1, Q8_0: ggml's reference code); Q4_K and Q6_K (which it only reads) dequantized by the
              package within each value's bound: half a step of its sub-block's scale after rounding to 6
              (Q4_K) or 8 (Q6_K) bits, the minimum's rounding, and fp16's resolution of the super-block scales;
  fp16        the conversion alone on the edge cases (subnormals, the overflow threshold, infinities, -0).
Exit 77 (skipped) without numpy or gguf (scripts/setup.sh installs them into the venv).

    gguf_quants_test.py DRIVER
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs gguf into the venv)")
    sys.exit(77)

DRIVER = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="meshtrain_gguf_quants_")
rng = np.random.default_rng(0)
READ = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
EXACT_QUANTIZE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
# Byte ranges of each block's fp16 scales (d, dmin): random bytes there could be NaN or infinity.
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
               "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
failures = []


def driver(*args):
    r = subprocess.run([DRIVER, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL:", DRIVER, *args, r.stderr)
        sys.exit(1)


def ours_quantize(name, x):
    src, dst = os.path.join(WORK, "in.f32"), os.path.join(WORK, "out.bin")
    x.astype("<f4").tofile(src)
    driver("quantize", name, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


def ours_dequantize(name, blocks):
    src, dst = os.path.join(WORK, "in.bin"), os.path.join(WORK, "out.f32")
    blocks.astype(np.uint8).tofile(src)
    driver("dequantize", name, src, dst)
    return np.fromfile(dst, dtype="<f4")


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def test_data(n_rows, row):
    """Rows of several scales, with a zero block, a constant block and tiny values among them."""
    x = rng.standard_normal((n_rows, row)).astype(np.float32) * np.float32(0.02)
    x[0] *= 40
    x[1, :256] = 0
    x[2, :256] = 0.125
    x[3] *= 1e-3
    return x


def random_blocks(name, n_blocks):
    block, size = GGML_QUANT_SIZES[T[name]]
    if name in ("F32", "F16", "BF16"):  # random finite values (NaN payloads convert differently across CPUs)
        v = rng.standard_normal(n_blocks * 256).astype(np.float32) * 3
        v[::7] = 0
        dt = {"F32": np.float32, "F16": np.float16, "BF16": None}[name]
        return (quants.quantize(v, T.BF16) if dt is None else v.astype(dt)).view(np.uint8).reshape(-1)
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in HALF_FIELDS[name]:
        b[:, off:off + 2] = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return b.reshape(-1)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# Dequantize: random blocks of every type, bit for bit.
for name in READ:
    blocks = random_blocks(name, 64)
    theirs = quants.dequantize(blocks, T[name]).reshape(-1).astype(np.float32)
    check(same_bits(ours_dequantize(name, blocks), theirs), f"dequantize {name}: 64 random blocks bit for bit")

# Quantize where the package does: the same bytes, and their dequantization the same floats.
x = test_data(8, 512)
for name in EXACT_QUANTIZE:
    theirs = quants.quantize(x, T[name]).view(np.uint8).reshape(-1)
    ours = ours_quantize(name, x)
    diff = int(np.count_nonzero(ours != theirs)) if ours.shape == theirs.shape else -1
    check(diff == 0, f"quantize {name}: {x.size} values, bytes equal to gguf.quants.quantize (differing bytes: {diff})")
    if name not in ("F16", "BF16"):
        d = quants.dequantize(theirs, T[name]).reshape(-1).astype(np.float32)
        check(same_bits(ours_dequantize(name, theirs), d), f"dequantize {name}: the package's blocks bit for bit")


def half_ulp(v):
    """Half the spacing of fp16 at v: what storing the super-block scale in fp16 may change it by (2^-25 where
    it is subnormal or rounds to zero)."""
    return np.maximum(v * 2.0 ** -11, 2.0 ** -25)


def k_bound(name, x):
    """Each value's allowed error (k_quants.h): half a step of its sub-block's scale after the scales are
    rounded to 6 or 8 bits against the super-block's, what the minimum's rounding shifts (Q4_K), and what
    storing d and dmin in fp16 can change (which makes values of ~1e-5 lose all precision, in ggml's
    quantizers too)."""
    xb = x.reshape(-1, 256).astype(np.float64)
    if name == "Q6_K":
        sub = np.abs(xb.reshape(-1, 16, 16)).max(-1) / 31            # each sub-block's scale
        d = sub.max(-1, keepdims=True) / 127
        sc = np.ceil(sub / np.where(d > 0, d, 1))
        per_sub = (sub + d) / 2 + 32 * sc * half_ulp(d)
        return (np.repeat(per_sub, 16, axis=-1) * 1.01 + 1e-7).reshape(-1)
    sb = xb.reshape(-1, 8, 32)
    lo = np.minimum(sb.min(-1), 0)
    scale = (sb.max(-1) - lo) / 15
    max_scale, max_min = scale.max(-1, keepdims=True), (-lo).max(-1, keepdims=True)
    d, dmin = max_scale / 63, max_min / 63
    sc, mn = np.ceil(scale / np.where(d > 0, d, 1)), np.round(-lo / np.where(dmin > 0, dmin, 1))
    per_sub = (scale + d) / 2 + dmin / 2 + 16 * sc * half_ulp(d) + mn * half_ulp(dmin)
    return (np.repeat(per_sub, 32, axis=-1) * 1.01 + 1e-7).reshape(-1)


for name in ("Q4_K", "Q6_K"):
    ours = ours_quantize(name, x)
    back = quants.dequantize(ours, T[name]).reshape(-1).astype(np.float32)
    err = np.abs(back - x.reshape(-1))
    bound = k_bound(name, x)
    worst = float((err / bound).max())
    check(worst <= 1.0, f"quantize {name}: gguf.quants.dequantize within each sub-block's bound "
                        f"(worst error / bound {worst:.3f}, rms error {float(np.sqrt((err ** 2).mean())):.2e})")
    check(same_bits(ours_dequantize(name, ours), back), f"dequantize {name}: our own blocks bit for bit")
# A 4-bit K-quant with per-sub-block minimums is no worse than Q4_0 on the same values, nor Q6_K than Q5_0.
rms = {n: float(np.sqrt(((quants.dequantize(q, T[n]).reshape(-1) - x.reshape(-1)) ** 2).mean()))
       for n, q in [("Q4_K", ours_quantize("Q4_K", x)), ("Q6_K", ours_quantize("Q6_K", x)),
                    ("Q4_0", quants.quantize(x, T.Q4_0)), ("Q5_0", quants.quantize(x, T.Q5_0))]}
check(rms["Q4_K"] <= rms["Q4_0"] and rms["Q6_K"] <= rms["Q5_0"],
      f"rms error Q4_K {rms['Q4_K']:.2e} ≤ Q4_0 {rms['Q4_0']:.2e}, Q6_K {rms['Q6_K']:.2e} ≤ Q5_0 {rms['Q5_0']:.2e}")

# fp16 rounding at the edges.
edges = np.array([0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, 1e6, -1e6, np.inf, -np.inf, 2.0 ** -14, 2.0 ** -24,
                  2.0 ** -25, 1.5 * 2.0 ** -25, 3.0 * 2.0 ** -26, 2.0 ** -26, 6.1e-5, 1.0 + 2.0 ** -11,
                  1.0 + 3 * 2.0 ** -11], dtype=np.float32)
edges = np.concatenate([edges, (rng.standard_normal(4096) * np.exp2(rng.integers(-30, 18, 4096))).astype(np.float32)])
src, dst = os.path.join(WORK, "edges.f32"), os.path.join(WORK, "edges.bin")
edges.tofile(src)
driver("fp16", src, dst)
ours = np.fromfile(dst, dtype=np.uint16)
with np.errstate(over="ignore"):  # 1e6 → inf is one of the cases
    theirs = edges.astype(np.float16).view(np.uint16)
check(np.array_equal(ours, theirs), f"fp16: {edges.size} values incl. subnormals, overflow and infinities "
                                    f"({int(np.count_nonzero(ours != theirs))} differ)")

if failures:
    print(f"{len(failures)} failure(s); inputs kept in {WORK}")
    sys.exit(1)
shutil.rmtree(WORK, ignore_errors=True)  # kept only when the test fails
print("gguf quants: all ok")
