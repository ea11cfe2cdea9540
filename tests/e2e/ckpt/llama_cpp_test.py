#!/usr/bin/env python3
"""The GGUF export loaded by llama.cpp itself (through `llama-cpp-python`): a tiny Llama (tests/e2e/tiny_llama.py)
imported and exported at f32 and q8_0; llama.cpp's logits on the same tokens against meshtrain's (f32: on the
checkpoint; q8_0: on the file imported back, the same dequantized weights) within a tolerance that covers
llama.cpp's f16 KV cache and its 8-bit activations for q8_0 matmuls; llama.cpp's tokenizer, read from the file's
metadata, gives the original tokenizer's ids. Exit 77 (skipped) where llama-cpp-python is not installed: it
compiles llama.cpp, which CI does not do.

    llama_cpp_test.py BIN_DIR LOGITS_DRIVER SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import llama_cpp
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (pip install llama-cpp-python to run it; it compiles llama.cpp)")
    sys.exit(77)

BIN, DRIVER, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
MESHTRAIN = os.path.join(BIN, "meshtrain")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from tiny_llama import make_tiny_llama  # noqa: E402

WORK = tempfile.mkdtemp(prefix="meshtrain_llama_cpp_")
TOKENS = [3, 17, 250, 0, 99, 42, 7, 7, 128, 255, 1, 64]
TOLERANCE = {"f32": 0.01, "q8_0": 0.05}  # max |diff| over the largest |logit|
failures = []


def sh(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print("FAIL:", " ".join(cmd), "\n", r.stdout, r.stderr)
        sys.exit(1)
    return r


def ours(ckpt):
    out = os.path.join(WORK, "logits.safetensors")
    sh(DRIVER, "logits", ckpt, ",".join(map(str, TOKENS)), out)
    return load_file(out)["logits"][0].numpy()


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


hf_dir, _, tok = make_tiny_llama(SRC, WORK)
ck = os.path.join(WORK, "ck")
sh(MESHTRAIN, "import", hf_dir, ck)
for typ in ("f32", "q8_0"):
    path = os.path.join(WORK, f"tiny-{typ}.gguf")
    sh(MESHTRAIN, "export", ck, "--gguf", path, "--type", typ)
    ref_ckpt = ck
    if typ != "f32":
        ref_ckpt = os.path.join(WORK, f"back-{typ}")
        sh(MESHTRAIN, "import", path, ref_ckpt)
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, n_threads=2)
    llm.eval(TOKENS)
    theirs = np.array(llm.scores[: len(TOKENS)], dtype=np.float32)
    want = ours(ref_ckpt)
    rel = float(np.abs(theirs - want).max() / np.abs(want).max())
    check(rel <= TOLERANCE[typ], f"{typ}: llama.cpp's logits = meshtrain's (max |diff| / max |logit| {rel:.2e})")
    if typ == "f32":
        text = "And God said, Let there be light"
        got = llm.tokenize(text.encode(), add_bos=False, special=True)
        check(got == tok(text, add_special_tokens=False)["input_ids"], "llama.cpp's tokenizer from the file's metadata")
    del llm

if failures:
    sys.exit(1)
shutil.rmtree(WORK)
print("llama.cpp: all ok")
