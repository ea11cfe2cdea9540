#!/usr/bin/env python3
"""scripts/prepare_instruct.py run as the user runs it, with a tiny tokenizer trained here on the KJV text.

(a) chat (OpenAI and ShareGPT shapes), prompt/completion and alpaca lines become one document each: the shard
    and its .flags sidecar agree on the token count, every document starts with a document-start flag, and the
    tokens with the loss flag decode to exactly the assistant turns / completion (+ the end-of-turn token) —
    through turn-by-turn rendering (ChatML) and through {% generation %} markers alike.
(b) --train-on-all flags every token; --val-fraction keeps floor(n × fraction) documents for val; a small
    --shard-tokens gives several shards, none splitting a document.
    A conversation that starts with an assistant turn trains on its content, not on its header; the split
    takes its share from every input file, at positions drawn inside it: a file whose examples repeat with a
    period gives val documents of several kinds, not every k-th (one kind); the default keeps 1 %.
(c) a template that cannot mark the assistant's span, a line that is not JSON, a line without the fields, a line
    with two shapes, JSON nested 100,000 deep, a template that does not compile or raises, a line longer than
    --max-line-bytes (16 MiB by default): each one line naming FILE:LINE, exit code 2.
Exit code 77 (skipped) without tokenizers or transformers.
Usage: prepare_instruct_test.py SOURCE_DIR
"""
import array
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PREP = os.path.join(src, "scripts", "prepare_instruct.py")
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(here))  # e2e_support
try:
    import tokenizers  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e.name} is not installed ({sys.executable} -m pip install tokenizers transformers)")
    sys.exit(77)
from e2e_support import Checks, run_checked  # noqa: E402
from tiny_tokenizer import make_tokenizer  # noqa: E402

work = tempfile.mkdtemp(prefix="meshtrain_instruct_")
check = Checks()

EXAMPLES = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who begat Enos?"},
                  {"role": "assistant", "content": "Seth begat Enos."}, {"role": "user", "content": "And then?"},
                  {"role": "assistant", "content": "Enos begat Cainan."}]},
    {"conversations": [{"from": "human", "value": "In the beginning?"},
                       {"from": "gpt", "value": "God created the heaven and the earth."}]},
    {"prompt": "And God said, ", "completion": "Let there be light."},
    {"instruction": "Finish the verse.", "input": "And the earth was", "output": "without form, and void."},
]
# What the loss flags must cover, document by document (ChatML: each assistant turn ends with <|im_end|>).
TRAINED = [["Seth begat Enos.<|im_end|>", "Enos begat Cainan.<|im_end|>"],
           ["God created the heaven and the earth.<|im_end|>"], ["Let there be light.<|im_end|>"],
           ["without form, and void.<|im_end|>"]]



