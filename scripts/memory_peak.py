#!/usr/bin/env python3
"""What holds the peak of a CUDA caching-allocator snapshot, in the terminal (docs/profiling.md "Memory").

SNAPSHOT is what `meshtrain bench train --memory-snapshot FILE` writes, or PyTorch's
torch.cuda.memory._dump_snapshot (scripts/bench/train_torch.py --memory-snapshot). The allocator's trace is
replayed to its highest point; the blocks live there are summed by the call site that made them (the innermost
frame of the program's own code: a meshtrain C++ function, or a Python line outside torch), largest first.

With --against OTHER, the two peaks side by side: the block sizes whose counts differ, with each side's call sites,
largest difference first. That answers "which tensor does one runtime hold at its peak that the other does not".

The file is a pickle: open only snapshots you made.

Usage: memory_peak.py SNAPSHOT [--top N] [--against OTHER]
Exit 2 with one line for a file that is not a snapshot or whose trace holds no allocation.
"""
import argparse
import collections
import pickle
import sys

MiB = 2**20
# Frames of the libraries under the program: skipped when naming a block's call site.
LIBRARY_PREFIXES = ("torch::", "c10::", "at::", "std::", "__", "??", "void c10::", "void at::", "pybind11::")


class NotASnapshot(Exception):
    pass


def load_trace(path):
    """The snapshot's allocator events, in order. NotASnapshot where the file is none."""
    try:
        with open(path, "rb") as f:
            snap = pickle.load(f)
    except OSError as e:
        raise NotASnapshot(f"cannot read it: {e.strerror}")
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise NotASnapshot(f"not a pickled allocator snapshot ({type(e).__name__})")
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        raise NotASnapshot("no 'device_traces': not an allocator snapshot (record with --memory-snapshot)")
    events = [e for trace in snap["device_traces"] for e in trace]
    if not any(e.get("action") == "alloc" for e in events):
        raise NotASnapshot("its trace holds no allocation (was recording on while the run allocated?)")
    return events


def at_peak(events):
    """(peak bytes, index of the event that reached it, the alloc events live there)."""
    total, peak, peak_at = 0, 0, -1
    for i, e in enumerate(events):
        if e.get("action") == "alloc":
            total += e["size"]
            if total > peak:
                peak, peak_at = total, i
        elif e.get("action") == "free_completed":
            total -= e["size"]
    live = {}
    for e in events[:peak_at + 1]:
        if e.get("action") == "alloc":
            live[e["addr"]] = e
        elif e.get("action") == "free_completed":
            live.pop(e["addr"], None)
    return peak, peak_at, list(live.values())


def site(event, width=120):
    """The innermost frame of the program's own code, as 'function' (C++) or 'file.py:line function' (Python)."""
    frames = event.get("frames", [])
    for f in frames:
        name, filename = f.get("name", ""), f.get("filename", "")
        if filename.endswith(".py"):
            if "site-packages" in filename or "/torch/" in filename or filename.startswith("<"):
                continue
            return f"{filename.rsplit('/', 1)[-1]}:{f.get('line')} {name}"[:width]
        if name and not name.startswith(LIBRARY_PREFIXES) and "memory_history" not in name:
            return name[:width]
    return (frames[0].get("name", "?") if frames else "(no stack recorded)")[:width]


def describe(path, events, top):
    peak, peak_at, live = at_peak(events)
    print(f"{path}: peak {peak / 2**30:.3f} GiB ({peak:,} bytes) at event {peak_at + 1} of {len(events)}, "
          f"{len(live)} blocks live")
    by_site = collections.defaultdict(lambda: [0, 0])
    for e in live:
        row = by_site[site(e)]
        row[0] += 1
        row[1] += e["size"]
    print(f"{'MiB':>10} {'blocks':>6}  call site")
    for name, (count, size) in sorted(by_site.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{size / MiB:10.1f} {count:6d}  {name}")


def compare(a_path, a_events, b_path, b_events, top):
    a_peak, _, a_live = at_peak(a_events)
    b_peak, _, b_live = at_peak(b_events)
    print(f"A {a_path}: peak {a_peak:,} bytes; B {b_path}: peak {b_peak:,} bytes; A - B = {a_peak - b_peak:,} "
          f"bytes ({(a_peak - b_peak) / MiB:.1f} MiB)")
    ca = collections.Counter(e["size"] for e in a_live)
    cb = collections.Counter(e["size"] for e in b_live)
    differ = [s for s in set(ca) | set(cb) if ca[s] != cb[s]]
    if not differ:
        print("the blocks live at the two peaks have the same sizes")
        return
    print(f"{'block bytes':>14} {'A':>5} {'B':>5} {'A - B MiB':>10}  A's call sites | B's call sites")
    for size in sorted(differ, key=lambda s: -abs(ca[s] - cb[s]) * s)[:top]:
        sites_a = collections.Counter(site(e, 60) for e in a_live if e["size"] == size).most_common(2)
        sites_b = collections.Counter(site(e, 60) for e in b_live if e["size"] == size).most_common(2)
        fmt = lambda sites: "; ".join(f"{n}× {s}" for s, n in sites) or "-"  # noqa: E731
        print(f"{size:>14,} {ca[size]:>5} {cb[size]:>5} {(ca[size] - cb[size]) * size / MiB:>10.1f}  "
              f"{fmt(sites_a)} | {fmt(sites_b)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("snapshot")
    ap.add_argument("--top", type=int, default=25, help="rows to print (default 25)")
    ap.add_argument("--against", metavar="OTHER", help="a second snapshot to set beside the first")
    a = ap.parse_args()
    if a.top < 1:
        print(f"memory_peak.py: --top {a.top}: must be at least 1", file=sys.stderr)
        sys.exit(2)
    traces = {}
    for path in [a.snapshot] + ([a.against] if a.against else []):
        try:
            traces[path] = load_trace(path)
        except NotASnapshot as e:
            print(f"memory_peak.py: {path}: {e}", file=sys.stderr)
            sys.exit(2)
    if a.against:
        compare(a.snapshot, traces[a.snapshot], a.against, traces[a.against], a.top)
    else:
        describe(a.snapshot, traces[a.snapshot], a.top)


if __name__ == "__main__":
    main()
