#!/usr/bin/env python3
"""scripts/bench/kernel_kinds.py on a small hand-made trace, as a user runs it: each kernel lands in its kind
(meshtrain's named kernels, cuBLAS's and cuDNN's, a Triton kernel by the ops it fused, the clip norm counted
with the optimizer, an unknown name as other), the times are per step, the JSON holds what the table shows,
and an unreadable trace is one line on stderr and a non-zero exit.
Usage: kernel_kinds_test.py SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(src, "scripts", "bench", "kernel_kinds.py")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def kernel(name, dur_us, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": dur_us}


work = tempfile.mkdtemp(prefix="meshtrain_kinds_")
trace = os.path.join(work, "rank_0.trace.json")
events = [
    kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 300),
    kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 300),
    kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", 150),
    kernel("void meshtrain::model::cuda::(anonymous namespace)::add_norm_forward_row_kernel<float>", 60),
    kernel("void at::native::multi_tensor_apply_kernel<TensorListMetadata<1>, LpNormFunctor<float>>", 10),
    kernel("triton_red_fused__log_softmax__to_copy__unsafe_view_15", 40),
    kernel("void meshtrain::model::cuda::(anonymous namespace)::swiglu_backward_kernel<bf16, 8>", 20),
    kernel("Memset (Device)", 4, cat="gpu_memset"),
    kernel("some_unnamed_kernel", 6),
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 999},  # host op: not counted
]
with open(trace, "w") as f:
    json.dump({"traceEvents": events}, f)
out_json = os.path.join(work, "kinds.json")
p = subprocess.run([sys.executable, TOOL, trace, trace, "--steps", "2", "--top", "3", "--json", out_json],
                   capture_output=True, text=True, timeout=60)
check(p.returncode == 0, f"runs (rc={p.returncode}, stderr={p.stderr.strip()!r})")
print(p.stdout)
table = [line for line in p.stdout.splitlines() if line and not line.startswith(("GPU", " ", "#", "kind"))]
rows = {line.split()[0]: line.split()[1:] for line in table}
check(rows.get("gemm") == ["0.30", "0.30"], f"gemm 0.30 ms a step in both columns: {rows.get('gemm')}")
check(rows.get("attention") == ["0.07", "0.07"], f"attention 0.075 ms a step: {rows.get('attention')}")
check(rows.get("all") == ["0.45", "0.45"], f"all 0.448 ms a step: {rows.get('all')}")
with open(out_json) as f:
    j = json.load(f)
kinds = j["runs"][0]["kinds"]
expected = {"gemm": 0.3, "attention": 0.075, "norm": 0.03, "optimizer": 0.005, "loss": 0.02, "activation": 0.01,
            "memset/memcpy": 0.002, "other": 0.003}
check(set(kinds) == set(expected), f"the kinds found: {sorted(kinds)}")
check(all(abs(kinds.get(k, -1) - v) < 1e-9 for k, v in expected.items()), f"each kind's ms a step: {kinds}")
check([t["kind"] for t in j["runs"][0]["top"]] == ["gemm", "attention", "norm"], "top 3 kernels with their kinds")

bad = os.path.join(work, "bad.json")
with open(bad, "w") as f:
    f.write("{not json")
p = subprocess.run([sys.executable, TOOL, bad], capture_output=True, text=True, timeout=60)
lines = p.stderr.strip().splitlines()
check(p.returncode != 0 and len(lines) == 1 and "bad.json" in lines[0], f"bad trace: one line, non-zero ({p.stderr!r})")
p = subprocess.run([sys.executable, TOOL, trace, "--steps", "0"], capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "--steps" in p.stderr, "--steps 0 refused")

shutil.rmtree(work, ignore_errors=True)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
