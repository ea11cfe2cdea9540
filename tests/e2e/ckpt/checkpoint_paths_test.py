#!/usr/bin/env python3
"""What a checkpoint's files may point at, as a user meets it through the commands that read checkpoints (tier 4;
tiny GPT-2 checkpoints made by `meshtrain import` of a Hugging Face directory written here, no training).

  import        config.json with transformers' GPT-2 default ids (bos/eos 50256) and vocab_size 256: the import
                warns once per id and writes none (-1); its config.yaml passes `meshtrain config`.
  latest        `latest` naming another run's step directory (relative, absolute) or /etc: `export`, `generate`
                and `eval` exit 2 with one line naming the `latest` file, and export writes nothing.
  shard file    a shard's file in meta.json of /etc/passwd or ../../../../etc/passwd: exit 2, one line naming
                meta.json and the field.
  malformed     meta.json of 5, an array, a string format_version: exit 2, one line naming meta.json and the
                field (never the JSON library's message).
Usage: checkpoint_paths_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # e2e_support
from e2e_support import Checks, prepare_kjv, run_checked  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshtrain = os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_checkpoint_paths_")
check = Checks()
V, D, L, P = 256, 16, 1, 32


def write_safetensors(path, shapes, seed):
    """float32 tensors of the given shapes (small random values), in the safetensors layout."""
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        blob = struct.pack(f"<{n}f", *(rng.uniform(-0.1, 0.1) for _ in range(n)))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def tiny_gpt2(name, seed):
    """A Hugging Face GPT-2 directory as transformers saves GPT2Config(vocab_size=256, …): bos/eos 50256."""
    d = os.path.join(work, name)
    os.makedirs(d)
    shapes = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (P, D),
              "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
    for i in range(L):
        h = f"transformer.h.{i}."
        shapes.update({h + "ln_1.weight": (D,), h + "ln_1.bias": (D,), h + "attn.c_attn.weight": (D, 3 * D),
                       h + "attn.c_attn.bias": (3 * D,), h + "attn.c_proj.weight": (D, D), h + "attn.c_proj.bias": (D,),
                       h + "ln_2.weight": (D,), h + "ln_2.bias": (D,), h + "mlp.c_fc.weight": (D, 4 * D),
                       h + "mlp.c_fc.bias": (4 * D,), h + "mlp.c_proj.weight": (4 * D, D), h + "mlp.c_proj.bias": (D,)})
    write_safetensors(os.path.join(d, "model.safetensors"), shapes, seed)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_embd": D,
                   "n_layer": L, "n_head": 2, "n_positions": P, "bos_token_id": 50256, "eos_token_id": 50256,
                   "activation_function": "gelu_new"}, f)
    return d


def mt(*args):
    return subprocess.run([meshtrain, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", timeout=300)


def one_line(what, r, needles):
    """Exit 2 and one stderr line holding every needle; nothing from a JSON library or a C++ exception's text."""
    lines = [line for line in r.stderr.splitlines() if all(n in line for n in needles)]
    ok = r.returncode == 2 and len(lines) == 1
    ok = ok and "json.exception" not in r.stderr and "basic_string" not in r.stderr
    detail = "" if ok else f"\n{r.stderr[-2000:]}"
    check(ok, f"{what}: exit {r.returncode} (want 2), one line with {needles}{detail}")


def main():
    # import: ids outside the vocabulary dropped with a line each; the written config passes the config check.
    data = prepare_kjv(meshtrain, src, work)
    hf = tiny_gpt2("hf", 1)
    run = os.path.join(work, "run", "checkpoints")
    r = mt("import", hf, run)
    check(r.returncode == 0, f"import: exit {r.returncode}\n{r.stderr[-2000:]}")
    warned = [line for line in r.stderr.splitlines() if "50256 is outside the vocabulary (vocab_size 256)" in line]
    check(len(warned) == 2 and "bos_token_id" in warned[0] and "eos_token_id" in warned[1],
          f"import: one warning per id: {warned}")
    yaml = os.path.join(run, "config.yaml")
    text = open(yaml).read() if os.path.exists(yaml) else ""
    check("50256" not in text, "import: config.yaml holds no id outside the vocabulary")
    r = mt("config", yaml, "--set", f"data.train={data}_train.bin", "--world-size", "1")
    check(r.returncode == 0,
          f"import: `meshtrain config` accepts its config.yaml (exit {r.returncode})\n{r.stderr[-1000:]}")

    # `latest` leading outside its directory: every reader refuses it with one line naming the file.
    other = os.path.join(work, "other_run", "checkpoints")
    check(mt("import", tiny_gpt2("hf_other", 2), other).returncode == 0, "import of the other run")
    latest = os.path.join(run, "latest")
    for target in ("../../other_run/checkpoints/step_00000000", os.path.join(other, "step_00000000"), "/etc"):
        with open(latest, "w") as f:
            f.write(target + "\n")
        needles = [f"{latest}: names '{target}', which is not a complete step directory"]
        out = os.path.join(work, "export_out")
        one_line(f"export, latest → {target}", mt("export", run, "--format", "hf", out), needles)
        check(not os.path.exists(out), f"export, latest → {target}: nothing written")
        one_line(f"generate, latest → {target}", mt("generate", run, "--tokens", "2"), needles)
        one_line(f"eval, latest → {target}", mt("eval", run, "--data", f"{data}_val.bin", "--batches", "1"), needles)
    with open(latest, "w") as f:
        f.write("step_00000000\n")
    check(mt("generate", run, "--tokens", "2").returncode == 0, "generate through a good latest")

    # meta.json's shard paths and malformed documents.
    meta_path = os.path.join(run, "step_00000000", "meta.json")
    good = open(meta_path).read()
    meta = json.loads(good)
    first = sorted(meta["tensors"])[0]

    def with_meta(text):
        with open(meta_path, "w") as f:
            f.write(text)

    for path in ("/etc/passwd", "../../../../etc/passwd"):
        edited = json.loads(good)
        edited["tensors"][first]["shards"][0]["file"] = path
        with_meta(json.dumps(edited))
        field = f"tensors['{first}'].shards[0].file is \"{path}\""
        for cmd in (["generate", run, "--tokens", "2"], ["export", run, "--format", "hf", os.path.join(work, "x")]):
            one_line(f"{cmd[0]}, shard file {path}", mt(*cmd), [meta_path, field, "valid a file name inside"])
    for what, text, field in (("5", "5", "the document is 5 (a number)"),
                              ("an array", "[1, 2]", "the document is [1,2] (an array)"),
                              ("format_version \"2\"", json.dumps({**meta, "format_version": "2"}),
                               "format_version is \"2\" (a string)")):
        with_meta(text)
        one_line(f"generate, meta.json {what}", mt("generate", run, "--tokens", "2"), [meta_path, field])
    with_meta(good)


run_checked(main, check, work)
