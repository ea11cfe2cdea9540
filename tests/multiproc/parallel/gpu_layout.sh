#!/bin/sh
# One layout of tests/multiproc/parallel_gpu.cmake: every rank on the one GPU (cuda:0 shared through the CPU
# backend, which stages the GPU's tensors through host memory), against a single-process run of the same
# global batch on that GPU. Exits 77 (skipped) before any rank starts when no CUDA device is visible.
#   gpu_layout.sh WORKER MESHRUN REF_FILE NPROC "REF_ARGS" LAYOUT_ARGS...
set -e
worker=$1 meshrun=$2 ref=$3 nproc=$4 ref_args=$5
shift 5
"$worker" --probe-cuda || exit $?
# shellcheck disable=SC2086  # REF_ARGS is a list of worker flags
"$worker" --device cuda --layout single $ref_args --out "$ref"
exec "$meshrun" --standalone --nproc-per-node "$nproc" --no-python "$worker" --device cuda "$@" --compare "$ref"
