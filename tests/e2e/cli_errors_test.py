#!/usr/bin/env python3
"""Bad input through the real binaries: each mistake is one line on stderr naming the file/key/flag and what
is valid, and exit code 2 — from `meshtrain config`, `meshtrain train` and `meshrun` (which validates a config
before any worker starts).
Usage: cli_errors_test.py BIN_DIR SOURCE_DIR
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_cli_")
data = os.path.join(work, "tokens.bin")
with open(data, "wb") as f:
    f.write(bytes(16384))  # raw uint16 tokens: a valid config's one step (8 windows of 257) fits, 31 times


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


good = write("good.yaml", f"data:\n  train: {data}\ntrain:\n  steps: 1\n  device: cpu\n")
cases = [
    # (what, file, extra args, expected fragment of the one line)
    ("unknown key", write("unknown.yaml", f"data:\n  train: {data}\noptimizer:\n  lrr: 1e-3\n"), [],
     "unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?"),
    ("bad value", write("bad.yaml", f"data:\n  train: {data}\nmodel:\n  family: bert\n"), [],
     "bad.yaml:4:11: model.family: given 'bert'; valid gpt2 | llama"),
    ("bad value in --set", good, ["--set", "parallel.pp_schedule=1f1c"],
     "--set parallel.pp_schedule=1f1c: parallel.pp_schedule: given '1f1c'; valid gpipe | 1f1b | interleaved-1f1b | "
     "zb-h1 (did you mean '1f1b'?)"),
    ("wrong type", write("type.yaml", f"data:\n  train: {data}\ntrain:\n  steps: many\n"), [], "train.steps"),
    ("malformed yaml", write("broken.yaml", "data:\n  train: [unclosed\n"), [], "broken.yaml:"),
    ("malformed json", write("broken.json", '{"data": {"train": }}'), [], "broken.json:1:"),
    ("missing data", write("nodata.yaml", "data:\n  train: /nonexistent/shard_*.bin\n"), [],
     "data.train: '/nonexistent/shard_*.bin' matches no file"),
    ("bad override", good, ["--set", "optimizer.lr"], "--set"),
    ("unknown override", good, ["--set", "train.stesp=3"], "did you mean 'train.steps'"),
    ("missing file", os.path.join(work, "absent.yaml"), [], "absent.yaml"),
    ("bad extension", write("cfg.toml", ""), [], "cfg.toml"),
    ("inf in a file", write("inf.yaml", f"data:\n  train: {data}\noptimizer:\n  lr: inf\n"), [],
     "inf.yaml:4:7: optimizer.lr: expected a finite number, got 'inf'"),
    ("nan in --set", good, ["--set", "parallel.bucket_first_mb=nan"],
     "--set parallel.bucket_first_mb=nan: parallel.bucket_first_mb: expected a finite number, got 'nan'"),
    ("second yaml document", write("docs.yaml", f"data:\n  train: {data}\n---\ntrain:\n  steps: 5\n"), [],
     "docs.yaml:4:1: a second YAML document (after '---'); a config is one document"),
    ("deep nesting", write("deep.yaml", "[" * 3000), [], "levels deep, beyond the YAML parser's limit"),
    # train.cuda_graph: what the config alone shows cannot be captured (device auto: the device is not the reason).
    ("cuda graph on the cpu", good, ["--set", "train.cuda_graph=on"],
     "train.cuda_graph: given on with train.device cpu; valid off"),
    ("cuda graph with dropout", good, ["--set", "train.cuda_graph=on", "--set", "train.device=auto", "--set",
                                       "model.dropout=0.1"], "train.cuda_graph: given on with model.dropout 0.1; valid off"),
    ("cuda graph with offload", good, ["--set", "train.cuda_graph=on", "--set", "train.device=auto", "--set",
                                       "optimizer.offload=cpu"], "train.cuda_graph: given on with optimizer.offload cpu"),
    ("cuda graph with recomputation", good, ["--set", "train.cuda_graph=on", "--set", "train.device=auto", "--set",
                                             "train.activation_checkpointing=true"],
     "train.cuda_graph: given on with train.activation_checkpointing true"),
    ("cuda graph value", good, ["--set", "train.cuda_graph=yes"], "train.cuda_graph: given 'yes'; valid off | on"),
    ("huge d_model", good, ["--set", "model.d_model=1099511627776"], "d_model(1099511627776)"),
    ("huge n_layer", good, ["--set", "model.n_layer=9223372036854775807"], "more than 64-bit sizes hold"),
    ("huge max_seq_len", good, ["--set", "model.max_seq_len=4611686018427387904"],
     "pos_embed max_seq_len(4.61e+18) × d_model"),
]

failures = []


def check(label, cmd, fragment):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = p.returncode == 2 and len(lines) == 1 and fragment in lines[0]
    print(f"{'ok  ' if ok else 'FAIL'} {label}: exit {p.returncode}: {p.stderr.strip()!r}")
    if not ok:
        failures.append(label)


for what, path, extra, fragment in cases:
    check(f"meshtrain config / {what}", [meshtrain, "config", path, *extra], fragment)
    check(f"meshtrain train / {what}", [meshtrain, "train", path, *extra], fragment)
    if what != "bad extension":  # meshrun, like torchrun, runs any other file as a Python script
        check(f"meshrun / {what}", [meshrun, "--standalone", "--nproc-per-node", "2", path, *extra], fragment)


def check_runtime(label, cmd, fragment, env=None):
    """A mistake only the worker can see (the data, the device): exit 2, the last line is the one error line,
    and no LibTorch stack or 'fatal:' anywhere (progress lines may come before it)."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env=env)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = (p.returncode == 2 and lines and lines[-1].startswith("meshtrain: error: ") and fragment in lines[-1]
          and "frame #" not in p.stderr and "fatal" not in p.stderr)
    print(f"{'ok  ' if ok else 'FAIL'} {label}: exit {p.returncode}: {lines[-1] if lines else ''!r}")
    if not ok:
        print(p.stderr)
        failures.append(label)