def run(*args):
    p = subprocess.run([sys.executable, PREP, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def write_jsonl(name, lines):
    path = os.path.join(work, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def read_shard(path):
    """(ids, flags) of a shard and its sidecar, checking both headers."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack("<3i", data[:12])
    ids = array.array("H" if version == 1 else "I", data[1024:])
    with open(path + ".flags", "rb") as f:
        fl = f.read()
    fmagic, fversion, fn = struct.unpack("<3i", fl[:12])
    check(magic == 20240520 and version in (1, 2) and n == len(ids), f"{os.path.basename(path)}: llm.c header, {n} tokens")
    check(fmagic == 20241014 and fversion == 1 and fn == n and len(fl) - 1024 == n,
          f"{os.path.basename(path)}.flags: header, one flag per token")
    return list(ids), list(fl[1024:])


def documents(ids, flags):
    docs = []
    for i, (t, f) in enumerate(zip(ids, flags)):
        if f & 2:
            docs.append(([], []))
        docs[-1][0].append(t)
        docs[-1][1].append(f)
    return docs


def trained_runs(tk, doc_ids, doc_flags):
    """The decoded runs of consecutive loss-flagged tokens."""
    runs, cur = [], []
    for t, f in zip(doc_ids, doc_flags):
        if f & 1:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tk.decode(r) for r in runs]


def main():
    from transformers import AutoTokenizer
    data = write_jsonl("mixed.jsonl", EXAMPLES)
    for template in ("chatml", "generation"):
        tok_dir = make_tokenizer(src, os.path.join(work, f"tok_{template}"), template)
        tk = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
        out = os.path.join(work, template, "sft")
        rc, stdout, err = run("--tokenizer", tok_dir, "--input", data, "--out", out, "--quiet")
        check(rc == 0, f"{template}: prepare exits 0 (rc={rc}, stderr={err.strip()[:300]!r})")
        if rc:
            continue
        ids, flags = read_shard(out + "_train_000000.bin")
        docs = documents(ids, flags)
        check(flags[0] & 2 and len(docs) == len(EXAMPLES), f"{template}: {len(docs)} documents, one per line")
        for i, (d_ids, d_flags) in enumerate(docs):
            got = [r.rstrip("\n") for r in trained_runs(tk, d_ids, d_flags)]
            check(got == TRAINED[i], f"{template}: document {i} trains on exactly {TRAINED[i]} (got {got})")
        check("with loss" in stdout, f"{template}: summary line ({stdout.strip()[:120]})")

    tok_dir = os.path.join(work, "tok_chatml")
    tk = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    out = os.path.join(work, "all", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", data, "--out", out, "--train-on-all", "--quiet")
    ids, flags = read_shard(out + "_train_000000.bin") if rc == 0 else ([], [])
    check(rc == 0 and flags and all(f & 1 for f in flags), f"--train-on-all: every token has the loss flag ({err.strip()[:200]})")

    many = write_jsonl("many.jsonl", EXAMPLES * 5)
    out = os.path.join(work, "split", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", many, "--out", out, "--val-fraction", "0.2",
                     "--shard-tokens", "200", "--quiet")
    train = sorted(glob.glob(out + "_train_*.bin"))
    val = sorted(glob.glob(out + "_val_*.bin"))
    check(rc == 0 and len(train) > 1 and len(val) >= 1, f"split: {len(train)} train shards, {len(val)} val ({err.strip()[:200]})")
    n_docs = {"train": 0, "val": 0}
    for split, paths in (("train", train), ("val", val)):
        for p in paths:
            ids, flags = read_shard(p)
            check(len(ids) <= 200 or sum(f & 2 for f in flags) == 2, f"{os.path.basename(p)}: ≤ 200 tokens or one document")
            check(bool(flags) and flags[0] & 2, f"{os.path.basename(p)}: starts with a document")
            n_docs[split] += sum(1 for f in flags if f & 2)
    check(n_docs == {"train": 16, "val": 4}, f"split: 16 train + 4 val documents (got {n_docs})")

    # A conversation that opens with the assistant: its "<|im_start|>assistant\n" is the prompt, as in later turns.
    first = write_jsonl("assistant_first.jsonl", [{"messages": [
        {"role": "assistant", "content": "Seth begat Enos."}, {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "Enos begat Cainan."}]}])
    out = os.path.join(work, "first", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", first, "--out", out, "--quiet")
    got = []
    if rc == 0:
        ids, flags = read_shard(out + "_train_000000.bin")
        got = [r.rstrip("\n") for r in trained_runs(tk, ids, flags)]
    want = ["Seth begat Enos.<|im_end|>", "Enos begat Cainan.<|im_end|>"]
    check(got == want, f"assistant turn first: trains on exactly {want} (got {got}, {err.strip()[:200]})")

    # --val-fraction over two files: validation documents from both, not only the last file's.
    light = write_jsonl("light.jsonl", [EXAMPLES[2]] * 10)
    void = write_jsonl("void.jsonl", [EXAMPLES[3]] * 10)
    out = os.path.join(work, "split2", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", light, void, "--out", out, "--val-fraction", "0.2", "--quiet")
    val_text = tk.decode(read_shard(out + "_val_000000.bin")[0]) if rc == 0 else ""
    check(val_text.count("Let there be light.") == 2 and val_text.count("without form, and void.") == 2,
          f"val over two files: 2 documents from each (got {val_text[:300]!r}, {err.strip()[:200]})")

    # A period in a file's examples (the four kinds in turn) and a second file of another kind: every 4th
    # document at 0.25 would validate on one kind of the first file only.
    cycle = write_jsonl("cycle.jsonl", EXAMPLES * 5)
    word = write_jsonl("word.jsonl", [{"prompt": "In the beginning ", "completion": "was the Word."}] * 8)
    out = os.path.join(work, "split3", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", cycle, word, "--out", out, "--val-fraction", "0.25", "--quiet")
    val_text = tk.decode(read_shard(out + "_val_000000.bin")[0]) if rc == 0 else ""
    kinds = {k: val_text.count(k) for k in ("Seth begat Enos.", "God created", "Let there be light.", "without form")}
    check(val_text.count("was the Word.") == 2 and sum(kinds.values()) == 5 and sum(1 for n in kinds.values() if n) >= 2,
          f"val of a periodic file and another: 5 documents of several kinds + 2 (got {kinds}, "
          f"{val_text.count('was the Word.')} of the second file; {err.strip()[:200]})")
    # The default: 1 % (floor(108 × 0.01) = 1 document, from the larger file).
    big = write_jsonl("big.jsonl", EXAMPLES * 25)
    out = os.path.join(work, "split4", "sft")
    rc, _, err = run("--tokenizer", tok_dir, "--input", big, word, "--out", out, "--quiet")
    val = read_shard(out + "_val_000000.bin")[1] if rc == 0 and os.path.exists(out + "_val_000000.bin") else []
    check(sum(1 for f in val if f & 2) == 1, f"default --val-fraction 0.01: 1 of 108 documents in val ({err.strip()[:200]})")

    def expect_error(args, fragment, what):
        rc, _, err = run(*args)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and fragment in lines[0],
              f"{what}: exit 2 and one line with {fragment!r} (got rc={rc}, stderr={err.strip()!r})")

    unstable = make_tokenizer(src, os.path.join(work, "tok_unstable"), "unstable")
    expect_error(["--tokenizer", unstable, "--input", data, "--out", os.path.join(work, "bad", "x")],
                 f"{data}:1: the chat template", "a template that cannot mark the assistant's span")
    rc, _, _ = run("--tokenizer", unstable, "--input", data, "--out", os.path.join(work, "bad", "y"), "--train-on-all")
    check(rc == 0, "the same template with --train-on-all (no span needed): exit 0")
    bad_json = write_jsonl("bad_json.jsonl", [EXAMPLES[2], '{"prompt": "x", '])
    expect_error(["--tokenizer", tok_dir, "--input", bad_json, "--out", os.path.join(work, "bad", "z")],
                 f"{bad_json}:2: not valid JSON", "a line that is not JSON")
    no_fields = write_jsonl("no_fields.jsonl", [{"question": "x", "answer": "y"}])
    expect_error(["--tokenizer", tok_dir, "--input", no_fields, "--out", os.path.join(work, "bad", "w")],
                 f"{no_fields}:1: lacks its fields", "a line without the fields")
    no_role = write_jsonl("no_role.jsonl", [{"messages": [{"content": "x"}]}])
    expect_error(["--tokenizer", tok_dir, "--input", no_role, "--out", os.path.join(work, "bad", "v")],
                 f"{no_role}:1: messages[0] lacks role", "a turn without its role")
    expect_error(["--tokenizer", os.path.join(work, "nope"), "--input", data, "--out", os.path.join(work, "bad", "u")],
                 "not a directory", "a tokenizer directory that does not exist")
    both = write_jsonl("both.jsonl", [EXAMPLES[2], {**EXAMPLES[0], **EXAMPLES[2]}])
    expect_error(["--tokenizer", tok_dir, "--input", both, "--out", os.path.join(work, "bad", "t")],
                 f"{both}:2: ambiguous: has messages and prompt + completion", "a line with messages and a prompt")
    deep = write_jsonl("deep.jsonl", ['{"messages": ' + "[" * 100000 + "]" * 100000 + "}"])
    expect_error(["--tokenizer", tok_dir, "--input", deep, "--out", os.path.join(work, "bad", "s")],
                 f"{deep}:1: JSON nested too deeply", "JSON nested 100,000 deep")
    for kind, fragment in (("broken", "TemplateSyntaxError at template line 1"),
                           ("raises", "TemplateError: Conversation roles must alternate user/assistant")):
        bad_tok = make_tokenizer(src, os.path.join(work, f"tok_{kind}"), kind)
        expect_error(["--tokenizer", bad_tok, "--input", data, "--out", os.path.join(work, "bad", kind)],
                     f"{data}:1: the chat template of {bad_tok} failed: {fragment}", f"a template that {kind}")
    # 17 MiB on one line (blanks inside the JSON: cheap to read were it read): refused at the default 16 MiB
    # after reading no more than that; a raised limit reads a line the default would.
    huge = write_jsonl("huge.jsonl", [EXAMPLES[2], '{"prompt": "x", "completion": "y"' + " " * (17 << 20) + "}"])
    expect_error(["--tokenizer", tok_dir, "--input", huge, "--out", os.path.join(work, "bad", "r")],
                 f"{huge}:2: line longer than --max-line-bytes 16777216", "a 17 MiB line")
    long = write_jsonl("long.jsonl", [{"prompt": "x", "completion": "a " * 3000}])
    expect_error(["--tokenizer", tok_dir, "--input", long, "--out", os.path.join(work, "bad", "q"),
                  "--max-line-bytes", "4096"], f"{long}:1: line longer than --max-line-bytes 4096", "a raised limit")
    rc, _, err = run("--tokenizer", tok_dir, "--input", long, "--out", os.path.join(work, "long", "x"),
                     "--max-line-bytes", "8192", "--quiet")
    check(rc == 0, f"the same line under --max-line-bytes 8192: exit 0 ({err.strip()[:200]})")


run_checked(main, check, work)
