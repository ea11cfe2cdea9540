#!/usr/bin/env python3
"""`meshtrain bench train --memory-snapshot FILE` on a GPU (docs/profiling.md "Memory"): a one-layer GPT-2 for one
step writes FILE, a pickle in the format PyTorch's memory viewer reads — its segments hold blocks, and the trace
holds allocations and frees, each allocation with a stack that names a meshtrain function — and the run prints its
result table as without the flag. Exit 77 (skipped) without an NVIDIA GPU.
Usage: memory_snapshot_gpu_test.py BIN_DIR SOURCE_DIR
"""
import os
import pickle
import subprocess
import sys
import tempfile

bin_dir = sys.argv[1]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked, skip_without_gpu  # noqa: E402
skip_without_gpu()

work = tempfile.mkdtemp(prefix="meshtrain_memory_snapshot_")
check = Checks()


def main():
    path = os.path.join(work, "mem.pickle")
    p = subprocess.run([os.path.join(bin_dir, "meshtrain"), "bench", "train", "--preset", "gpt2-124m", "--layers", "1",
                        "--batch", "2", "--seq", "64", "--steps", "1", "--warmup", "0", "--memory-snapshot", path],
                       capture_output=True, text=True, timeout=540, cwd=work)
    check(p.returncode == 0, f"bench train --memory-snapshot exits 0 (got {p.returncode}: {p.stderr[-2000:]})")
    check("tokens/s" in p.stdout, "the result table is printed")
    check("memory snapshot: " + path in p.stderr + p.stdout, "one line says where the snapshot went")
    if os.path.exists(path):
        with open(path, "rb") as f:
            snap = pickle.load(f)
        check(isinstance(snap, dict) and snap.get("segments"), "the snapshot holds the allocator's segments")
        events = [e for trace in snap.get("device_traces", []) for e in trace]
        allocs = [e for e in events if e.get("action") == "alloc"]
        check(allocs and any(e.get("action") == "free_completed" for e in events),
              f"the trace holds allocations and frees ({len(events)} events)")
        named = [e for e in allocs if any("meshtrain" in fr.get("name", "") for fr in e.get("frames", []))]
        check(len(named) > 0, f"allocations carry C++ stacks naming meshtrain ({len(named)} of {len(allocs)})")
    else:
        check(False, f"{path} written")


run_checked(main, check, work)