tiny = ["--set", "model.max_seq_len=16", "--set", "model.n_layer=1", "--set", "train.micro_batch_size=8",
        "--set", "train.eval_every=0", "--set", f"train.out_dir={work}/run"]
# An llm.c header whose magic is off by one: `auto` once read it as 512 uint16 tokens and trained on them.
header = struct.pack("<3i", 20240521, 1, 200) + bytes(1012)
with open(os.path.join(work, "magic.bin"), "wb") as f:
    f.write(header + struct.pack("<200H", *([7] * 200)))
check_runtime("meshtrain train / llm.c header with a wrong magic",
              [meshtrain, "train", good, "--set", f"data.train={work}/magic.bin", *tiny],
              f"{work}/magic.bin: has an llm.c header (1024 bytes, zero-padded) with magic 20240521 and version 1; "
              "valid: magic 20240520 with version 1")
# One token ≥ the vocabulary in 8 windows of 17 tokens, all of them in the first step's batch.
tokens = [7] * 129
tokens[100] = 300
with open(os.path.join(work, "badtoken.bin"), "wb") as f:
    f.write(struct.pack("<129H", *tokens))
check_runtime("meshtrain train / token id ≥ vocab_size",
              [meshtrain, "train", good, "--set", f"data.train={work}/badtoken.bin", *tiny],
              f"{work}/badtoken.bin: token 100 (counting from 0 after any header) is 300, not below "
              "model.vocab_size 256")
# Valid sizes, but 2^31 × 256 × 2 parameters need 16 TiB to train: more than any machine running this test.
check_runtime("meshtrain train / model larger than the device",
              [meshtrain, "train", good, "--set", "model.vocab_size=2147483648", "--set", "model.tie_embeddings=false",
               *tiny], "per rank for training (fp32 weights, gradients and AdamW moments, under tp(1), fsdp(1), "
              "zero_stage 0) but cpu has")
# train.attention_backend: checked against the run's attention before the first step (CPU: auto, flash, math).
check_runtime("meshtrain train / attention backend the device cannot run",
              [meshtrain, "train", good, "--set", "train.attention_backend=cudnn", *tiny],
              "train.attention_backend: given 'cudnn', which cannot run q [8, 4, 16, 64], 4 kv heads, fp32 on cpu (")
