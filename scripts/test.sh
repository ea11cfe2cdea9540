#!/usr/bin/env bash
# Builds everything (warnings are errors; the same configuration as scripts/build.sh and the quickstart) and
# runs the whole test suite, ending with ctest's summary. Tests labelled `gpu` report skipped on a machine
# without a GPU. Extra arguments go to ctest (e.g. scripts/test.sh -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR=$BUILD_DIR BUILD_TARGETS= scripts/build.sh
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "${CTEST_JOBS:-2}" "$@"
