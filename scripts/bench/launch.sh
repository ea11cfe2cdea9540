#!/usr/bin/env bash
# Launcher benchmark: wall time of meshrun vs torchrun, side by side, for
#   start:   --standalone --nproc-per-node N --no-python true
#   restart: the same with rank 0 failing once (--max-restarts 1): one full restart cycle
# plus where meshrun's time would go if it loaded LibTorch itself: `python -c "import torch._C"` (dynamic
# loading + LibTorch's static initialisers; the store helper no longer loads LibTorch), and `meshrun --help`
# (meshrun's own exec).
# Rounds are interleaved (shared machines are noisy: compare the ratios of one run); medians are reported.
# usage: scripts/bench/launch.sh [BUILD_DIR] [ROUNDS] [NPROC]
#   → table on stdout, JSON in $BUILD_DIR/bench/launch.json
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
ROUNDS=${2:-7}
NPROC=${3:-8}
MESHRUN=$BUILD/bin/meshrun
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
TORCHRUN=${TORCHRUN:-$ROOT/.venv/bin/torchrun}
[ -x "$MESHRUN" ] || { echo "bench/launch.sh: $MESHRUN not built (cmake --build $BUILD -- meshrun)" >&2; exit 2; }
[ -x "$TORCHRUN" ] || { echo "bench/launch.sh: torchrun not found at $TORCHRUN (set TORCHRUN)" >&2; exit 2; }
mkdir -p "$BUILD/bench"
# shellcheck disable=SC2016  # expanded by each worker's shell, not here
FAIL_ONCE='[ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || [ "$RANK" != 0 ]'
exec "$PYTHON" - "$MESHRUN" "$TORCHRUN" "$ROUNDS" "$NPROC" "$FAIL_ONCE" "$BUILD/bench/launch.json" <<'PY'
import json, os, platform, statistics, subprocess, sys, time
meshrun, torchrun, rounds, nproc, fail_once, out = sys.argv[1:]
rounds, nproc = int(rounds), int(nproc)
cases = {
    "start":   ["--standalone", "--nproc-per-node", str(nproc), "--no-python", "true"],
    "restart": ["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "1", "--no-python",
                "sh", "-c", fail_once],
}
def timed(cmd, ok=(0,)):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if p.returncode not in ok:
        sys.exit(f"bench/launch.sh: {' '.join(cmd[:3])} ... exited {p.returncode}")
    return dt
times = {(c, l): [] for c in cases for l in ("meshrun", "torchrun")}
parts = {"meshrun --help": [], "LibTorch load (python -c 'import torch._C')": []}
load0 = os.getloadavg()[0]
for i in range(rounds):
    print(f"round {i + 1}/{rounds}", file=sys.stderr, flush=True)
    for c, args in cases.items():
        for l, exe in (("meshrun", meshrun), ("torchrun", torchrun)):
            times[(c, l)].append(timed([exe, *args]))
    parts["meshrun --help"].append(timed([meshrun, "--help"]))
    parts["LibTorch load (python -c 'import torch._C')"].append(timed([sys.executable, "-c", "import torch._C"]))
rows = []
print(f"{'case':8} {'meshrun s':>10} {'torchrun s':>11} {'ratio':>7}   (median of {rounds}, nproc {nproc}, "
      f"{os.cpu_count()} CPUs, load {load0:.1f})")
for c in cases:
    m, t = statistics.median(times[(c, 'meshrun')]), statistics.median(times[(c, 'torchrun')])
    print(f"{c:8} {m:10.3f} {t:11.3f} {t / m:6.1f}x")
    rows.append({"case": c, "meshrun_s": m, "torchrun_s": t, "ratio": t / m,
                 "meshrun_all": times[(c, 'meshrun')], "torchrun_all": times[(c, 'torchrun')]})
print("where the time goes (median s):")
for k, v in parts.items():
    print(f"  {k:42} {statistics.median(v):.3f}")
json.dump({"nproc": nproc, "rounds": rounds, "host": platform.node(), "cpus": os.cpu_count(),
           "loadavg_at_start": load0, "results": rows,
           "parts": {k: {"median_s": statistics.median(v), "all": v} for k, v in parts.items()}},
          open(out, "w"), indent=1)
print(f"json: {out}")
PY
