#!/usr/bin/env python3
"""`meshtrain serve`'s settings, the config's serve section (docs/serving.md "Settings"), with real servers on a
checkpoint trained here (a tiny GPT on synthetic tokens, on the CPU, whose config has a serve section):

  - the recorded section serves: its serve.blocks and serve.block_size are the KV cache the server reports;
  - --config FILE's section replaces it whole, --set goes over that, and a flag over --set;
  - a refused value is one line naming where it came from, exit 2, before anything listens: a bound broken by a
    flag, by --set and by the file; an unknown key with the nearest one; a key of another section in --set;
    a malformed serve.max_body.

Each server is read up to its "listening" line, then stopped by SIGTERM (exit 0).

    serve_settings_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run, run_checked, tiny_synthetic_config  # noqa: E402
from serve_support import TIMEOUT, Server  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
check = Checks()
work = tempfile.mkdtemp(prefix="mt_serve_settings_")


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def cache_line(ckpt, args):
    """The KV cache line of a server started with ARGS (and --port 0), after it stopped cleanly on SIGTERM."""
    server = Server(MESHTRAIN, ckpt, args)
    server.proc.send_signal(signal.SIGTERM)
    code = server.wait_exit()
    check(code == 0, f"serve {' '.join(args)}: exit 0 after SIGTERM (got {code})")
    return next((line.strip() for line in server.lines if "KV cache:" in line), "")


def blocks_of(line):
    """(blocks, tokens a block) of a KV cache line, or None."""
    m = re.search(r"KV cache: (\d+) blocks of (\d+) tokens", line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def refused(what, args, message):
    r = subprocess.run([MESHTRAIN, "serve", *args], capture_output=True, text=True, timeout=TIMEOUT)
    err = r.stderr.strip()
    check(r.returncode == 2 and message in err and "\n" not in err and "listening" not in r.stdout,
          f"{what}: exit 2, one line with {message!r} (exit {r.returncode}: {err!r})")


def main():
    out = os.path.join(work, "run")
    cfg = tiny_synthetic_config(work, out, 1, serve={"blocks": 40, "block_size": 4, "max_waiting": 3})
    run([MESHTRAIN, "train", cfg])
    ckpt = os.path.join(out, "checkpoints")
    recorded = json.dumps(json.load(open(cfg))["serve"])

    line = cache_line(ckpt, [])
    check(blocks_of(line) == (40, 4) and line.endswith("from serve.blocks"),
          f"the recorded serve section {recorded} sizes the cache: {line!r}")
    other = write("serve.yaml", "serve:\n  blocks: 20\n  block_size: 8\n")
    line = cache_line(ckpt, ["--config", other])
    check(blocks_of(line) == (20, 8), f"--config's section replaces the recorded one: {line!r}")
    line = cache_line(ckpt, ["--config", other, "--set", "serve.blocks=12"])
    check(blocks_of(line) == (12, 8), f"--set goes over --config: {line!r}")
    line = cache_line(ckpt, ["--config", other, "--set", "serve.blocks=12", "--blocks", "6", "--block-size", "2"])
    check(blocks_of(line) == (6, 2), f"the flags go over --set: {line!r}")
    defaults = write("defaults.json", '{"serve": {}}')
    line = cache_line(ckpt, ["--config", defaults])
    check(blocks_of(line) == (256, 16) and "serve.blocks' default on the CPU (256)" in line,
          f"a file with an empty serve section gives the defaults: {line!r}")

    refused("a flag's value out of bounds", [ckpt, "--gpu-memory-fraction", "1.5"],
            "--gpu-memory-fraction: serve.gpu_memory_fraction: given 1.5; valid in (0, 1]")
    refused("--set's value out of bounds", [ckpt, "--set", "serve.max_running=0"],
            "serve.max_running: given 0; valid in [1, 1073741824]")
    refused("a file's value out of bounds", [ckpt, "--config", write("bad.yaml", "serve:\n  port: 70000\n")],
            "bad.yaml: serve.port: given 70000; valid in [0, 65535]")
    refused("an unknown key", [ckpt, "--config", write("typo.yaml", "serve:\n  portt: 1\n")],
            "unknown key 'serve.portt'; did you mean 'serve.port'?")
    refused("another section's key in --set", [ckpt, "--set", "model.n_layer=3"],
            "--set model.n_layer=3: only serve.KEY=VALUE here")
    refused("a malformed body limit", [ckpt, "--max-body", "8X"],
            "--max-body: serve.max_body: given '8X'; valid: bytes, optionally with K, M or G")


run_checked(main, check, work)
