#!/usr/bin/env python3
"""A run that does not fit the GPU ends in one line: `meshtrain bench train` of Llama 3.2 1B (its weights and AdamW
state, 20 GB, pass the check made before the run) at 128 × 4096 tokens a micro-batch (the logits alone are 134 GB in
bf16) runs out of GPU memory in its first step on any card; it exits 1, its last stderr line names the shortage and
`meshtrain plan`, and LibTorch's C++ stack (`frame #` lines) is not printed. Exit 77 (skipped) without an NVIDIA
GPU.
Usage: out_of_memory_gpu_test.py BIN_DIR SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

bin_dir = sys.argv[1]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked, skip_without_gpu  # noqa: E402
skip_without_gpu()

work = tempfile.mkdtemp(prefix="meshtrain_oom_")
check = Checks()


def main():
    p = subprocess.run([os.path.join(bin_dir, "meshtrain"), "bench", "train", "--preset", "llama3.2-1b", "--batch",
                        "128", "--seq", "4096", "--steps", "1", "--warmup", "0"],
                       capture_output=True, text=True, timeout=540, cwd=work)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    check(p.returncode == 1, f"exit 1 (got {p.returncode})")
    check(last.startswith("meshtrain: error: out of GPU memory: "), f"the last line names the shortage: {last!r}")
    check("meshtrain plan" in last, "and says where to look")
    check("frame #" not in p.stderr, "no C++ stack: " + p.stderr[-1500:])


run_checked(main, check, work)
