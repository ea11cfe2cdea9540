#!/usr/bin/env bash
# Installs what meshtrain needs to build and test, idempotently:
#   - system packages (Debian 12 / Ubuntu 24.04): compiler, CMake, Ninja, ccache, spdlog, yaml-cpp,
#     nlohmann-json, cxxopts, GoogleTest, Python venv support — only those missing, only with apt and root;
#   - LibTorch, as the pinned PyTorch wheel (torch==2.11.0): a python3 that already imports torch 2.11 is used
#     as is (nothing installed — the GPU machine has one and no network); otherwise a project venv in .venv.
# Prints what it used; exits non-zero with one clear line when something cannot be had (a full disk included:
# the venv's filesystem is checked for MESHTRAIN_SETUP_NEED_BYTES, default 6 GB, before anything is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.11.0
PY_TEST_PACKAGES=(numpy safetensors matplotlib tokenizers transformers jinja2 tensorboard peft gguf httpx wandb)

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# ---- system packages --------------------------------------------------------------------------------------
# programs (anywhere on PATH) and headers → Debian package
declare -A NEED_PROG=([g++]=g++ [cmake]=cmake [ninja]=ninja-build)
declare -A NEED_FILE=(
  [/usr/include/spdlog/spdlog.h]=libspdlog-dev [/usr/include/yaml-cpp/yaml.h]=libyaml-cpp-dev
  [/usr/include/nlohmann/json.hpp]=nlohmann-json3-dev [/usr/include/cxxopts.hpp]=libcxxopts-dev
  [/usr/include/gtest/gtest.h]=libgtest-dev [/usr/include/gmock/gmock.h]=libgmock-dev
  [/usr/include/boost/beast.hpp]=libboost-dev
)
missing=()
for prog in "${!NEED_PROG[@]}"; do
  command -v "$prog" >/dev/null || missing+=("${NEED_PROG[$prog]}")
done
for path in "${!NEED_FILE[@]}"; do
  [ -e "$path" ] || missing+=("${NEED_FILE[$path]}")
done
optional=()  # nice to have: ccache (faster rebuilds), python3-venv (only when a venv must be created)
command -v ccache >/dev/null || optional+=(ccache)
python3 -c 'import torch' >/dev/null 2>&1 || python3 -c 'import venv, ensurepip' >/dev/null 2>&1 \
  || optional+=(python3-venv)
can_apt() { command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; }
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  can_apt || die "missing system packages: ${missing[*]} (install them with your package manager, or run as root with apt)"
  say "installing ${missing[*]} ${optional[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || die "apt-get update failed (no network?); install by hand: ${missing[*]}"
  apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install failed for: ${missing[*]}"
  optional_done=1
else
  say "system packages present"
fi
if [ ${#optional[@]} -gt 0 ] && [ -z "${optional_done:-}" ] && can_apt; then
  export DEBIAN_FRONTEND=noninteractive
  { timeout 120 apt-get update -qq && timeout 300 apt-get install -y -qq "${optional[@]}"; } >/dev/null 2>&1 \
    && say "installed ${optional[*]}" || say "note: could not install ${optional[*]} (optional)"
elif [ ${#optional[@]} -gt 0 ] && [ -n "${optional_done:-}" ]; then
  apt-get install -y -qq "${optional[@]}" >/dev/null 2>&1 || say "note: could not install ${optional[*]} (optional)"
fi
cmake_version=$(cmake --version | head -1 | awk '{print $3}')
printf '%s\n%s\n' 3.25 "$cmake_version" | sort -V -C || die "CMake $cmake_version is older than 3.25"

# ---- LibTorch through the PyTorch wheel -------------------------------------------------------------------
# A venv with torch 2.11 (CUDA 12 wheel) and the test packages measures 5.1 GB (torch 1.2, nvidia-* 2.7,
# triton 0.6); 6 GB leaves pip room to unpack. Checked before installing: a full disk otherwise fails deep
# inside pip with a message about something else.
NEED_BYTES=${MESHTRAIN_SETUP_NEED_BYTES:-6000000000}
gb() { awk -v b="$1" 'BEGIN { printf "%.1f GB", b / 1e9 }'; }
check_venv_space() {
  local where=. free
  [ -e .venv ] && where=.venv
  free=$(df -P -B1 "$where" | awk 'NR == 2 { print $4 }')
  [ "$free" -ge "$NEED_BYTES" ] || die "not enough disk space for .venv: torch==$TORCH_VERSION and its packages" \
    "need $(gb "$NEED_BYTES"), $(gb "$free") free on the filesystem of $(cd "$where" && pwd -P) (free space there," \
    "or make .venv a link to a larger disk)"
}
# pip's own last error line on failure (not a guess at its cause).
pip_install_torch() {
  local log
  log=$(mktemp)
  if ! .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" >"$log" 2>&1; then
    local last
    last=$(grep -E '^(ERROR|error):' "$log" | tail -1)
    [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$log" | tail -1)
    rm -f "$log"
    die "pip could not install torch==$TORCH_VERSION: ${last:-pip printed nothing}"
  fi
  rm -f "$log"
}
torch_ok() { "$1" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" >/dev/null 2>&1; }
if [ -x .venv/bin/python ] && torch_ok .venv/bin/python; then
  PY=.venv/bin/python
  say "using .venv (torch $TORCH_VERSION)"
elif [ ! -e .venv ] && torch_ok python3; then
  PY=$(command -v python3)
  say "using $PY (torch $TORCH_VERSION already installed; nothing to install)"
else
  check_venv_space
  say "creating .venv with torch==$TORCH_VERSION (a few minutes on first run)"
  [ -x .venv/bin/python ] || python3 -m venv .venv || die "python3 -m venv failed"
  pip_install_torch
  torch_ok .venv/bin/python || die ".venv has no usable torch $TORCH_VERSION after pip install"
  PY=.venv/bin/python
fi
# Python packages the tests use (reference model, safetensors, plots, tokenizers); optional where offline.
py_imports=$(IFS=,; echo "${PY_TEST_PACKAGES[*]}")
if ! "$PY" -c "import $py_imports" >/dev/null 2>&1; then
  if [ "$PY" = .venv/bin/python ]; then
    "$PY" -m pip install -q "${PY_TEST_PACKAGES[@]}" || say "warning: could not install ${PY_TEST_PACKAGES[*]}"
  else
    say "warning: $PY lacks some of ${PY_TEST_PACKAGES[*]}; tests that need them will report skipped"
  fi
fi
say "ok: python $("$PY" -c 'import sys; print(sys.version.split()[0])'), torch $("$PY" -c 'import torch; print(torch.__version__)')"
