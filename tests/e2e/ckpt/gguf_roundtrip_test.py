#!/usr/bin/env python3
"""GGUF export and import (`meshtrain export --gguf`, `meshtrain import FILE.gguf`), checked against llama.cpp's
own `gguf` Python package and transformers' GGUF loader (which dequantizes with that package):

  export  a tiny Llama (transformers' random model with the KJV-trained Llama-3-style tokenizer and a ChatML
          template, `meshtrain import`ed) at every --type: gguf.GGUFReader reads the file; the llama.* and
          general.* keys, the tokenizer.* keys and the tensor names, shapes and types are what
          convert_hf_to_gguf.py / llama-quantize write for the same model (written out below from the spec);
          transformers loads the f32 file with logits equal to meshtrain's (the q/k permutation right) and
          every other type's with logits equal to meshtrain's on the same file imported back (one
          dequantization); transformers' tokenizer from the file encodes as the original. A wider model
          (d_model 256, 8 layers) gets the K-quants themselves and llama.cpp's use_more_bits layers; a LoRA
          checkpoint exports merged.
  import  export → import: f32 exact, f16/bf16 equal to the weights rounded so, the block types within
          their error; `generate --chat` on the imported model prints what it prints on the original (the
          tokenizer and chat template carried); a file written by gguf.GGUFWriter as a third party would (Q4_1,
          Q5_1, Q8_0, F16 tensors, tied embeddings) imports with logits equal to transformers' on it; one with a
          SentencePiece vocabulary imports its weights with one warning; progress lines both ways.
  errors  a truncated file, a wrong magic, an unsupported tensor type, a non-Llama architecture: exit 2, one
          line naming the file and the fault, no output directory.
Exit 77 (skipped) without torch / transformers / gguf.

    gguf_roundtrip_test.py BIN_DIR LOGITS_DRIVER SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
    import gguf
    from gguf import GGMLQuantizationType as T
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and gguf into the venv)")
    sys.exit(77)

BIN, DRIVER, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
MESHTRAIN = os.path.join(BIN, "meshtrain")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from tiny_llama import CHATML, make_tiny_llama  # noqa: E402

WORK = tempfile.mkdtemp(prefix="meshtrain_gguf_")
TOKENS = [3, 17, 250, 0, 99, 42, 7, 7, 128, 255, 1, 64]
ATOL = 1e-4
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def sh(*cmd, expect=0):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=600)
    if r.returncode != expect:
        print("FAIL:", " ".join(cmd), f"exit {r.returncode}, expected {expect}\n", r.stdout, r.stderr)
        sys.exit(1)
    return r


def ours(ckpt):
    out = os.path.join(WORK, "logits.safetensors")
    sh(DRIVER, "logits", ckpt, ",".join(map(str, TOKENS)), out)
    return load_file(out)["logits"]


def theirs_gguf(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                              dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits.float()


def max_diff(a, b):
    return float((a - b).abs().max()) if a.shape == b.shape else float("inf")


def ckpt_tensors(ckpt):
    """The model tensors of an imported checkpoint (one rank file: `meshtrain import` writes one process)."""
    step = os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())
    out = {}
    for f in sorted(os.listdir(step)):
        if f.endswith(".safetensors"):
            out.update({k[6:]: v for k, v in load_file(os.path.join(step, f)).items() if k.startswith("model.")})
    return out


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fit(t, row):
    """llama-quantize's fallback for rows its blocks do not tile (gguf_export_type.h)."""
    block = gguf.GGML_QUANT_SIZES[t][0]
    if row % block == 0:
        return t
    return fit({T.Q4_K: T.Q5_0, T.Q6_K: T.Q8_0}.get(t, T.F16), row) if t in (T.Q4_K, T.Q6_K) else T.F16


