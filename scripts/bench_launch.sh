#!/usr/bin/env bash
# Launcher start-up benchmark: wall time of meshrun vs torchrun for
#   start: --standalone --nproc-per-node N --no-python true
#   restart: the same, with rank 0 failing once (--max-restarts 1): one full restart cycle
# Several rounds each, interleaved (shared machines are noisy: compare ratios from one run).
# usage: scripts/bench_launch.sh [BUILD_DIR] [ROUNDS] [NPROC]   → table on stdout, JSON in $BUILD_DIR/bench/launch.json
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
ROUNDS=${2:-5}
NPROC=${3:-8}
MESHRUN=$BUILD/bin/meshrun
TORCHRUN=${TORCHRUN:-$ROOT/.venv/bin/torchrun}
[ -x "$MESHRUN" ] || { echo "bench_launch: $MESHRUN not built (ninja -C $BUILD meshrun)" >&2; exit 2; }
[ -x "$TORCHRUN" ] || { echo "bench_launch: torchrun not found at $TORCHRUN (set TORCHRUN)" >&2; exit 2; }
mkdir -p "$BUILD/bench"
FAIL_ONCE='[ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || [ "$RANK" != 0 ]'
exec "$ROOT/.venv/bin/python" - "$MESHRUN" "$TORCHRUN" "$ROUNDS" "$NPROC" "$FAIL_ONCE" "$BUILD/bench/launch.json" <<'PY'
import json, platform, os, statistics, subprocess, sys, time
meshrun, torchrun, rounds, nproc, fail_once, out = sys.argv[1:]
rounds, nproc = int(rounds), int(nproc)
cases = {
    "start":   ["--standalone", "--nproc-per-node", str(nproc), "--no-python", "true"],
    "restart": ["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "1", "--no-python",
                "sh", "-c", fail_once],
}
times = {(c, l): [] for c in cases for l in ("meshrun", "torchrun")}
for _ in range(rounds):
    for c, args in cases.items():
        for l, exe in (("meshrun", meshrun), ("torchrun", torchrun)):
            t0 = time.perf_counter()
            p = subprocess.run([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dt = time.perf_counter() - t0
            if p.returncode != 0:
                sys.exit(f"bench_launch: {l} {c} exited {p.returncode}")
            times[(c, l)].append(dt)
rows = []
print(f"{'case':8} {'meshrun s':>10} {'torchrun s':>11} {'ratio':>7}   (median of {rounds}, nproc {nproc})")
for c in cases:
    m, t = statistics.median(times[(c, 'meshrun')]), statistics.median(times[(c, 'torchrun')])
    print(f"{c:8} {m:10.3f} {t:11.3f} {t / m:6.1f}x")
    rows.append({"case": c, "meshrun_s": m, "torchrun_s": t, "ratio": t / m,
                 "meshrun_all": times[(c, 'meshrun')], "torchrun_all": times[(c, 'torchrun')]})
json.dump({"nproc": nproc, "rounds": rounds, "host": platform.node(), "cpus": os.cpu_count(),
           "results": rows}, open(out, "w"), indent=1)
print(f"json: {out}")
PY
