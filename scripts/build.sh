#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (binaries in build/bin/) — the one configuration that the
# quickstart, the test command and a plain build share, so that none of them recompiles what another built.
# Warnings in meshtrain's own code are errors (MESHTRAIN_WERROR=OFF in the environment turns that off).
# Extra arguments go to CMake's configure step, e.g. scripts/build.sh -DMESHTRAIN_CUDA=OFF.
# BUILD_DIR and BUILD_TARGETS (space-separated) override the defaults: build/ and every target.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Configuring an up-to-date tree with the same options changes nothing and recompiles nothing.
cmake -S . -B "$BUILD_DIR" -G Ninja -DMESHTRAIN_WERROR="${MESHTRAIN_WERROR:-ON}" "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -- ${BUILD_TARGETS:-}
