#!/usr/bin/env python3
"""scripts/memory_peak.py, run as the user runs it, on allocator snapshots written here in PyTorch's format (the
real ones come from a GPU: e2e.train.memory_snapshot_gpu checks that meshtrain writes that format).

  - one snapshot: the trace replayed to its highest point, which is not its last event; the blocks live there
    summed by call site, a C++ site named by its meshtrain frame (library frames skipped), a Python one by its
    file:line outside torch;
  - --against: the byte difference of the two peaks and the block sizes whose counts differ;
  - a file that is no pickle, a pickle that is no snapshot, a trace without allocations, --top 0: each one line,
    exit 2.

Usage: memory_peak_test.py SOURCE_DIR
"""
import os
import pickle
import subprocess
import sys
import tempfile

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(src, "scripts", "memory_peak.py")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked  # noqa: E402

MiB = 2**20
check = Checks()
work = tempfile.mkdtemp(prefix="mt_memory_peak_")

CPP = [{"name": "c10::cuda::CUDACachingAllocator::malloc", "filename": "", "line": 0},
       {"name": "std::_Function_handler<at::Tensor ()>::_M_invoke", "filename": "", "line": 0},
       {"name": "meshtrain::model::MlpImpl::forward(at::Tensor const&)", "filename": "", "line": 0}]
PY = [{"name": "forward", "filename": "/venv/lib/site-packages/torch/nn/modules/linear.py", "line": 125},
      {"name": "train_step", "filename": "/home/me/train.py", "line": 42}]


def snapshot(name, head_mib):
    """A trace that peaks before its end: 300 MiB (C++) and a `head_mib` block (Python) live at the peak, then the
    300 MiB block freed and a 100 MiB one allocated (below the peak)."""
    events = [
        {"action": "alloc", "addr": 1, "size": 300 * MiB, "frames": CPP},
        {"action": "alloc", "addr": 2, "size": 40 * MiB, "frames": PY},
        {"action": "free_requested", "addr": 2, "size": 40 * MiB, "frames": PY},
        {"action": "free_completed", "addr": 2, "size": 40 * MiB, "frames": PY},
        {"action": "alloc", "addr": 3, "size": head_mib * MiB, "frames": PY},
        {"action": "free_requested", "addr": 1, "size": 300 * MiB, "frames": CPP},
        {"action": "free_completed", "addr": 1, "size": 300 * MiB, "frames": CPP},
        {"action": "alloc", "addr": 4, "size": 100 * MiB, "frames": CPP},
    ]
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [events]}, f)
    return path


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def refused(what, args, message):
    r = run(*args)
    err = r.stderr.strip()
    check(r.returncode == 2 and message in err and "\n" not in err, f"{what}: exit 2, one line with {message!r} "
          f"(exit {r.returncode}: {err!r})")


def main():
    a, b = snapshot("a.pickle", 200), snapshot("b.pickle", 136)
    r = run(a)
    out = r.stdout
    check(r.returncode == 0 and f"peak 0.488 GiB ({500 * MiB:,} bytes) at event 5 of 8, 2 blocks live" in out,
          f"the peak is the trace's highest point, not its end: {out.splitlines()[:1]}")
    lines = out.splitlines()[2:]
    check(len(lines) == 2 and lines[0].split()[:2] == ["300.0", "1"]
          and lines[0].endswith("meshtrain::model::MlpImpl::forward(at::Tensor const&)"),
          f"a C++ block's site is its meshtrain frame, largest first: {lines[:1]}")
    check(len(lines) == 2 and lines[1].split()[:2] == ["200.0", "1"] and lines[1].endswith("train.py:42 train_step"),
          f"a Python block's site is its line outside torch: {lines[1:]}")
    r = run(a, "--top", "1")
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 3, "--top 1 prints one site")

    r = run(a, "--against", b)
    out = r.stdout
    check(r.returncode == 0 and f"A - B = {64 * MiB:,} bytes (64.0 MiB)" in out, f"the peaks' difference: {out!r}")
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    check(set(rows) == {f"{200 * MiB:,}", f"{136 * MiB:,}"}, f"the sizes whose counts differ, no others: {list(rows)}")
    check(f"{200 * MiB:,}" in rows and rows[f"{200 * MiB:,}"].split()[1:4] == ["1", "0", "200.0"]
          and "train.py:42" in rows[f"{200 * MiB:,}"], f"A's block, with its site: {rows.get(f'{200 * MiB:,}')}")
    check(f"{136 * MiB:,}" in rows and rows[f"{136 * MiB:,}"].split()[1:4] == ["0", "1", "-136.0"],
          f"B's block: {rows.get(f'{136 * MiB:,}')}")
    r = run(a, "--against", a)
    check(r.returncode == 0 and "the same sizes" in r.stdout, "a snapshot against itself: nothing differs")

    text = os.path.join(work, "notes.txt")
    with open(text, "w") as f:
        f.write("not a snapshot\n")
    refused("a text file", [text], f"{text}: not a pickled allocator snapshot")
    other = os.path.join(work, "other.pickle")
    with open(other, "wb") as f:
        pickle.dump({"weights": [1, 2]}, f)
    refused("a pickle without a trace", [other], "no 'device_traces'")
    empty = os.path.join(work, "empty.pickle")
    with open(empty, "wb") as f:
        pickle.dump({"device_traces": [[{"action": "free_completed", "addr": 1, "size": 8}]]}, f)
    refused("a trace without allocations", [empty], "holds no allocation")
    refused("a missing file", [os.path.join(work, "absent.pickle")], "cannot read it")
    refused("--top 0", [a, "--top", "0"], "--top 0: must be at least 1")


run_checked(main, check, work)