def expected_tensors(cfg, typ):
    """name → (ggml shape, type) as convert_hf_to_gguf.py (f32/f16/bf16/q8_0) and llama-quantize (q4_0,
    q4_k_m) write a LlamaForCausalLM of these dimensions."""
    d, f, v, L = cfg["d"], cfg["ff"], cfg["vocab"], cfg["layers"]
    kv = cfg["kv_heads"] * d // cfg["heads"]
    base = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_k_m": T.Q4_K}[typ]

    def two_d(name, layer=None):
        t = base
        if typ in ("q4_0", "q4_k_m") and name == "output.weight":
            t = T.Q6_K
        if typ == "q4_k_m" and layer is not None and name.split(".")[2] in ("attn_v", "ffn_down") \
                and use_more_bits(layer, L):
            t = T.Q6_K
        return t

    want = {"token_embd.weight": ([d, v], None), "output_norm.weight": ([d], None), "output.weight": ([d, v], None)}
    for i in range(L):
        p = f"blk.{i}."
        want.update({p + "attn_norm.weight": ([d], i), p + "attn_q.weight": ([d, d], i), p + "attn_k.weight": ([d, kv], i),
                     p + "attn_v.weight": ([d, kv], i), p + "attn_output.weight": ([d, d], i),
                     p + "ffn_norm.weight": ([d], i), p + "ffn_gate.weight": ([d, f], i), p + "ffn_up.weight": ([d, f], i),
                     p + "ffn_down.weight": ([f, d], i)})
    return {n: (s, T.F32 if len(s) == 1 else fit(two_d(n, layer), s[0])) for n, (s, layer) in want.items()}


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


