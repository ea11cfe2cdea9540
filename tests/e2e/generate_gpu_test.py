#!/usr/bin/env python3
"""`meshtrain generate --input` on a GPU (docs/serving.md "Offline generation"): the KV cache sized as the server
sizes it, from the serve.* keys, on a tiny random Llama (tests/e2e/tiny_llama.py) in bf16:
  - by default from serve.gpu_memory_fraction of the memory the weights leave: the line on stderr says so, and the
    cache is far larger than the CPU's default 256 blocks;
  - a smaller fraction gives fewer blocks; serve.blocks given is taken as given (the line names it);
  - the greedy tokens are the same whichever cache holds them (no preemption in either), every line answered;
  - serve.blocks past what the device holds is refused in one line naming how many fit, exit 2, no output.
Exit 77 (skipped) without an NVIDIA GPU or without torch / transformers.
Usage: generate_gpu_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked, skip_without_gpu  # noqa: E402
skip_without_gpu()
try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and tokenizers into the venv)")
    sys.exit(77)
BIN, SRC = sys.argv[1], sys.argv[2]
from tiny_llama import make_tiny_llama  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_generate_gpu_")
check = Checks()
KV_LINE = re.compile(r"meshtrain generate: KV cache: (\d+) blocks of 16 tokens \(\d+ tokens\), [\d.]+ [MG]iB, "
                     r"from (.*)")


def generate(ckpt, inp, out, *extra):
    if os.path.exists(out):
        os.remove(out)
    return subprocess.run([MESHTRAIN, "generate", ckpt, "--input", inp, "--output", out, "--device", "cuda",
                           "--dtype", "bf16", "--temperature", "0", "--max-tokens", "12", *extra],
                          capture_output=True, text=True, timeout=300)


def kv_line(stderr):
    m = KV_LINE.search(stderr)
    return (int(m.group(1)), m.group(2)) if m else (0, "")


def main():
    hf_dir, _, _ = make_tiny_llama(SRC, work)
    ckpt = os.path.join(work, "imported")
    subprocess.run([MESHTRAIN, "import", hf_dir, ckpt], check=True, capture_output=True, timeout=300)
    inp, out = os.path.join(work, "prompts.jsonl"), os.path.join(work, "out.jsonl")
    with open(inp, "w") as f:
        for p in ["And God said, Let there be light", "In the beginning", "And Moses went up", "The LORD is my"]:
            f.write(json.dumps({"prompt": p}) + "\n")

    runs = {}
    for name, extra in (("default", []), ("fraction 0.3", ["--gpu-memory-fraction", "0.3"]),
                        ("64 blocks", ["--blocks", "64"])):
        r = generate(ckpt, inp, out, *extra)
        lines = [json.loads(x) for x in open(out)] if r.returncode == 0 and os.path.exists(out) else []
        runs[name] = (kv_line(r.stderr), [x.get("token_ids") for x in lines])
        check(r.returncode == 0 and len(lines) == 4, f"{name}: exit 0, four lines (exit {r.returncode}: "
              f"{r.stderr[-1500:]})")
    (blocks, source), tokens = runs["default"]
    check(blocks > 256 and source.startswith("serve.gpu_memory_fraction 0.9 of ")
          and "free after the weights" in source,
          f"the default cache is sized from serve.gpu_memory_fraction ({blocks} blocks, from {source!r})")
    (low, low_source), low_tokens = runs["fraction 0.3"]
    check(0 < low < blocks and low_source.startswith("serve.gpu_memory_fraction 0.3 of "),
          f"a smaller fraction gives fewer blocks ({low} against {blocks}, from {low_source!r})")
    (given, given_source), given_tokens = runs["64 blocks"]
    check(given == 64 and given_source == "serve.blocks", f"serve.blocks is taken as given ({given}, {given_source!r})")
    check(tokens and all(t for t in tokens) and tokens == low_tokens == given_tokens,
          f"the same greedy tokens whichever cache ({tokens}, {low_tokens}, {given_tokens})")

    r = generate(ckpt, inp, out, "--blocks", str(1 << 29))
    err = r.stderr.strip().splitlines()
    check(r.returncode == 2 and err and "serve.blocks 536870912" in err[-1] and "blocks fit" in err[-1]
          and not os.path.exists(out), f"too many blocks refused in one line, no output (exit {r.returncode}: {err})")


run_checked(main, check, work)
