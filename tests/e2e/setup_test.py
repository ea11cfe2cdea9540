#!/usr/bin/env python3
"""scripts/setup.sh's venv creation failing as a user meets it, without filling a disk or reaching a network.

A copy of the script in a temporary repository (no .venv), run as the user runs it:
(a) disk: MESHTRAIN_SETUP_NEED_BYTES above the free space → exit non-zero, one line on stderr naming what is
    needed and what is free, and no .venv created (nothing installed into a disk that cannot hold it);
(b) pip: a venv is made, pip pointed at an index nothing listens on (no cache, no config file) → one line with
    pip's own last error, not a guess at the cause.
Exit code 77 (skipped) where the system python3 already has torch 2.11 (setup uses it and makes no venv) or
lacks the venv module.
Usage: setup_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

src = sys.argv[1]
TORCH = "2.11.0"
probe = subprocess.run(["python3", "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
if probe.returncode == 0 and probe.stdout.strip().split("+")[0] == TORCH:
    print("skipped: the system python3 has torch; setup.sh makes no venv there")
    sys.exit(77)
if subprocess.run(["python3", "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
    print("skipped: python3 lacks the venv module")
    sys.exit(77)

work = tempfile.mkdtemp(prefix="meshtrain_setup_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def setup(**env):
    os.makedirs(os.path.join(work, "scripts"), exist_ok=True)
    shutil.copy(os.path.join(src, "scripts", "setup.sh"), os.path.join(work, "scripts", "setup.sh"))
    e = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_RETRIES="0", PIP_TIMEOUT="2",
             PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_NO_INPUT="1", **env)
    e.pop("PIP_FIND_LINKS", None)
    e.pop("PIP_EXTRA_INDEX_URL", None)
    return subprocess.run(["bash", os.path.join(work, "scripts", "setup.sh")], env=e, capture_output=True, text=True,
                          timeout=600)


try:
    p = setup(MESHTRAIN_SETUP_NEED_BYTES=str(10**18))
    errs = [line for line in p.stderr.splitlines() if line.strip()]
    check(p.returncode != 0 and len(errs) == 1 and "need 1000000000.0 GB" in errs[0] and " free on " in errs[0],
          f"a disk too small: exit {p.returncode}, one line naming needed and free bytes: {errs}")
    check(not os.path.exists(os.path.join(work, ".venv")), "a disk too small: no .venv created")

    p = setup(MESHTRAIN_SETUP_NEED_BYTES="0")
    errs = [line for line in p.stderr.splitlines() if line.strip()]
    check(p.returncode != 0 and len(errs) == 1 and f"pip could not install torch=={TORCH}: " in errs[0]
          and "no network or no wheel" not in errs[0] and ("ERROR" in errs[0] or "error" in errs[0]),
          f"pip failing: exit {p.returncode}, one line with pip's own error: {errs}")
finally:
    shutil.rmtree(work, ignore_errors=True)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
