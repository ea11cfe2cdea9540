#!/usr/bin/env python3
"""Where the GPU waits: the idle gaps between device events in a Chrome/Perfetto trace of a few training steps
(`meshtrain bench train --profile DIR` writes DIR/rank_0.trace.json; `train_torch.py --profile DIR` writes
DIR/trace.json).

Prints the device's busy share of the traced span, the idle time in gaps of at least --min-us (launch-bound
stretches show as many small gaps, host synchronisations as a few long ones), and the longest gaps, each with
the device event before it and the CPU ops running while the device sat idle (the host work it waited on).

With --detail K, the K longest gaps are printed again with every CPU op that overlapped them, in time order:
its start relative to the gap's start, its duration and its name (what to trim or move off the step's path).

Usage: trace_gaps.py TRACE.json [--min-us 5] [--top 15] [--detail 0]
"""
import argparse
import json
import sys


def load(path):
    try:
        with open(path) as f:
            events = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: cannot read a Chrome trace: {e}")
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    if not isinstance(events, list):
        sys.exit(f"{path}: no traceEvents list")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    device = sorted((e for e in spans if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    cpu = [e for e in spans if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime")]
    return device, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--min-us", type=float, default=5.0, help="gaps shorter than this are not counted")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--detail", type=int, default=0, help="list the CPU ops of the K longest gaps")
    a = ap.parse_args()
    device, cpu = load(a.trace)
    if not device:
        sys.exit(f"{a.trace}: no device events (kernel, gpu_memcpy, gpu_memset) in the trace")
    start, end, busy_end, gaps, prev = device[0]["ts"], 0.0, device[0]["ts"], [], device[0]
    busy = 0.0
    for e in device:
        s, t = e["ts"], e["ts"] + e.get("dur", 0)
        if s > busy_end:
            gaps.append((s - busy_end, busy_end, s, prev))
        busy += max(0.0, t - max(s, busy_end))
        busy_end = max(busy_end, t)
        prev = e
        end = max(end, t)
    span = end - start
    counted = [g for g in gaps if g[0] >= a.min_us]
    idle = sum(g[0] for g in counted)
    print(f"{a.trace}: {len(device)} device events over {span / 1e3:.2f} ms; busy {100 * busy / span:.1f} %")
    print(f"idle in {len(counted)} gaps of >= {a.min_us:g} us: {idle / 1e3:.2f} ms "
          f"({100 * idle / span:.1f} %); all gaps: {sum(g[0] for g in gaps) / 1e3:.2f} ms")
    print(f"{'gap us':>9}  after (device)  |  CPU ops during the gap")
    for length, s, t, before in sorted(counted, key=lambda g: -g[0])[:a.top]:
        during = sorted({c["name"] for c in cpu if c["ts"] < t and c["ts"] + c.get("dur", 0) > s})
        print(f"{length:9.1f}  {before['name'][:50]}  |  {', '.join(n[:40] for n in during[:6])}")
    for length, s, t, before in sorted(counted, key=lambda g: -g[0])[:a.detail]:
        print(f"\ngap of {length:.1f} us after {before['name'][:60]}:")
        print(f"{'start us':>9} {'dur us':>9}  CPU op")
        for c in sorted((c for c in cpu if c["ts"] < t and c["ts"] + c.get("dur", 0) > s), key=lambda c: c["ts"]):
            print(f"{c['ts'] - s:9.1f} {c.get('dur', 0):9.1f}  {c['name'][:90]}")


if __name__ == "__main__":
    main()
