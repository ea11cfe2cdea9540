#!/usr/bin/env python3
"""`meshtrain generate CKPT --input prompts.jsonl --output out.jsonl`: a file of prompts through the serving engine.

On a tiny random Llama with a tokenizer and chat template (tests/e2e/tiny_llama.py), fp32 on the CPU, over a KV
cache small enough that the batch preempts:
  - every line's greedy token ids and text equal transformers' greedy generate on the same prompt (text, token
    ids, a chat through the template), each line's own max_tokens respected;
  - batched equals unbatched: each prompt alone in a file of its own gives the same tokens;
  - one output line per input line, in input order (`index`), `id` echoed as given (string, number, object) and
    absent where the line has none, `usage` counting the tokens; blank lines skipped;
  - a stop string from the middle of a greedy text cuts it there (finish_reason "stop", token_ids a prefix);
  - without --max-tokens, the default is lowered to what fits the cache (a given one that does not fit is refused);
  - the progress line on stderr counts every request;
  - bf16 runs too (exit 0, every line answered), and so do FP8 block weights (--quantization fp8, the CPU's
    composite maths); the single-prompt mode takes --dtype;
  - mistakes: a line that is not JSON, without prompt or messages, max_tokens 0, a token id outside the
    vocabulary, a prompt too long for the cache (from the flags or --set), a chat for a model without template;
    --input without --output, --blocks, --cuda-graphs or --top-p without --input, --prompt with it, an --output in
    a missing directory, --device cuda:99 (either mode), a missing input file, a serve flag out of bounds, another
    section's key in --set: exit 2 with one line naming the file and line (or the flag), and no output file
    written (an old one left as it was);
  - the engine's settings are the serve.* keys: the KV cache line names its source; a config's serve section gives
    what the flags give; with none, the CPU's default cache.

    generate_batch_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers / tokenizers).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and tokenizers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama import chat_ids, greedy_ids, make_tiny_llama  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_generate_batch_")
NEW_TOKENS = 16
PROMPTS = ["And God said, Let there be light", "In the beginning", "And Moses went up", "The LORD is my",
           "Then Joseph said", "And it came to pass"]
# 12 blocks of 4 tokens: four running requests of ~10 prompt and 16 new tokens need ~26 each, so the batch preempts.
CACHE = ["--blocks", "12", "--block-size", "4", "--max-running", "4", "--max-step-tokens", "32"]
failures = []


def check(name, cond, detail):
    if cond:
        print(f"ok: {name}")
    else:
        failures.append(f"{name}: {detail}")


def write_lines(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def generate(inp, out, *extra, env=None, max_tokens=("--max-tokens", str(NEW_TOKENS))):
    return subprocess.run([MESHTRAIN, "generate", ckpt, "--input", inp, "--output", out, "--temperature", "0",
                           *max_tokens, *CACHE, *extra], capture_output=True, text=True, timeout=300, env=env)


def read_out(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


hf_dir, model, tok = make_tiny_llama(SRC, WORK)
ckpt = os.path.join(WORK, "imported")
subprocess.run([MESHTRAIN, "import", hf_dir, ckpt], check=True, capture_output=True, timeout=300)
eos = model.config.eos_token_id

# The lines and what transformers gives for each: (input line, prompt ids, max new tokens).
messages = [{"role": "user", "content": PROMPTS[1]}]
cases = [({"id": "first", "prompt": PROMPTS[0]}, tok(PROMPTS[0])["input_ids"], NEW_TOKENS),
         ({"id": 7, "prompt": tok(PROMPTS[2])["input_ids"]}, tok(PROMPTS[2])["input_ids"], NEW_TOKENS),
         ({"messages": messages, "id": {"task": "chat"}}, chat_ids(tok, messages), NEW_TOKENS),
         ({"prompt": PROMPTS[3], "max_tokens": 5}, tok(PROMPTS[3])["input_ids"], 5)]
cases += [({"prompt": p, "id": f"p{i}"}, tok(p)["input_ids"], NEW_TOKENS) for i, p in enumerate(PROMPTS[4:])]
want = [greedy_ids(model, ids, n) for _, ids, n in cases]

inp, out = os.path.join(WORK, "prompts.jsonl"), os.path.join(WORK, "out.jsonl")
write_lines(inp, [cases[0][0], cases[1][0], "", cases[2][0]] + [c[0] for c in cases[3:]])  # a blank line skipped
env = dict(os.environ, MESHTRAIN_PROGRESS_EVERY_S="0")
r = generate(inp, out, env=env)
check("exit 0", r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
got = read_out(out) if r.returncode == 0 else []
check("one line per input line", len(got) == len(cases), f"{len(got)} lines, want {len(cases)}")
for i, ((line, ids, n), w) in enumerate(zip(cases, want)):
    g = got[i] if i < len(got) else {}
    reason = "stop" if w and w[-1] == eos else "length"
    check(f"line {i}: greedy ids as transformers", g.get("token_ids") == w, f"{g}, transformers {w}")
    check(f"line {i}: text", g.get("text") == tok.decode(w, skip_special_tokens=True), f"{g}")
    check(f"line {i}: index, id, finish_reason, usage",
          g.get("index") == i and g.get("id", None) == line.get("id", None) and ("id" in g) == ("id" in line)
          and g.get("finish_reason") == reason
          and g.get("usage") == {"prompt_tokens": len(ids), "completion_tokens": len(w),
                                 "total_tokens": len(ids) + len(w)}, f"{g}")
check("the KV cache line", "meshtrain generate: KV cache: 12 blocks of 4 tokens (48 tokens)" in r.stderr
      and ", from serve.blocks\n" in r.stderr, r.stderr)
progress = [line for line in r.stderr.splitlines() if line.startswith("generate: ")]
check("progress lines", progress and progress[-1].startswith(f"generate: {len(cases)}/{len(cases)} requests")
      and "done" in progress[-1] and len(progress) >= 2, r.stderr)

# Batched = unbatched: each line alone in a file of its own.
for i in (0, 2, 5):
    alone_in, alone_out = os.path.join(WORK, f"alone{i}.jsonl"), os.path.join(WORK, f"alone{i}.out.jsonl")
    write_lines(alone_in, [cases[i][0]])
    r = generate(alone_in, alone_out)
    alone = read_out(alone_out) if r.returncode == 0 else [{}]
    check(f"line {i} alone = batched", got and alone[0].get("token_ids") == got[i]["token_ids"]
          and alone[0].get("index") == 0, f"{r.stderr} {alone}")

# A stop string from the middle of line 0's greedy text; one that never occurs changes nothing.
text0 = tok.decode(want[0], skip_special_tokens=True)
stop = text0[len(text0) // 2:len(text0) // 2 + 3]
write_lines(inp, [{"prompt": PROMPTS[0], "stop": ["never!", stop]}, {"prompt": PROMPTS[0], "stop": "never!"}])
r = generate(inp, out)
got = read_out(out) if r.returncode == 0 else [{}, {}]
ids = got[0].get("token_ids", [])
check("stop string", len(text0) > 6 and got[0].get("text") == text0[:text0.index(stop)]
      and got[0].get("finish_reason") == "stop" and 0 < len(ids) < len(want[0]) and ids == want[0][:len(ids)]
      and stop in tok.decode(ids) and stop not in tok.decode(ids[:-1]), f"{r.stderr} {got[0]}, stop {stop!r}")
check("stop string not met", got[1].get("text") == text0 and got[1].get("token_ids") == want[0], f"{got[1]}")

# Without --max-tokens the default (200) is lowered to what fits: here the cache's 48 positions.
write_lines(inp, [{"prompt": PROMPTS[0]}])
r = generate(inp, out, max_tokens=())
ids = tok(PROMPTS[0])["input_ids"]
w = greedy_ids(model, ids, 48 - len(ids) + 1)
got = read_out(out) if r.returncode == 0 else [{}]
check("default max_tokens fits the cache", got[0].get("token_ids") == w, f"{r.stderr} {got[0]}, want {w}")

# The engine's settings from a config's serve section instead of the flags: the same tokens, the same cache. Then
# none at all: the CPU's default cache (256 blocks of 16), named as such.
serve_yaml = os.path.join(WORK, "serve.yaml")
with open(serve_yaml, "w") as f:
    f.write("serve:\n  blocks: 12\n  block_size: 4\n  max_running: 4\n  max_step_tokens: 32\n")
for name, settings in (("--config", ["--config", serve_yaml]), ("no settings", [])):
    r = subprocess.run([MESHTRAIN, "generate", ckpt, "--input", inp, "--output", out, "--temperature", "0",
                        "--max-tokens", "4", *settings], capture_output=True, text=True, timeout=300)
    got = read_out(out) if r.returncode == 0 else [{}]
    w = greedy_ids(model, ids, 4)
    cache = ("12 blocks of 4 tokens (48 tokens)", "from serve.blocks\n") if settings else \
        ("256 blocks of 16 tokens (4096 tokens)", "from serve.blocks' default on the CPU (256)")
    check(f"settings from {name}", got[0].get("token_ids") == w and all(c in r.stderr for c in cache),
          f"{r.stderr} {got[0]}, want {w} and {cache}")

# bf16 on the CPU: runs, every line answered.
write_lines(inp, [c[0] for c in cases])
r = generate(inp, out, "--dtype", "bf16")
check("bf16", r.returncode == 0 and len(read_out(out)) == len(cases), f"exit {r.returncode}\n{r.stderr}")
# FP8 block weights on the CPU (the composite definition): runs, every line answered, the weights' line printed.
r = generate(inp, out, "--quantization", "fp8")
check("fp8 weights", r.returncode == 0 and len(read_out(out)) == len(cases) and "FP8 weights: " in r.stderr,
      f"exit {r.returncode}\n{r.stderr}")

# The single-prompt mode takes --device and --dtype too.
r = subprocess.run([MESHTRAIN, "generate", ckpt, "--prompt", PROMPTS[0], "--temperature", "0", "--tokens", "4",
                    "--dtype", "bf16"], capture_output=True, text=True, timeout=300)
check("single prompt in bf16", r.returncode == 0 and r.stdout.startswith(PROMPTS[0]), f"exit {r.returncode} {r.stderr}")

# Mistakes: exit 2, one line naming the file and line (or the flag), no output written (an old one kept).
def refused(name, lines, want_text, *extra, args=None):
    bad_in, bad_out = os.path.join(WORK, "bad.jsonl"), os.path.join(WORK, "bad.out.jsonl")
    write_lines(bad_in, lines)
    if os.path.exists(bad_out):
        os.remove(bad_out)
    cmd = args or [MESHTRAIN, "generate", ckpt, "--input", bad_in, "--output", bad_out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    err = r.stderr.strip()
    check(name, r.returncode == 2 and len(err.splitlines()) == 1 and want_text.replace("BAD", bad_in) in err
          and not os.path.exists(bad_out) and not os.path.exists(bad_out + ".tmp"),
          f"exit {r.returncode}, stderr {err!r}, want {want_text!r}")


good = {"prompt": "x"}
refused("not JSON", [good, "{not json"], "BAD:2: not valid JSON")
refused("no prompt", [good, good, {"max_tokens": 3}], "BAD:3: has neither 'prompt'")
refused("max_tokens 0", [{"prompt": "x", "max_tokens": 0}], "BAD:1: 'max_tokens' is 0")
refused("wrong type", [good, {"prompt": "x", "temperature": "hot"}], "BAD:2: 'temperature' must be a number")
refused("token outside the vocabulary", [good, {"prompt": [1, 10 ** 6]}], "BAD:2: 'prompt': token id 1000000")
refused("too long for the cache", [{"prompt": list(range(1, 20)), "max_tokens": 4}],
        "BAD:1: the prompt (19 tokens) and max_tokens (4) need 22 KV cache positions, the cache holds 16 "
        "(serve.blocks × serve.block_size)", "--blocks", "4", "--block-size", "4")
refused("too long for the cache, from --set", [{"prompt": list(range(1, 20)), "max_tokens": 4}],
        "BAD:1: the prompt (19 tokens) and max_tokens (4) need 22 KV cache positions, the cache holds 16", "--set",
        "serve.blocks=4", "--set", "serve.block_size=4")
refused("a serve flag out of bounds", [good], "--max-running: serve.max_running: given 0; valid in [1, ",
        "--max-running", "0")
refused("another section's key in --set", [good], "--set model.n_layer=3: only serve.KEY=VALUE here", "--set",
        "model.n_layer=3")
refused("--cuda-graphs without --input", [good], "--cuda-graphs: only with --input",
        args=[MESHTRAIN, "generate", ckpt, "--prompt", "x", "--cuda-graphs", "off"])
refused("too long for the model", [good, {"prompt": "x", "max_tokens": 500}], "model.max_seq_len is 128")
refused("no --output", [good], "--input: give --output",
        args=[MESHTRAIN, "generate", ckpt, "--input", os.path.join(WORK, "bad.jsonl")])
refused("--blocks without --input", [good], "--blocks: only with --input",
        args=[MESHTRAIN, "generate", ckpt, "--blocks", "8"])
refused("--output in a missing directory", [good], "--output",
        args=[MESHTRAIN, "generate", ckpt, "--input", os.path.join(WORK, "bad.jsonl"), "--output",
              os.path.join(WORK, "missing", "out.jsonl")])
refused("--device cuda:99", [good], "--device cuda:99", "--device", "cuda:99")
refused("single prompt on cuda:99", [good], "--device cuda:99",
        args=[MESHTRAIN, "generate", ckpt, "--prompt", "x", "--device", "cuda:99"])
refused("--top-p without --input", [good], "--top-p: only with --input",
        args=[MESHTRAIN, "generate", ckpt, "--prompt", "x", "--top-p", "0.5"])
refused("--prompt with --input", [good], "--prompt: not with --input", "--prompt", "x")
refused("missing input", [good], "--input", args=[MESHTRAIN, "generate", ckpt, "--input",
                                                  os.path.join(WORK, "none.jsonl"), "--output", out])
# An old output survives a refused run untouched.
with open(out, "w") as f:
    f.write("old\n")
write_lines(os.path.join(WORK, "bad.jsonl"), [good, "[1, 2]"])
r = subprocess.run([MESHTRAIN, "generate", ckpt, "--input", os.path.join(WORK, "bad.jsonl"), "--output", out],
                   capture_output=True, text=True, timeout=300)
check("old output kept", r.returncode == 2 and open(out).read() == "old\n", f"exit {r.returncode} {r.stderr}")

# Without its tokenizer files the model is byte-level: a chat line is refused with the line's number.
byte_ckpt = os.path.join(WORK, "bytes")
shutil.copytree(ckpt, byte_ckpt, symlinks=True)
for root, _, files in os.walk(byte_ckpt):
    for f in files:
        if f.startswith("tokenizer") or f in ("chat_template.jinja", "special_tokens_map.json"):
            os.remove(os.path.join(root, f))
ckpt_saved, ckpt = ckpt, byte_ckpt
shutil.rmtree(hf_dir)  # tokenizer_dirs also looks in the directory a checkpoint was imported from
refused("chat without a template", [good, {"messages": messages}], "BAD:2: 'messages':")
ckpt = ckpt_saved

shutil.rmtree(WORK, ignore_errors=True)
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS")
