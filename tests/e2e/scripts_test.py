#!/usr/bin/env python3
"""scripts/plot_metrics.py and scripts/prepare_data.py, run as the user runs them.

(a) plot: a small metrics JSONL (train + val lines, a resumed step) becomes a PNG; a missing file, a malformed
    line (file:line), a file without step records are each one line on stderr and exit code 2.
(b) prepare: a byte-level BPE tokenizer trained here, offline, on a few sentences (tokenizer.json in a temp
    dir) tokenizes three documents into several train shards and a val shard; headers, token counts, the EOT
    between documents and the decoded text are checked; vocab ≥ 65536 and bad inputs are refused (exit 2).
    The tiktoken GPT-2 path is tested only where tiktoken can load its encoding offline.
Exit code 77 (skipped) without matplotlib or tokenizers.
Usage: scripts_test.py SOURCE_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PLOT = os.path.join(src, "scripts", "plot_metrics.py")
PREP = os.path.join(src, "scripts", "prepare_data.py")

try:
    import matplotlib  # noqa: F401
    import tokenizers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e.name} is not installed ({sys.executable} -m pip install matplotlib tokenizers)")
    sys.exit(77)

work = tempfile.mkdtemp(prefix="meshtrain_scripts_")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(script, *args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def write(name, text):
    path = os.path.join(work, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def expect_error(script, args, fragment, what):
    rc, out, err = run(script, *args)
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 1 and fragment in lines[0],
          f"{what}: exit 2 and one line with {fragment!r} (got rc={rc}, stderr={err.strip()!r})")


# ---- (a) plot_metrics.py ----------------------------------------------------------------------------------
recs = []
for step in [1, 10, 20, 30, 20, 30, 40]:  # 20, 30 again: a resumed run re-logs them
    recs.append({"step": step, "loss": 5.0 / step ** 0.3, "lr": 1e-3 * min(1, step / 10), "grad_norm": 2.0 / step,
                 "tokens_per_s": 5000.0 + step, "step_time_s": 0.3, "tokens": step * 2048, "elapsed_s": step * 0.3,
                 "peak_memory_bytes": 500 << 20, "mfu": 0.31})
    if step in (20, 40):
        recs.append({"step": step, "val_loss": 4.5 / step ** 0.3})
run_a = write("runs/a/metrics.jsonl", "".join(json.dumps(r) + "\n" for r in recs) + "\n")
run_b = write("runs/b/metrics.jsonl", "".join(json.dumps({k: v for k, v in r.items() if k != "mfu"}) + "\n"
                                              for r in recs[:4]))

png = os.path.join(work, "plots", "curves.png")
rc, out, err = run(PLOT, run_a, run_b, "--out", png)
check(rc == 0, f"plot two runs: exit 0 (rc={rc}, stderr={err.strip()!r})")
head = b""
if os.path.exists(png):
    with open(png, "rb") as f:
        head = f.read(8)
check(os.path.exists(png) and os.path.getsize(png) > 1000 and head == b"\x89PNG\r\n\x1a\n",
      "plot: the PNG exists, is non-empty and has the PNG signature")
rc, out, err = run(PLOT, run_a, "--out", os.path.join(work, "plotdir"))
check(rc == 0 and os.path.getsize(os.path.join(work, "plotdir", "metrics.png")) > 1000,
      f"plot into a directory: DIR/metrics.png (rc={rc}, stderr={err.strip()!r})")
check(not [n for n in os.listdir(os.path.join(work, "plots")) if ".tmp" in n], "plot: no temporary file left")
check("GPU" not in out and "clock" not in out, f"plot: no GPU panels for runs without telemetry ({out.strip()!r})")
# GPU telemetry (the records' "gpu" entries, per rank): power, temperature and clock panels; a field no
# rank reported (memory clock here) gets no panel.
gpu_recs = [dict(r, gpu={str(k): {"power_w": 300.0 + 10 * k + r["step"], "temperature_c": 50.0 + k, "sm_clock_mhz": 1980.0}
                         for k in range(2)}) for r in recs if "loss" in r]
run_gpu = write("runs/gpu/metrics.jsonl", "".join(json.dumps(r) + "\n" for r in gpu_recs))
rc, out, err = run(PLOT, run_gpu, "--out", os.path.join(work, "gpu.png"))
check(rc == 0 and "GPU power, GPU temperature, SM clock" in out and "memory clock" not in out,
      f"plot: GPU power/temperature/clock panels, none without data (rc={rc}, out={out.strip()!r}, err={err.strip()!r})")

missing = os.path.join(work, "nope.jsonl")
expect_error(PLOT, [missing, "--out", png], f"{missing}: no such file", "plot, missing file")
bad = write("bad.jsonl", json.dumps(recs[0]) + "\n" + '{"step": 10, "loss": \n')
expect_error(PLOT, [run_a, bad, "--out", png], f"{bad}:2: malformed line", "plot, malformed line")
notobj = write("notobj.jsonl", "[1, 2]\n")
expect_error(PLOT, [notobj, "--out", png], f"{notobj}:1: malformed line", "plot, a line that is not an object")
nostep = write("nostep.jsonl", '{"event": "start"}\n')
expect_error(PLOT, [nostep, "--out", png], f"{nostep}: no step records", "plot, no step records")
empty = write("empty.jsonl", "")
expect_error(PLOT, [empty, "--out", png], f"{empty}: no step records", "plot, empty file")
rc, _, err = run(PLOT, "--out", png)
check(rc == 2, f"plot without a metrics file: exit 2 (argparse) (rc={rc})")

# ---- (b) prepare_data.py ----------------------------------------------------------------------------------
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

EOT = "<|endoftext|>"
docs = [
    "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\n",
    "And God said, Let there be light: and there was light.\nAnd God saw the light, that it was good.\n"
    "Naïve café — unicode survives the round trip.\n",
    "And the evening and the morning were the first day.\nThe end, with <|endoftext|> as plain text.\n",
]
tok_dir = os.path.join(work, "tok")
os.makedirs(tok_dir)
tk = Tokenizer(models.BPE())
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tk.decoder = decoders.ByteLevel()
tk.train_from_iterator(docs * 3, trainers.BpeTrainer(vocab_size=400, special_tokens=[EOT],
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                     show_progress=False))
tk.save(os.path.join(tok_dir, "tokenizer.json"))
eot_id = tk.token_to_id(EOT)
doc_paths = [write(f"text/doc{i}.txt", d) for i, d in enumerate(docs)]


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    n = header[2]
    tokens = list(struct.unpack(f"<{(len(data) - 1024) // 2}H", data[1024:]))
    return header, n, tokens


prefix = os.path.join(work, "data", "kjv")
write("data/kjv_train_000099.bin", "stale")  # an earlier, longer run's shard: removed
rc, out, err = run(PREP, "--tokenizer", f"hf:{tok_dir}", "--input", os.path.join(work, "text", "doc*.txt"),
                   "--out", prefix, "--val-fraction", "0.2", "--shard-tokens", "40")
check(rc == 0, f"prepare (hf tokenizer): exit 0 (rc={rc}, stdout={out.strip()!r}, stderr={err.strip()!r})")
names = sorted(os.listdir(os.path.join(work, "data")))
train = [os.path.join(work, "data", n) for n in names if n.startswith("kjv_train_")]
val = [os.path.join(work, "data", n) for n in names if n.startswith("kjv_val_")]
check(len(train) >= 2 and os.path.basename(train[0]) == "kjv_train_000000.bin"
      and [os.path.basename(p) for p in train] == [f"kjv_train_{i:06d}.bin" for i in range(len(train))]
      and [os.path.basename(p) for p in val] == ["kjv_val_000000.bin"],
      f"prepare: numbered train shards and one val shard, stale shard removed ({names})")
check(not [n for n in names if ".tmp" in n], "prepare: no temporary file left")

all_ok = True
streams = {}
for split, paths in (("train", train), ("val", val)):
    toks = []
    for i, p in enumerate(paths):
        header, n, t = read_shard(p)
        ok = header[0] == 20240520 and header[1] == 1 and n == len(t) and not any(header[3:])
        ok = ok and (n == 40 if i < len(paths) - 1 else 0 < n <= 40)
        all_ok = all_ok and ok
        if not ok:
            print(f"     {p}: header {header[:4]}, {len(t)} tokens")
        toks += t
    streams[split] = toks
check(all_ok, "prepare: every header is magic 20240520, version 1, header[2] = token count; full shards hold 40")
tokens = streams["train"] + streams["val"]
check(max(tokens) < tk.get_vocab_size(), "prepare: token ids within the vocabulary")
check(tokens.count(eot_id) == len(docs) - 1, f"prepare: EOT ({eot_id}) between the documents only "
      f"(found {tokens.count(eot_id)})")
whole = tk.decode(streams["train"]) + tk.decode(streams["val"])
# Decoding drops the special token; cut at its positions instead to get the documents back.
doc_tokens, cur = [], []
for t in tokens:
    if t == eot_id:
        doc_tokens.append(cur)
        cur = []
    else:
        cur.append(t)
doc_tokens.append(cur)
train_n = len(streams["train"])
# the train/val boundary may fall inside a document: decode its two sides separately and join
got_docs, pos = [], 0
for d in doc_tokens:
    lo, hi = pos, pos + len(d)
    if lo < train_n < hi:
        got_docs.append(tk.decode(d[:train_n - lo]) + tk.decode(d[train_n - lo:]))
    else:
        got_docs.append(tk.decode(d))
    pos = hi + 1
check(got_docs == docs, "prepare: decoding the shards gives back every document, byte for byte")
check(whole == "".join(docs), "prepare: decoded train + val = the text")
val_text = tk.decode(streams["val"])
text = "".join(docs)
check(int(0.2 * len(text.encode())) <= len(val_text.encode()) < len(text.encode()) and text.endswith(val_text)
      and text[:-len(val_text)].endswith("\n"),
      f"prepare: val is the text's end, --val-fraction of it moved back to a line start ({val_text!r})")

# errors
big_dir = os.path.join(work, "bigtok")
os.makedirs(big_dir)
big = Tokenizer(models.WordLevel({f"w{i}": i for i in range(70000)} | {EOT: 70000}, unk_token="w0"))
big.pre_tokenizer = pre_tokenizers.Whitespace()
big.save(os.path.join(big_dir, "tokenizer.json"))
expect_error(PREP, ["--tokenizer", f"hf:{big_dir}", "--input", doc_paths[0], "--out", prefix], "< 65536",
             "prepare, vocab ≥ 65536")
noeot_dir = os.path.join(work, "noeot")
os.makedirs(noeot_dir)
noeot = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
noeot.pre_tokenizer = pre_tokenizers.Whitespace()
noeot.save(os.path.join(noeot_dir, "tokenizer.json"))
expect_error(PREP, ["--tokenizer", f"hf:{noeot_dir}", "--input", doc_paths[0], "--out", prefix], "--eot",
             "prepare, no end-of-text token")
rc, out, err = run(PREP, "--tokenizer", f"hf:{noeot_dir}", "--eot", "b", "--input", doc_paths[0], "--out",
                   os.path.join(work, "eot", "x"), "--val-fraction", "0")
check(rc == 0 and os.path.exists(os.path.join(work, "eot", "x_train_000000.bin"))
      and not os.path.exists(os.path.join(work, "eot", "x_val_000000.bin")),
      f"prepare --eot TOKEN --val-fraction 0: train shard only (rc={rc}, stderr={err.strip()!r})")
expect_error(PREP, ["--tokenizer", f"hf:{tok_dir}", "--input", os.path.join(work, "none", "*.txt"), "--out", prefix],
             "matches no file", "prepare, glob without a match")
expect_error(PREP, ["--tokenizer", f"hf:{work}/nodir", "--input", doc_paths[0], "--out", prefix], "does not exist",
             "prepare, missing tokenizer")
expect_error(PREP, ["--tokenizer", "bert", "--input", doc_paths[0], "--out", prefix], "gpt2 | hf:PATH",
             "prepare, unknown tokenizer")
expect_error(PREP, ["--tokenizer", f"hf:{tok_dir}", "--input", doc_paths[0], "--out", prefix, "--val-fraction", "0.9"],
             "--val-fraction", "prepare, val fraction out of range")
binfile = os.path.join(work, "bin.txt")
with open(binfile, "wb") as f:
    f.write(b"ok\n\xff\xfe\n")
expect_error(PREP, ["--tokenizer", f"hf:{tok_dir}", "--input", binfile, "--out", prefix], "not UTF-8",
             "prepare, not UTF-8")

# tiktoken GPT-2, only where it works offline
try:
    import tiktoken
    enc = tiktoken.get_encoding("gpt2")
except Exception as e:  # not installed, or its BPE files are not cached and there is no network
    print(f"skip tiktoken gpt2 path: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    rc, out, err = run(PREP, "--tokenizer", "gpt2", "--input", doc_paths[0], "--out", prefix)
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "tiktoken" in err,
          f"prepare --tokenizer gpt2 without tiktoken's encoding: one line, exit 2 ({err.strip()[:100]!r})")
else:
    gp = os.path.join(work, "gpt2", "g")
    rc, out, err = run(PREP, "--tokenizer", "gpt2", "--input", *doc_paths, "--out", gp, "--val-fraction", "0")
    header, n, t = read_shard(gp + "_train_000000.bin")
    want = []
    for i, d in enumerate(docs):
        want += ([enc.eot_token] if i else []) + enc.encode_ordinary(d)
    check(rc == 0 and header[0] == 20240520 and t == want, "prepare --tokenizer gpt2: the tiktoken tokens")

if failures:
    print(f"{len(failures)} check(s) failed; files in {work}")
    sys.exit(1)
shutil.rmtree(work, ignore_errors=True)
print("all checks passed")
