#!/usr/bin/env python3
"""Hugging Face interop, checked by logits on the same tokens (fp32, CPU, atol 1e-4):

  export: a random meshtrain model → `meshtrain export --format hf` (forced into several files + index) →
          transformers' AutoModelForCausalLM loads it → its logits equal meshtrain's;
  import: a random tiny model made by transformers, save_pretrained → `meshtrain import` → meshtrain's
          logits (model built from the imported config) equal transformers'.
For Llama (MHA tied, GQA untied; no q/k permutation — meshtrain's RoPE is HF's rotate-half) and GPT-2 (tied,
untied; Conv1D transposes, fused c_attn). Exit 77 (skipped) without transformers/safetensors.

    hf_roundtrip_test.py BIN_DIR LOGITS_DRIVER
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers into the venv)")
    sys.exit(77)

BIN, DRIVER = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="meshtrain_hf_")
TOKENS = [3, 17, 250, 0, 99, 42, 7, 7, 128, 255, 1, 64]
ATOL = 1e-4


def sh(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL:", " ".join(cmd), "\n", r.stdout, r.stderr)
        sys.exit(1)
    return r.stdout


def ours(ckpt):
    out = os.path.join(WORK, "logits.safetensors")
    sh(DRIVER, "logits", ckpt, ",".join(map(str, TOKENS)), out)
    return load_file(out)["logits"]


def theirs(model):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits.float()


def compare(name, a, b):
    err = (a - b).abs().max().item()
    if a.shape != b.shape or err > ATOL:
        print(f"FAIL: {name}: shapes {tuple(a.shape)} vs {tuple(b.shape)}, max |diff| {err:.3g} > {ATOL}")
        sys.exit(1)
    print(f"ok: {name}: logits {tuple(a.shape)} match, max |diff| {err:.2e}")


MESHTRAIN_MODELS = {
    "llama_mha_tied": ["model.family=llama", "model.n_kv_head=4", "model.tie_embeddings=true"],
    "llama_gqa_untied": ["model.family=llama", "model.n_kv_head=2", "model.tie_embeddings=false"],
    "gpt2_tied": ["model.family=gpt2", "model.tie_embeddings=true"],
    "gpt2_untied": ["model.family=gpt2", "model.tie_embeddings=false"],
}
for name, sets in MESHTRAIN_MODELS.items():
    ckpt = os.path.join(WORK, name + "_ckpt")
    sh(DRIVER, "init", ckpt, "7", "model.vocab_size=256", "model.n_layer=2", "model.n_head=4", "model.d_model=64",
       "model.max_seq_len=32", "model.rope_theta=10000", *sets)
    hf_dir = os.path.join(WORK, name + "_hf")
    # 64K per file forces the sharded layout with model.safetensors.index.json.
    sh(os.path.join(BIN, "meshtrain"), "export", ckpt, "--format", "hf", hf_dir, "--max-shard-size", "64K")
    assert os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")), "expected a sharded export"
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    compare(f"export {name} → transformers {type(model).__name__}", ours(ckpt), theirs(model))
    # Single-file export too.
    hf1 = os.path.join(WORK, name + "_hf1")
    sh(os.path.join(BIN, "meshtrain"), "export", ckpt, "--format", "hf", hf1)
    assert os.listdir(hf1) and os.path.exists(os.path.join(hf1, "model.safetensors"))

TOKENS_FILE = os.path.join(WORK, "tokens.bin")
with open(TOKENS_FILE, "wb") as f:
    f.write(bytes(4096))


def check_imported_config(name, hf_cfg, out):
    """OUT/config.yaml holds what the HF model determines (dropout and bos/eos ids too) and the weights as
    init_from, nothing resolved: under 2 ranks dp becomes 2, and --set train.out_dir moves the run directory."""
    yaml_path = os.path.join(out, "config.yaml")
    got = json.loads(sh(os.path.join(BIN, "meshtrain"), "config", yaml_path, "--json", "--world-size", "2",
                        "--set", f"data.train={TOKENS_FILE}", "--set", f"train.out_dir={WORK}/run_{name}"))
    eos = hf_cfg.eos_token_id[0] if isinstance(hf_cfg.eos_token_id, list) else hf_cfg.eos_token_id
    dropout = hf_cfg.attention_dropout if hf_cfg.model_type == "llama" else hf_cfg.resid_pdrop
    none = lambda v: -1 if v is None else v  # meshtrain's "no such token"
    want = {("model", "bos_token_id"): none(hf_cfg.bos_token_id), ("model", "eos_token_id"): none(eos),
            ("model", "dropout"): dropout, ("parallel", "dp"): 2,
            ("checkpoint", "dir"): f"{WORK}/run_{name}/checkpoints",
            ("checkpoint", "init_from"): os.path.abspath(out)}
    for (sec, key), value in want.items():
        if got[sec][key] != value:
            print(f"FAIL: {yaml_path}: {sec}.{key} is {got[sec][key]!r}, expected {value!r}")
            sys.exit(1)
    print(f"ok: {name}: config.yaml has the model's dropout and bos/eos ids, and no resolved layout or paths")


torch.manual_seed(0)
HF_MODELS = {
    "llama_gqa": transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                                          bos_token_id=1, eos_token_id=[2, 3], attention_dropout=0.1),
    "llama_tied": transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                           rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                                           bos_token_id=None, eos_token_id=None),
    "gpt2": transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                    bos_token_id=5, eos_token_id=6, resid_pdrop=0.2),
}
for name, cfg in HF_MODELS.items():
    model = transformers.AutoModelForCausalLM.from_config(cfg).float()
    with torch.no_grad():  # norms and biases away from their 1/0 initialisation
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    hf_dir = os.path.join(WORK, name + "_hfsrc")
    model.save_pretrained(hf_dir)
    out = os.path.join(WORK, name + "_imported")
    sh(os.path.join(BIN, "meshtrain"), "import", hf_dir, out)
    assert os.path.exists(os.path.join(out, "config.yaml")) and os.path.exists(os.path.join(out, "latest"))
    compare(f"transformers {type(model).__name__} → import {name}", ours(out), theirs(model))
    check_imported_config(name, cfg, out)

# Errors a user can meet: one line, exit 2.
bad = os.path.join(WORK, "bad_hf")
os.makedirs(bad)
with open(os.path.join(bad, "config.json"), "w") as f:
    json.dump({"model_type": "mistral"}, f)
r = subprocess.run([os.path.join(BIN, "meshtrain"), "import", bad, os.path.join(WORK, "x")], capture_output=True, text=True)
assert r.returncode == 2 and "model_type 'mistral' is not supported (valid: llama, gpt2)" in r.stderr, r.stderr
r = subprocess.run([os.path.join(BIN, "meshtrain"), "export", WORK, os.path.join(WORK, "y"), "--format", "onnx"],
                   capture_output=True, text=True)
assert r.returncode == 2 and "--format: given 'onnx'; valid hf (the default)" in r.stderr, r.stderr
print("ok: unsupported model_type and an unknown --format are one-line errors")

shutil.rmtree(WORK)
print("hf round trip: all ok")
