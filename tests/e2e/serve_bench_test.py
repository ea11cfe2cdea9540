#!/usr/bin/env python3
"""scripts/bench/serve_compare.py run as the GPU session runs it, here on the CPU with a tiny model.

The tiny Llama shape (2 layers, 64 wide, fp32), 16 prompt tokens + 8 new ones, concurrency 1 and 2, 4 requests
each: both sides must run (transformers `generate`, and a real `meshtrain serve` on a free loopback port), the
JSON must hold both sides' rows with positive throughput and the server's latency percentiles, and in fp32 the
first prompt's greedy tokens must be equal on both sides; `--quantization none,fp8` runs a second server with FP8
block weights (the CPU's composite maths) whose rows and ratios land beside the first's. Then bad flags: one line
on stderr, exit 2.

    serve_bench_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs torch and transformers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(SRC, "scripts", "bench", "serve_compare.py")
WORK = tempfile.mkdtemp(prefix="meshtrain_serve_bench_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*flags, timeout=540):
    return subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True, timeout=timeout)


out = os.path.join(WORK, "out")
p = run(BIN, out, "--device", "cpu", "--preset", "tiny-llama", "--dtype", "fp32", "--new-tokens", "8",
        "--prompt-tokens", "16", "--concurrency", "1,2", "--requests", "4", "--quantization", "none,fp8")
print(p.stdout)
check(p.returncode == 0, f"the smoke run exits 0 (got {p.returncode}: {p.stderr.strip()[-2000:]})")
path = os.path.join(out, "serve_compare.json")
res = json.load(open(path)) if os.path.exists(path) else {}
check(bool(res), "serve_compare.json is written")
if res:
    hf, ms = res.get("transformers") or {}, res.get("meshtrain_serve") or {}
    check(res["errors"] == {}, f"no side failed: {res['errors']}")
    check([r["concurrency"] for r in hf.get("rows", [])] == [1, 2], "transformers has a row per concurrency")
    check([r["concurrency"] for r in ms.get("rows", [])] == [1, 2], "meshtrain serve has a row per concurrency")
    for r in hf.get("rows", []) + ms.get("rows", []):
        check(r["output_tokens"] == 4 * 8 and r["tokens_per_s"] > 0,
              f"C={r['concurrency']}: 4 requests × 8 tokens at a positive rate ({r})")
    for r in ms.get("rows", []):
        # Between-token gaps exist only where a request's tokens came in more than one chunk; a loaded machine may
        # hand over all 8 at once, so a level may have none (both None), never one without the other.
        itl = (r["itl_ms_p50"], r["itl_ms_p90"])
        check(all(r[k] is not None and r[k] > 0 for k in ("ttft_ms_p50", "ttft_ms_p90"))
              and r["ttft_ms_p50"] <= r["ttft_ms_p90"]
              and (itl == (None, None) or (itl[0] > 0 and itl[0] <= itl[1])),
              f"C={r['concurrency']}: latency percentiles ({r})")
    check(set(res["ratios_b_over_a"]) == {"1", "2"}, f"a B/A ratio per concurrency: {res['ratios_b_over_a']}")
    fp8 = res.get("meshtrain_serve_fp8") or {}
    check([r["output_tokens"] for r in fp8.get("rows", [])] == [4 * 8, 4 * 8] and
          "fp8" in fp8.get("command", []) and set(res.get("ratios_b_over_a_fp8", {})) == {"1", "2"},
          f"--quantization none,fp8: a second server run with FP8 block weights, its rows and ratios ({fp8})")
    g = res.get("greedy") or {}
    check(g.get("compared") == 8 and g.get("mismatches") == 0 and g.get("first_divergence") is None,
          f"fp32 greedy tokens equal on both sides: {g}")
    check(res["versions"].get("torch") and res["settings"]["preset"] == "tiny-llama", "versions and settings")

for flags, needle in [(["--concurrency", "1,0"], "--concurrency"), (["--concurrency", "1,2,1"], "--concurrency"),
                      (["--preset", "nope"], "--preset"), (["--new-tokens", "0"], "--new-tokens"),
                      (["--quantization", "int4"], "--quantization")]:
    p = run(BIN, os.path.join(WORK, "bad"), "--device", "cpu", *flags, timeout=120)
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 2 and needle in last and "Traceback" not in p.stderr,
          f"{' '.join(flags)}: exit 2 with one line naming the flag (got {p.returncode}: {last})")
p = run(os.path.join(WORK, "no_bin"), os.path.join(WORK, "bad"), "--device", "cpu", timeout=120)
check(p.returncode == 2 and "BIN_DIR" in p.stderr, f"a BIN_DIR without meshtrain: exit 2 ({p.stderr.strip()})")

if failures:
    print(f"{len(failures)} failure(s); work dir kept: {WORK}")
    sys.exit(1)
shutil.rmtree(WORK, ignore_errors=True)
print("all ok")
