#!/usr/bin/env bash
# On a GPU machine: configure and build a Release tree with all cores, run the whole test suite (GPU-labelled
# tests included), then the single-GPU training benchmark — meshtrain vs the same model in PyTorch on the
# same GPU, eager and compiled, and the fused kernels against the ops they replace — writing logs and JSON
# under OUT and printing short tables last.
# A whole check runs past ten minutes; WHAT splits it: all (suite + benchmarks), tests (the whole suite),
# gpu (GPU-labelled tests only), bench (benchmarks only), plan (`meshtrain plan`'s predicted peak memory against
# the measured one: scripts/bench/plan_check.py, a few minutes), serve (only the targets serving needs, its GPU
# tests, the decode-kernel benchmark, the engine-step benchmark with STEP_BENCH_ARGS, then
# scripts/bench/serve_compare.py with SERVE_ARGS). BENCH_ARGS go to
# train_compare.py.
# Usage: scripts/gpu-check.sh OUT_DIR [all|tests|gpu|bench|plan|serve]
set -uo pipefail
OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR [all|tests|gpu|bench|plan|serve]}
WHAT=${2:-all}
[ "$WHAT" = tests ] && WHAT=all_tests
case $WHAT in all|all_tests|gpu|bench|plan|serve) ;; *) echo "gpu-check.sh: unknown part '$2' (all, tests, gpu, bench, plan, serve)" >&2; exit 2 ;; esac
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
BUILD=build-gpu
PY=$(command -v python3)
[ -x .venv/bin/python ] && PY=.venv/bin/python

{ scripts/setup.sh; } > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
t0=$(date +%s)
TARGETS=()  # all
# Serving needs the meshtrain binary and the serve GPU tests' binaries, a quarter of the tree.
[ "$WHAT" = serve ] && TARGETS=(--target meshtrain paged_forward_gpu_tests paged_decode_gpu_tests paged_decode_bench
                                 decode_graphs_gpu_tests serve_step_bench)
{ cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j "$(nproc)" "${TARGETS[@]}"; } \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
build_s=$(( $(date +%s) - t0 ))
ctest_rc=0
case $WHAT in
  all|all_tests) (cd $BUILD && ctest --output-on-failure -j 8 --timeout 600) > "$OUT/ctest.log" 2>&1; ctest_rc=$? ;;
  gpu) (cd $BUILD && ctest --output-on-failure -L gpu --timeout 600) > "$OUT/ctest.log" 2>&1; ctest_rc=$? ;;
  serve) (cd $BUILD && ctest --output-on-failure -L gpu -R '^gpu\.serve\.' -E '_bench$' --timeout 600) > "$OUT/ctest.log" 2>&1
         ctest_rc=$? ;;
esac
# Serving throughput and latency: meshtrain serve vs transformers generate, one model, one run.
if [ "$WHAT" = serve ]; then
  # The decode-attention kernel against the reference paged attention (Llama 3.1 8B's attention shape, bf16).
  $BUILD/bin/paged_decode_bench "$OUT/paged_decode_bench.json" | tee "$OUT/paged_decode_bench.txt"
  # Where one engine step's time goes (Llama 3.1 8B shape unless STEP_BENCH_ARGS say otherwise).
  $BUILD/bin/serve_step_bench "$OUT/serve_step_bench.json" ${STEP_BENCH_ARGS:-} | tee "$OUT/serve_step_bench.txt"
  "$PY" scripts/bench/serve_compare.py $BUILD/bin "$OUT/serve" ${SERVE_ARGS:-} | tee "$OUT/serve_compare.txt"
fi

# Single-GPU training throughput: meshtrain vs PyTorch eager and torch.compile, three shapes.
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  # Each fused kernel against the composite ops it replaces (forward + backward, bf16, the shapes above).
  $BUILD/bin/fused_kernels_bench "$OUT/fused_kernels_bench.json" | tee "$OUT/fused_kernels_bench.txt"
  "$PY" scripts/bench/train_compare.py $BUILD/bin/meshtrain "$OUT/train" ${BENCH_ARGS:-} | tee "$OUT/train_compare.txt"
fi
# Predicted vs measured peak memory, one GPU: the bench shapes and Llama 3.1 8B at micro-batch 1, ± checkpointing.
plan_rc=0
if [ "$WHAT" = plan ]; then
  "$PY" scripts/bench/plan_check.py $BUILD/bin/meshtrain "$OUT/plan" | tee "$OUT/plan_check.txt"
  plan_rc=${PIPESTATUS[0]}
fi
echo "build: ${build_s}s"
[ "$WHAT" = plan ] && exit $plan_rc
[ "$WHAT" = bench ] || grep -E "tests passed|tests failed" "$OUT/ctest.log"
exit $ctest_rc
