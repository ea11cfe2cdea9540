#!/usr/bin/env python3
"""Progress lines of long reads and writes, as a user sees them: `meshtrain import` of a Hugging Face directory
(reading the safetensors, writing the checkpoint) and `meshtrain export` (loading the checkpoint through
load_into, writing the safetensors) print bytes, rate and time left on stderr
once the work has run MESHTRAIN_PROGRESS_AFTER_S (lowered to 0 here, so a tiny model shows them), and a
closing line; with the default threshold the same quick work prints none. The imported weights equal the
file's (the parallel reader's bytes, end to end).
Usage: load_progress_test.py BIN_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

BIN = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="meshtrain_load_progress_")
failures = []


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(f"{what}: {detail}")


def meshtrain(*args, env=None):
    e = dict(os.environ)
    for k in ("MESHTRAIN_PROGRESS_AFTER_S", "MESHTRAIN_PROGRESS_EVERY_S"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([os.path.join(BIN, "meshtrain"), *args], capture_output=True, text=True, env=e, timeout=120)


# A tiny Llama as Hugging Face lays it out: vocab 64, hidden 32, 2 layers, 4 heads, 2 KV heads, MLP 64.
V, D, F, L, H, KV = 64, 32, 64, 2, 4, 2
hd = D // H
rng = np.random.default_rng(0)
tensors = {"model.embed_tokens.weight": rng.standard_normal((V, D), dtype=np.float32),
           "model.norm.weight": rng.standard_normal(D, dtype=np.float32),
           "lm_head.weight": rng.standard_normal((V, D), dtype=np.float32)}
for i in range(L):
    p = f"model.layers.{i}."
    shapes = {"input_layernorm.weight": (D,), "post_attention_layernorm.weight": (D,),
              "self_attn.q_proj.weight": (D, D), "self_attn.k_proj.weight": (KV * hd, D),
              "self_attn.v_proj.weight": (KV * hd, D), "self_attn.o_proj.weight": (D, D),
              "mlp.gate_proj.weight": (F, D), "mlp.up_proj.weight": (F, D), "mlp.down_proj.weight": (D, F)}
    for n, s in shapes.items():
        tensors[p + n] = rng.standard_normal(s, dtype=np.float32)
hf = os.path.join(WORK, "hf")
os.makedirs(hf)
save_file(tensors, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
with open(os.path.join(hf, "config.json"), "w") as f:
    json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V, "hidden_size": D,
               "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
               "num_key_value_heads": KV, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
               "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}, f)

now = {"MESHTRAIN_PROGRESS_AFTER_S": "0", "MESHTRAIN_PROGRESS_EVERY_S": "0"}
r = meshtrain("import", hf, os.path.join(WORK, "quick"))
check("quick import: exit 0", r.returncode == 0, r.stderr)
check("quick import: no progress line", "import: read:" not in r.stderr and "import: write:" not in r.stderr,
      r.stderr)

r = meshtrain("import", hf, os.path.join(WORK, "ckpt"), env=now)
check("import: exit 0", r.returncode == 0, r.stderr)
lines = [l for l in r.stderr.splitlines() if "import: read:" in l]
check("import: progress lines with bytes, rate and a closing line",
      lines and " GB (" in lines[-1] and " GB/s" in lines[-1] and "done in" in lines[-1], r.stderr)
lines = [l for l in r.stderr.splitlines() if "import: write:" in l]
check("import's checkpoint write: progress lines with a closing line", lines and "done in" in lines[-1], r.stderr)

out = os.path.join(WORK, "export")
r = meshtrain("export", os.path.join(WORK, "ckpt"), "--format", "hf", out, env=now)
check("export: exit 0", r.returncode == 0, r.stderr)
lines = [l for l in r.stderr.splitlines() if "load step_00000000:" in l]
check("export's checkpoint load: progress lines with a closing line", lines and "done in" in lines[-1], r.stderr)
lines = [l for l in r.stderr.splitlines() if "export: write:" in l]
check("export's write: progress lines with a closing line", lines and "done in" in lines[-1], r.stderr)
check("export: no temporary file left", not [f for f in os.listdir(out) if f.endswith(".tmp")], os.listdir(out))
back = load_file(os.path.join(out, "model.safetensors"))
check("import → export gives the file's weights back, bit for bit",
      set(back) == set(tensors) and all(np.array_equal(back[k], tensors[k]) for k in tensors),
      sorted(set(back) ^ set(tensors)))

shutil.rmtree(WORK)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("PASS")
