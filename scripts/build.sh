#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (binaries in build/bin/). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DMESHTRAIN_CUDA=OFF. BUILD_DIR and BUILD_TARGETS override defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja "$@"
fi
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -- ${BUILD_TARGETS:-}