def check_file(path, cfg, typ, tok):
    r = gguf.GGUFReader(path)
    hd = cfg["d"] // cfg["heads"]
    want = {"general.architecture": "llama", "llama.context_length": cfg["ctx"], "llama.embedding_length": cfg["d"],
            "llama.block_count": cfg["layers"], "llama.feed_forward_length": cfg["ff"],
            "llama.attention.head_count": cfg["heads"], "llama.attention.head_count_kv": cfg["kv_heads"],
            "llama.rope.freq_base": 10000.0, "llama.attention.layer_norm_rms_epsilon": np.float32(1e-5).item(),
            "llama.vocab_size": cfg["vocab"], "llama.rope.dimension_count": hd, "llama.attention.key_length": hd,
            "llama.attention.value_length": hd, "general.quantization_version": 2,
            "general.file_type": {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_k_m": 15}[typ],
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
            "tokenizer.ggml.bos_token_id": tok.convert_tokens_to_ids("<|begin_of_text|>"),
            "tokenizer.ggml.eos_token_id": tok.convert_tokens_to_ids("<|eot_id|>"), "tokenizer.chat_template": CHATML}
    bad = {k: (field(r, k) if k in r.fields else None, v) for k, v in want.items()
           if k not in r.fields or field(r, k) != v}
    check(not bad, f"{typ}: architecture and tokenizer keys as convert_hf_to_gguf.py writes them{'' if not bad else ': ' + str(bad)}")
    vocab = tok.get_vocab()
    by_id = [None] * cfg["vocab"]
    for t, i in vocab.items():
        by_id[i] = t
    by_id = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(by_id)]
    check(field(r, "tokenizer.ggml.tokens") == by_id, f"{typ}: tokenizer.ggml.tokens is the vocabulary by id")
    tj = json.loads(tok.backend_tokenizer.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    check(field(r, "tokenizer.ggml.merges") == merges, f"{typ}: tokenizer.ggml.merges in rank order")
    added = {a["id"]: 3 if a["special"] else 4 for a in tj["added_tokens"]}  # control, user-defined
    types = field(r, "tokenizer.ggml.token_type")
    check(types == [added.get(i, 1) if i < len(vocab) else 5 for i in range(cfg["vocab"])],
          f"{typ}: token types: control for special added tokens, user-defined for the others, normal for the rest")
    got = {t.name: (t.shape.tolist(), T(t.tensor_type)) for t in r.tensors}
    exp = expected_tensors(cfg, typ)
    diff = {n: (got.get(n), exp.get(n)) for n in set(got) | set(exp) if got.get(n) != exp.get(n)}
    check(not diff, f"{typ}: {len(got)} tensors named, shaped and typed as llama.cpp's"
                    f"{'' if not diff else ': ' + str(sorted(diff.items())[:4])}")


# The model: transformers' tiny random Llama with its tokenizer, imported as a meshtrain checkpoint.
hf_dir, hf_model, tok = make_tiny_llama(SRC, WORK)
ck = os.path.join(WORK, "ck")
sh(MESHTRAIN, "import", hf_dir, ck)
V = hf_model.config.vocab_size
CFG = {"d": 64, "ff": 128, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": V, "ctx": 128}
original = ckpt_tensors(ck)
ref = ours(ck)

ROUNDING = {"f16": torch.float16, "bf16": torch.bfloat16}
ERROR = {"q8_0": 0.01, "q4_0": 0.15, "q4_k_m": 0.15}  # relative RMS error per tensor
for typ in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"):
    path = os.path.join(WORK, f"tiny-{typ}.gguf")
    out = sh(MESHTRAIN, "export", ck, "--gguf", path, "--type", typ).stdout
    check(os.path.exists(path) and not os.path.exists(path + ".tmp"), f"{typ}: {out.strip()}")
    check_file(path, CFG, typ, tok)
    back = os.path.join(WORK, f"back-{typ}")
    sh(MESHTRAIN, "import", path, back)
    got = ckpt_tensors(back)
    if typ == "f32":
        ok = all(torch.equal(got[n], original[n]) for n in original) and set(got) == set(original)
        check(ok, "f32: export → import gives every tensor back exactly")
        d = max_diff(theirs_gguf(path), ref)
        check(d <= ATOL, f"f32: transformers on the GGUF file = meshtrain on the checkpoint (max |diff| {d:.2e})")
    elif typ in ROUNDING:
        ok = all(torch.equal(got[n], original[n].to(ROUNDING[typ]).float()) for n in original if got[n].dim() == 2)
        ok = ok and all(torch.equal(got[n], original[n]) for n in original if got[n].dim() == 1)
        check(ok, f"{typ}: export → import gives the weights rounded to {typ} exactly (norms in f32 exactly)")
    else:
        worst = max(float((got[n] - original[n]).norm() / original[n].norm()) for n in original if got[n].dim() == 2)
        check(worst <= ERROR[typ], f"{typ}: export → import within error (worst relative RMS error {worst:.3f})")
    if typ != "f32":
        d = max_diff(theirs_gguf(path), ours(back))
        check(d <= ATOL, f"{typ}: transformers on the file = meshtrain on it imported (max |diff| {d:.2e})")

# The tokenizer: transformers' from the exported file, and the files import wrote beside the checkpoint.
text = "And God said, Let there be light: and there was light. 中文 😀"
gtok = transformers.AutoTokenizer.from_pretrained(WORK, gguf_file="tiny-f16.gguf")
check(gtok(text)["input_ids"] == tok(text)["input_ids"], "tokenizer: transformers' from the GGUF file encodes as the original")
back = os.path.join(WORK, "back-f32")
itok = transformers.PreTrainedTokenizerFast.from_pretrained(back)
check(itok(text)["input_ids"] == tok(text)["input_ids"] and itok.chat_template == CHATML,
      "tokenizer: the imported tokenizer.json encodes as the original; tokenizer_config.json has the chat template")
greedy = ["--prompt", "In the beginning", "--chat", "--temperature", "0", "--tokens", "12"]
a, b = sh(MESHTRAIN, "generate", ck, *greedy).stdout, sh(MESHTRAIN, "generate", back, *greedy).stdout
check(a == b and a.strip(), f"generate --chat on the GGUF-imported model prints what the original prints ({a.strip()!r})")

# A wider model: the K-quants themselves (rows of 256) and use_more_bits over 8 layers.
wide = os.path.join(WORK, "wide")
sh(DRIVER, "init", wide, "3", "model.family=llama", f"model.vocab_size={V}", "model.n_layer=8", "model.n_head=4",
   "model.n_kv_head=2", "model.d_model=256", "model.d_ff=512", "model.max_seq_len=64", "model.rope_theta=10000",
   "model.norm_eps=1e-5", "model.tie_embeddings=false",
   f"model.bos_token_id={tok.convert_tokens_to_ids('<|begin_of_text|>')}",
   f"model.eos_token_id={tok.convert_tokens_to_ids('<|eot_id|>')}")
WIDE = {"d": 256, "ff": 512, "layers": 8, "heads": 4, "kv_heads": 2, "vocab": V, "ctx": 64}
for typ in ("q4_k_m", "q4_0"):
    path = os.path.join(WORK, f"wide-{typ}.gguf")
    sh(MESHTRAIN, "export", wide, "--gguf", path, "--type", typ, "--tokenizer", hf_dir)
    check_file(path, WIDE, typ, tok)
    back = os.path.join(WORK, f"wide-back-{typ}")
    sh(MESHTRAIN, "import", path, back)
    d = max_diff(theirs_gguf(path), ours(back))
    check(d <= ATOL, f"wide {typ}: transformers on the file = meshtrain on it imported (max |diff| {d:.2e})")


# A LoRA checkpoint exports merged (W + alpha/r · B A), here with tied embeddings (token_embd is the head):
# transformers on its f32 file = meshtrain on the checkpoint.
lora = os.path.join(WORK, "lora")
sh(DRIVER, "init", lora, "5", "model.family=llama", f"model.vocab_size={V}", "model.n_layer=2", "model.n_head=4",
   "model.n_kv_head=2", "model.d_model=64", "model.d_ff=128", "model.max_seq_len=64", "model.rope_theta=10000",
   "model.norm_eps=1e-5", "model.tie_embeddings=true", "model.lora_rank=4", "model.lora_alpha=8")
path = os.path.join(WORK, "lora-f32.gguf")
sh(MESHTRAIN, "export", lora, "--gguf", path, "--type", "f32", "--tokenizer", hf_dir)
n = len(gguf.GGUFReader(path).tensors)
d = max_diff(theirs_gguf(path), ours(lora))
check(d <= ATOL and n == 20, f"LoRA checkpoint (tied) exported merged: {n} tensors, no adapters, no output.weight; "
                             f"transformers' logits = meshtrain's "
                             f"(max |diff| {d:.2e})")


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# A third party's file: gguf.GGUFWriter, as convert_hf_to_gguf.py writes, tied embeddings, mixed tensor types.
def third_party(path, arch="llama", tokenizer_model="gpt2"):
    c = hf_model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(10000.0)  # make_tiny_llama's rope_theta
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])])
    tj = json.loads(tok.backend_tokenizer.to_str())
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    sd = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(c.num_hidden_layers):
        for hf, g in (("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                      ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                      ("post_attention_layernorm", "ffn_norm"), ("mlp.gate_proj", "ffn_gate"),
                      ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{g}.weight"
    types = [T.Q4_1, T.Q5_1, T.Q8_0, T.F16, T.BF16, T.Q5_0]
    for k, (hf, g) in enumerate(names.items()):
        x = sd[hf]
        if g.endswith("attn_q.weight"):
            x = permute(x, c.num_attention_heads)
        if g.endswith("attn_k.weight"):
            x = permute(x, c.num_key_value_heads)
        if x.ndim == 1:
            w.add_tensor(g, x)
            continue
        t = types[k % len(types)]
        data = x.astype(np.float16) if t == T.F16 else gguf.quants.quantize(x, t)
        w.add_tensor(g, data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


tp = os.path.join(WORK, "third-party.gguf")
third_party(tp)
out = os.path.join(WORK, "third-party-ck")
sh(MESHTRAIN, "import", tp, out)
d = max_diff(theirs_gguf(tp), ours(out))
check(d <= ATOL, f"a gguf.GGUFWriter file (Q4_1, Q5_1, Q8_0, F16, BF16, Q5_0; tied) imports: logits = transformers' "
                 f"(max |diff| {d:.2e})")

# A SentencePiece vocabulary (Llama 2, Mistral files): the weights import, the tokenizer is not carried, one warning.
spm = os.path.join(WORK, "spm.gguf")
third_party(spm, tokenizer_model="llama")
out = os.path.join(WORK, "spm-ck")
r = sh(MESHTRAIN, "import", spm, out)
warned = [ln for ln in r.stderr.splitlines() if "tokenizer is not carried" in ln]
check(len(warned) == 1 and spm in warned[0] and "tokenizer.ggml.model 'llama'" in warned[0]
      and not os.path.exists(os.path.join(out, "tokenizer.json")) and max_diff(theirs_gguf(spm), ours(out)) <= ATOL,
      f"a SentencePiece file imports its weights with one warning: {warned}")

# Progress lines (thresholds lowered to 0 through the environment, as tests/e2e/ckpt/load_progress_test.py does).
env = dict(os.environ, MESHTRAIN_PROGRESS_AFTER_S="0", MESHTRAIN_PROGRESS_EVERY_S="0")
r = subprocess.run([MESHTRAIN, "export", wide, "--gguf", os.path.join(WORK, "progress.gguf"), "--type", "q8_0",
                    "--tokenizer", hf_dir], capture_output=True, text=True, env=env, timeout=600)
r2 = subprocess.run([MESHTRAIN, "import", os.path.join(WORK, "progress.gguf"), os.path.join(WORK, "progress-ck")],
                    capture_output=True, text=True, env=env, timeout=600)
lines = r.stdout + r.stderr + r2.stdout + r2.stderr
check(r.returncode == 0 and r2.returncode == 0 and "export: quantize + write" in lines and "import: dequantize" in lines,
      "progress lines: export: quantize + write, import: dequantize")


# Bad inputs: exit 2, one line naming the file and the fault, nothing written.
def refused(name, path, expect):
    dest = os.path.join(WORK, "refused-" + name)
    r = sh(MESHTRAIN, "import", path, dest, expect=2)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    check(len(lines) == 1 and path in lines[0] and expect in lines[0] and not os.path.exists(dest),
          f"{name}: {lines}")


good = os.path.join(WORK, "tiny-q8_0.gguf")
with open(good, "rb") as f:
    blob = f.read()
for name, data in (("truncated", blob[: len(blob) // 2]), ("header_cut", blob[:100]), ("magic", b"GGML" + blob[4:])):
    p = os.path.join(WORK, name + ".gguf")
    with open(p, "wb") as f:
        f.write(data)
    refused(name, p, {"truncated": "truncated GGUF file", "header_cut": "truncated GGUF file",
                      "magic": "not a GGUF file"}[name])
odd = os.path.join(WORK, "iq4.gguf")


def raw_odd_type(path):
    """A file with one IQ4_NL tensor (raw bytes: the package reads but does not write that type)."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 18), dtype=np.uint8), raw_dtype=T.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


raw_odd_type(odd)
refused("unsupported_type", odd, f"tensor 'token_embd.weight' has ggml type {int(T.IQ4_NL)} (IQ4_NL), which "
        "meshtrain cannot dequantize (valid: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)")
qwen = os.path.join(WORK, "qwen.gguf")
third_party(qwen, arch="qwen2")
refused("architecture", qwen, "general.architecture 'qwen2' is not supported (valid: llama)")

r = sh(MESHTRAIN, "export", ck, "--gguf", os.path.join(WORK, "x.gguf"), "--type", "q3_k", expect=2)
check("--type: given 'q3_k'; valid: f32, f16, bf16, q8_0, q4_0, q4_k_m" in r.stderr, f"export --type q3_k: {r.stderr.strip()}")
r = sh(MESHTRAIN, "export", ck, "--format", "hf", os.path.join(WORK, "hfx"), "--type", "q8_0", expect=2)
check("--type and --tokenizer go with --gguf OUT.gguf" in r.stderr and not os.path.exists(os.path.join(WORK, "hfx")),
      f"export --format hf --type: {r.stderr.strip()}")
r = sh(MESHTRAIN, "export", wide, "--gguf", os.path.join(WORK, "y.gguf"), expect=2)
check("no tokenizer.json beside" in r.stderr and "pass --tokenizer FILE_OR_DIR" in r.stderr,
      f"export --gguf of a checkpoint without a tokenizer: {r.stderr.strip()}")
gpt2 = os.path.join(WORK, "gpt2")
sh(DRIVER, "init", gpt2, "1", "model.family=gpt2", "model.vocab_size=256", "model.n_layer=1", "model.n_head=2",
   "model.d_model=32", "model.max_seq_len=16")
r = sh(MESHTRAIN, "export", gpt2, "--gguf", os.path.join(WORK, "y.gguf"), "--tokenizer", hf_dir, expect=2)
check("cannot be exported as GGUF (valid: llama" in r.stderr, f"export --gguf of a GPT-2: {r.stderr.strip()}")
r = sh(MESHTRAIN, "export", wide.replace("wide", "nowhere"), "--gguf", os.path.join(WORK, "y.gguf"), expect=2)
check(not os.path.exists(os.path.join(WORK, "y.gguf")), f"export of a missing checkpoint: {r.stderr.strip()}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
shutil.rmtree(WORK)
print("gguf round trip: all ok")