check("meshtrain bench train / unknown --attention", [meshtrain, "bench", "train", "--attention", "fast"],
      "--attention: given 'fast'; valid auto | flash | cudnn | efficient | math")
# A list flag's value is split by the command, not the option parser: norm passes, the unknown lever is named.
check("meshtrain bench train / --unfuse list", [meshtrain, "bench", "train", "--unfuse", "norm,bogus"],
      "--unfuse: unknown lever 'bogus'")
# The allocator history is the CUDA caching allocator's: refused for a CPU run before anything is built.
check("meshtrain bench train / --memory-snapshot on the cpu",
      [meshtrain, "bench", "train", "--memory-snapshot", os.path.join(work, "mem.pickle"), "--set", "train.device=cpu"],
      "--memory-snapshot: records the CUDA caching allocator; this run trains on the CPU (train.device cpu)")
# meshtrain serve's on/off flag, refused before the checkpoint is read.
check("meshtrain serve / --cuda-graphs", [meshtrain, "serve", work, "--cuda-graphs", "maybe"],
      "--cuda-graphs maybe: expected on or off")
check("meshtrain serve / --quantization", [meshtrain, "serve", work, "--quantization", "int4"],
      "--quantization int4: expected none or fp8")
check("meshtrain generate / --quantization without --input", [meshtrain, "generate", work, "--quantization", "fp8"],
      "--quantization: only with --input")


def config_lines(*sets):
    p = subprocess.run([meshtrain, "config", good, *sets], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        failures.append(f"meshtrain config {' '.join(sets)}: exit {p.returncode}: {p.stderr.strip()}")
    return [l.strip() for l in p.stdout.splitlines()]


# A list-valued key in one --set (its commas are the value's), beside other --set flags in both spellings.
lines = config_lines("--set", "model.family=llama", "--set", "model.lora_rank=4", "--set", "model.lora_targets=q,v",
                     "--set=train.freeze=a.*,b.*", "--set", "optimizer.lr=1e-3")
for want in ("lora_targets: [q, v]", "lora_rank: 4", 'freeze: ["a.*", "b.*"]', "lr: 0.001"):
    ok = want in lines
    print(f"{'ok  ' if ok else 'FAIL'} meshtrain config --set list values: {want!r}")
    if not ok:
        failures.append(f"--set list values: no line {want!r} in {lines}")

# train.cuda_graph where only the worker sees why not: no GPU (none visible), a layout with hooks in backward.
no_gpu = dict(os.environ, CUDA_VISIBLE_DEVICES="")
graph = ["--set", "train.cuda_graph=on", "--set", "train.device=auto", *tiny]
check_runtime("meshtrain train / cuda graph without a GPU", [meshtrain, "train", good, *graph],
              "train.cuda_graph: given on with the device cpu; valid off, or on with a CUDA device", env=no_gpu)
p = subprocess.run([meshrun, "--standalone", "--nproc-per-node", "2", good, *graph], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True, timeout=300, env=no_gpu)
if p.returncode != 2 or "train.cuda_graph: given on with the layout 'ddp over 2 rank(s)" not in p.stderr:
    print(p.stderr)
    failures.append("meshrun / cuda graph under ddp")

check("meshrun / world size arithmetic", [meshrun, "--standalone", "--nproc-per-node", "3", good, "--set", "parallel.tp=2"],
      "world size 3 is not divisible by pp(1) × fsdp(1) × tp(2) = 2")
p = subprocess.run([meshtrain, "--help"], stdout=subprocess.PIPE, text=True)
if p.returncode != 0 or "train CONFIG" not in p.stdout:
    failures.append("meshtrain --help")
p = subprocess.run([meshtrain, "config", good], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
if p.returncode != 0 or "optimizer:" not in p.stdout:
    failures.append(f"meshtrain config good.yaml: {p.returncode} {p.stderr}")

if failures:
    sys.exit(f"{len(failures)} failed: {failures}")
print("cli errors: ok")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
