#!/usr/bin/env bash
# On a GPU machine: configure and build a Release tree with all cores, run the whole test suite (GPU-labelled
# tests included), then the single-GPU training benchmark — meshtrain vs the same model in PyTorch on the
# same GPU — writing logs and JSON under OUT and printing a short table last.
# Usage: scripts/gpu-check.sh OUT_DIR
set -uo pipefail
OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
BUILD=build-gpu
PY=$(command -v python3)
[ -x .venv/bin/python ] && PY=.venv/bin/python

{ scripts/setup.sh; } > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
t0=$(date +%s)
{ cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j "$(nproc)"; } \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
build_s=$(( $(date +%s) - t0 ))
(cd $BUILD && ctest --output-on-failure -j 8 --timeout 600) > "$OUT/ctest.log" 2>&1
ctest_rc=$?

# Single-GPU training throughput, GPT-2 124M, seq 1024, micro-batch 16, bf16.
SEQ=1024 BATCH=16 STEPS=30
"$PY" scripts/bench/make_random_shard.py "$OUT/random.bin" 20000000 50257
"$PY" scripts/bench/train_torch.py --preset gpt2-124m --seq $SEQ --batch $BATCH --steps $STEPS \
  --json "$OUT/bench_torch.json" > "$OUT/bench_torch.log" 2>&1
$BUILD/bin/meshtrain train configs/bench/gpt2-124m-1gpu.yaml --set data.train="$OUT/random.bin" \
  --set train.out_dir="$OUT/meshtrain_run" --set train.steps=$((STEPS + 5)) \
  > "$OUT/bench_meshtrain.log" 2>&1

"$PY" - "$OUT" "$build_s" "$ctest_rc" <<'PYEOF'
import json, sys, statistics
out, build_s, ctest_rc = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [l for l in open(f"{out}/ctest.log") if "tests passed" in l or "tests failed" in l]
recs = [json.loads(l) for l in open(f"{out}/meshtrain_run/metrics.jsonl") if '"loss"' in l][5:]
mt = {"impl": "meshtrain", "tokens_per_s": statistics.median(r["tokens_per_s"] for r in recs),
      "mfu": statistics.median(r.get("mfu", 0) for r in recs),
      "peak_memory_bytes": max(r["peak_memory_bytes"] for r in recs)}
pt = json.load(open(f"{out}/bench_torch.json"))
res = {"build_s": int(build_s), "ctest_rc": int(ctest_rc), "ctest": rows[-1].strip() if rows else "?",
       "gpt2_124m_1gpu": {"meshtrain": mt, "pytorch": pt, "ratio": mt["tokens_per_s"] / pt["tokens_per_s"]}}
json.dump(res, open(f"{out}/summary.json", "w"), indent=1)
print(f"build: {build_s}s   ctest: {res['ctest']} (rc {ctest_rc})")
print(f"{'gpt2-124m, 1 GPU, seq 1024, batch 16, bf16':44s} {'tokens/s':>10s} {'MFU':>7s} {'peak GiB':>9s}")
for r in (mt, pt):
    print(f"{r['impl']:44s} {r['tokens_per_s']:10.0f} {100*r['mfu']:6.1f}% {r['peak_memory_bytes']/2**30:9.2f}")
print(f"meshtrain / pytorch throughput: {res['gpt2_124m_1gpu']['ratio']:.3f}")
PYEOF
