#!/usr/bin/env python3
"""Tokenize instruction data (JSONL) into token shards with loss masks and document boundaries for meshtrain.

    scripts/prepare_instruct.py --tokenizer path/to/hf_model_dir --input 'chats/*.jsonl' --out data/sft
    scripts/prepare_instruct.py --tokenizer tok_dir --input alpaca.jsonl --out data/sft --val-fraction 0.02

Each line of the input is one example (one document), in any of the shapes people bring:
  chat      {"messages": [{"role": "system"|"user"|"assistant", "content": "…"}, …]}  (OpenAI)
            {"conversations": [{"from": "system"|"human"|"gpt", "value": "…"}, …]}     (ShareGPT)
  prompt    {"prompt": "…", "completion": "…"}
  alpaca    {"instruction": "…", "input": "…" (optional), "output": "…"}
Chat (and alpaca, as one user turn and one assistant turn) is rendered through the tokenizer's own chat
template; prompt/completion is the prompt's tokens then the completion's and the end-of-text token. The loss
is taken on the assistant turns / the completion only (--train-on-all: on every token). The assistant's span
comes from the template's {% generation %} markers where it has them, else from rendering the conversation
turn by turn, which must be prefix-stable (each rendering starts with the previous one): a template that
allows neither is an error, never a silent all-tokens mask.

The tokenizer is a local Hugging Face tokenizer directory (tokenizer.json / tokenizer_config.json with its
chat_template), read with transformers, local files only: nothing is downloaded.

Output (docs/data.md): PREFIX_train_000000.bin, … (llm.c shards: 256 × int32 header, magic 20240520, version 1
with uint16 tokens — version 2 with uint32 tokens when the vocabulary exceeds 65536), each with a sidecar
PREFIX_train_000000.bin.flags (256 × int32 header, magic 20241014, version 1, token count; then one byte a
token: bit 0 = the loss is taken on it as a target, bit 1 = it starts a document). A document never spans two
shards. --val-fraction (default 0.01; 0: no validation split) keeps floor(n × fraction) of the n documents for
PREFIX_val_*: each input file's share of them (within one document), at positions drawn inside the file with a
fixed seed — not its last documents, nor every k-th (which a period in the data would make all alike).
Files are written to a temporary name and renamed; shards of the same names left from an earlier, longer run
are removed.
Mistakes (a line that is not JSON, lacks its fields, has two shapes, is longer than --max-line-bytes; a chat
template that fails: FILE:LINE) are one line on stderr and exit code 2.
"""
import argparse
import array
import json
import os
import random
import re
import sys
import time

PROG = "prepare_instruct.py"
MAGIC, HEADER_INTS = 20240520, 256
FLAGS_MAGIC, FLAGS_VERSION = 20241014, 1
LOSS, DOC_START = 1, 2
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant",
         "tool": "tool", "function": "tool", "developer": "system", "bot": "assistant", "model": "assistant"}


# The same input rules, shared flags and error type as the plain-text preparer (this file's folder is on sys.path
# when it runs).
from prepare_data import UserError, checked_inputs  # noqa: E402


def lines(path, max_bytes):
    """Yields (line number, bytes) of a file, never reading more than max_bytes + 2 bytes of one line (room for
    its CR LF): a longer line is a UserError (a line is one example; tokenizing one takes a few hundred times its
    size)."""
    with open(path, "rb") as f:
        n = 0
        while True:
            raw = f.readline(max_bytes + 2)
            if not raw:
                return
            n += 1
            if len(raw.rstrip(b"\r\n")) > max_bytes:
                raise UserError(f"{path}:{n}: line longer than --max-line-bytes {max_bytes} (one example a line; "
                                "raise the flag for a longer one: tokenizing it takes a few hundred bytes of memory "
                                "per byte)")
            yield n, raw


def examples(files, progress, max_line_bytes):
    """Yields (where, example dict) for every non-blank line; `where` is FILE:LINE."""
    for path in files:
        for n, raw in lines(path, max_line_bytes):
            progress(len(raw))
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{where}: not UTF-8 (byte {e.start} of the line)")
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: not valid JSON ({e.msg} at column {e.colno})")
            except RecursionError:
                raise UserError(f"{where}: JSON nested too deeply to read (an example is an object of strings and "
                                "lists of turns)")
            if not isinstance(ex, dict):
                raise UserError(f"{where}: a JSON {type(ex).__name__}, expected an object with messages, "
                                "conversations, prompt/completion or instruction/output")
            yield where, ex


def _text(where, value, what):
    if not isinstance(value, str):
        raise UserError(f"{where}: {what} is {json.dumps(value)[:40]}, expected a string")
    return value


# The shapes a line may have, by the keys that make each one.
SHAPES = {"messages": ("messages",), "conversations": ("conversations",),
          "prompt + completion": ("prompt", "completion"), "instruction + output": ("instruction", "output")}


def as_messages(where, ex):
    """The example as chat messages [{role, content}], or None for prompt/completion."""
    shapes = [name for name, keys in SHAPES.items() if all(k in ex for k in keys)]
    if len(shapes) > 1:
        raise UserError(f"{where}: ambiguous: has {' and '.join(shapes)}; valid: one shape a line (which one to "
                        "train on is not for this script to guess)")
    if "messages" in ex or "conversations" in ex:
        key = "messages" if "messages" in ex else "conversations"
        turns = ex[key]
        if not isinstance(turns, list) or not turns:
            raise UserError(f"{where}: {key} must be a non-empty list of turns")
        out = []
        for i, t in enumerate(turns):
            if not isinstance(t, dict):
                raise UserError(f"{where}: {key}[{i}] is not an object")
            role = t.get("role", t.get("from"))
            content = t.get("content", t.get("value"))
            if role is None or content is None:
                raise UserError(f"{where}: {key}[{i}] lacks {'role' if role is None else 'content'} "
                                "(valid: role/content, or ShareGPT's from/value)")
            if role not in ROLES:
                raise UserError(f"{where}: {key}[{i}].role is {role!r}; valid: {', '.join(sorted(ROLES))}")
            out.append({"role": ROLES[role], "content": _text(where, content, f"{key}[{i}].content")})
        if not any(m["role"] == "assistant" for m in out):
            raise UserError(f"{where}: {key} has no assistant turn: nothing to train on")
        return out
    if "instruction" in ex and "output" in ex:
        user = _text(where, ex["instruction"], "instruction")
        extra = _text(where, ex.get("input") or "", "input")
        if extra:
            user = f"{user}\n\n{extra}"
        return [{"role": "user", "content": user}, {"role": "assistant", "content": _text(where, ex["output"], "output")}]
    if "prompt" in ex and "completion" in ex:
        return None
    raise UserError(f"{where}: lacks its fields: keys {', '.join(sorted(ex)) or '(none)'}; valid: messages, "
                    "conversations, prompt + completion, or instruction + output (+ input)")


# ---- tokenizer --------------------------------------------------------------------------------------------
class Tokenizer:
    def __init__(self, path):
        if not os.path.isdir(path):
            raise UserError(f"--tokenizer {path}: not a directory (a local Hugging Face tokenizer directory; "
                            "nothing is downloaded)")
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise UserError("--tokenizer needs transformers (pip install transformers)")
        try:
            self.tk = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as e:  # transformers raises many kinds for an unusable directory
            raise UserError(f"--tokenizer {path}: cannot load a tokenizer from it: "
                            f"{str(e).splitlines()[0] if str(e) else e!r}")
        self.path = path
        self.vocab_size = len(self.tk)
        self.eos = self.tk.eos_token_id
        self.template = self.tk.chat_template if isinstance(self.tk.chat_template, str) else None
        self.generation_markers = bool(self.template) and "{% generation %}" in self.template.replace("{%- generation", "{% generation")

    def encode(self, text, special):
        return self.tk(text, add_special_tokens=special)["input_ids"]

    def template_call(self, where, **kwargs):
        """apply_chat_template, its failures (a template that does not compile, or raises: jinja2's errors and
        whatever its expressions throw) one line naming the example."""
        try:
            return self.tk.apply_chat_template(**kwargs)
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 — a user's template can raise anything
            lineno = getattr(e, "lineno", None)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError(f"{where}: the chat template of {self.path} failed: {type(e).__name__}"
                            f"{f' at template line {lineno}' if lineno else ''}{f': {first}' if first else ''}")

    def render(self, where, messages, generation_prompt=False):
        return self.template_call(where, conversation=messages, tokenize=False, add_generation_prompt=generation_prompt)

    def opening(self, where, messages):
        """The text before a conversation's first turn when that turn is the assistant's: the template's
        rendering of no messages with the generation prompt where it has one that the conversation starts with;
        else the text up to the assistant header (what the generation prompt adds after a user turn)."""
        upto = self.render(where, messages[:1])
        try:
            empty = self.tk.apply_chat_template([], tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 — many templates index messages[0]; the header below serves them
            empty = None
        if empty and upto.startswith(empty):
            return empty
        user = [{"role": "user", "content": "x"}]
        plain, prompted = self.render(where, user), self.render(where, user, generation_prompt=True)
        header = prompted[len(plain):] if prompted.startswith(plain) else ""
        at = upto.find(header) if header else -1
        if at < 0:
            raise UserError(f"{where}: the chat template of {self.path} cannot mark the assistant's span of a "
                            "conversation that starts with the assistant: no generation prompt found before it; "
                            "give a template with {% generation %} markers, or --train-on-all")
        return upto[:at + len(header)]

    def chat(self, where, messages, train_on_all):
        """(ids, mask): the conversation through the chat template, mask 1 on assistant tokens."""
        if not self.template:
            raise UserError(f"{where}: a chat example, but {self.path} has no chat_template (tokenizer_config.json "
                            "or chat_template.jinja): nothing to render it with")
        if train_on_all:
            ids = self.tk(self.render(where, messages), add_special_tokens=False)["input_ids"]
            return list(ids), [1] * len(ids)
        if self.generation_markers:
            out = self.template_call(where, conversation=messages, tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
            return list(out["input_ids"]), list(out["assistant_masks"])
        full = self.render(where, messages)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            # The turn's header (e.g. ChatML's "<|im_start|>assistant\n") is the prompt, not the answer.
            before = self.render(where, messages[:i], generation_prompt=True) if i else self.opening(where, messages)
            upto = self.render(where, messages[:i + 1])
            if not (upto.startswith(before) and full.startswith(upto)):
                raise UserError(f"{where}: the chat template of {self.path} cannot mark the assistant's span: its "
                                f"rendering is not prefix-stable (turn {i} changes the text before it) and it has no "
                                "{% generation %} markers; give a template with them, or --train-on-all")
            spans.append((len(before), len(upto)))
        enc = self.tk(full, add_special_tokens=False, return_offsets_mapping=True)
        mask = [int(any(a <= s < b for a, b in spans)) for s, _ in enc["offset_mapping"]]
        return list(enc["input_ids"]), mask


def tokenize(tok, where, ex, train_on_all):
    messages = as_messages(where, ex)
    if messages is None:
        prompt = tok.encode(_text(where, ex["prompt"], "prompt"), special=True)
        completion = tok.encode(_text(where, ex["completion"], "completion"), special=False)
        if tok.eos is not None:
            completion.append(tok.eos)
        ids, mask = prompt + completion, [0] * len(prompt) + [1] * len(completion)
    else:
        ids, mask = tok.chat(where, messages, train_on_all)
    if train_on_all:
        mask = [1] * len(ids)
    return ids, mask


# ---- shards -----------------------------------------------------------------------------------------------
def write_atomic(path, parts):
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for p in parts:
                if sys.byteorder != "little" and isinstance(p, array.array) and p.itemsize > 1:
                    p = array.array(p.typecode, p)
                    p.byteswap()
                p.tofile(f) if isinstance(p, array.array) else f.write(p)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"{path}: cannot write ({e.strerror})")


def header(magic, version, count):
    h = array.array("i", [0] * HEADER_INTS)
    h[0], h[1], h[2] = magic, version, count
    return h


class ShardWriter:
    """Documents into shards of at most shard_tokens tokens (a longer document gets a shard of its own)."""

    def __init__(self, prefix, split, shard_tokens, wide):
        self.prefix, self.split, self.shard_tokens = prefix, split, shard_tokens
        self.code, self.version = ("I", 2) if wide else ("H", 1)
        self.tokens, self.flags = array.array(self.code), bytearray()
        self.paths, self.total, self.trained, self.docs = [], 0, 0, 0

    def add(self, ids, mask):
        if self.tokens and len(self.tokens) + len(ids) > self.shard_tokens:
            self._flush()
        self.tokens.extend(ids)
        flags = bytearray(mask)  # 0 / 1 = LOSS
        flags[0] |= DOC_START
        self.flags += flags
        self.total += len(ids)
        self.trained += sum(mask) - mask[0]  # a document's first token is never a target
        self.docs += 1

    def _flush(self):
        path = f"{self.prefix}_{self.split}_{len(self.paths):06d}.bin"
        n = len(self.tokens)
        write_atomic(path + ".flags", [header(FLAGS_MAGIC, FLAGS_VERSION, n), bytes(self.flags)])
        write_atomic(path, [header(MAGIC, self.version, n), self.tokens])
        self.paths.append(path)
        self.tokens, self.flags = array.array(self.code), bytearray()

    def close(self):
        if self.tokens:
            self._flush()
        d, base = os.path.split(self.prefix)
        pattern = re.compile(re.escape(f"{base}_{self.split}_") + r"(\d{6})\.bin(\.flags)?$")
        for name in os.listdir(d or "."):
            m = pattern.match(name)
            if m and int(m.group(1)) >= len(self.paths):
                os.unlink(os.path.join(d, name))


def val_documents(per_file, fraction, seed=0):
    """The indices (over all documents, file after file) kept for validation, given each file's document
    count: floor(n × fraction) of the n in all, each file its share within one (largest remainders, ties to the
    earlier file), at positions drawn inside the file with `seed` — so neither the order of the files, nor a
    file's end, nor a period in its examples decides which documents validate."""
    exact = [n * fraction for n in per_file]
    quota = [int(round(e, 9)) for e in exact]
    left = int(round(sum(per_file) * fraction, 9)) - sum(quota)
    by_remainder = sorted(range(len(per_file)), key=lambda f: (-(exact[f] - quota[f]), f))
    for f in by_remainder[:max(left, 0)]:
        quota[f] += 1
    rng, chosen, start = random.Random(seed), set(), 0
    for n, k in zip(per_file, quota):
        chosen.update(start + i for i in rng.sample(range(n), k))
        start += n
    return chosen


# ---- main -------------------------------------------------------------------------------------------------
class Progress:
    def __init__(self, total_bytes, quiet):
        self.total, self.done, self.quiet = total_bytes, 0, quiet
        self.t0 = self.last = time.monotonic()
        self.docs = self.tokens = 0

    def __call__(self, nbytes):
        self.done += nbytes
        now = time.monotonic()
        if self.quiet or now - self.last < 5.0:
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else 0
        print(f"{PROG}: {self.docs} documents, {self.tokens / 1e6:.1f}M tokens, {self.done / 1e6:.1f}/"
              f"{self.total / 1e6:.1f} MB ({100 * self.done / max(self.total, 1):.0f} %), {rate / 1e6:.2f} MB/s, "
              f"ETA {eta:.0f} s", file=sys.stderr, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Tokenize instruction JSONL (chat, prompt/completion, "
                                 "alpaca) into token shards with loss masks and document boundaries.")
    ap.add_argument("--tokenizer", required=True, metavar="DIR",
                    help="local Hugging Face tokenizer directory (its chat_template renders chat examples)")
    ap.add_argument("--input", required=True, nargs="+", metavar="JSONL_OR_GLOB", help="JSONL files or globs")
    ap.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX_{train,val}_NNNNNN.bin(.flags)")
    ap.add_argument("--train-on-all", action="store_true",
                    help="loss on every token (default: assistant turns / completions only)")
    ap.add_argument("--val-fraction", type=float, default=0.01,
                    help="share of the documents kept for validation (PREFIX_val_*), 0 to 0.5: each file its share, "
                    "documents drawn inside it (default 0.01; 0: none)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard at most (default 100M)")
    ap.add_argument("--max-line-bytes", type=int, default=16 << 20, metavar="N",
                    help="longest input line (one example) in bytes (default 16 MiB: tokenizing a line takes a few "
                    "hundred times its size in memory)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    try:
        if args.max_line_bytes < 1:
            raise UserError(f"--max-line-bytes: given {args.max_line_bytes}; valid: ≥ 1")
        files = checked_inputs(args)
        tok = Tokenizer(args.tokenizer)
        if tok.vocab_size >= 1 << 32:
            raise UserError(f"{args.tokenizer}: vocabulary of {tok.vocab_size} tokens does not fit uint32")
        parent = os.path.dirname(args.out)
        if parent:
            os.makedirs(parent, exist_ok=True)
        progress = Progress(sum(os.path.getsize(f) for f in files), args.quiet)
        wide = tok.vocab_size > 65536
        # (ids, mask) of every document, compact (4 or 2 bytes a token and 1 for its mask, not Python lists):
        # nothing is written before every line has been read, so a bad line leaves no shard of this run behind.
        docs, per_file = [], {f: 0 for f in files}
        for where, ex in examples(files, progress, args.max_line_bytes):
            ids, mask = tokenize(tok, where, ex, args.train_on_all)
            if ids:
                docs.append((array.array("I" if wide else "H", ids), bytes(1 if m else 0 for m in mask)))
                per_file[where.rsplit(":", 1)[0]] += 1
                progress.docs += 1
                progress.tokens += len(ids)
        if not docs:
            raise UserError(f"--input {' '.join(args.input)}: no examples")
        writers = {"train": ShardWriter(args.out, "train", args.shard_tokens, wide),
                   "val": ShardWriter(args.out, "val", args.shard_tokens, wide)}
        val = val_documents(list(per_file.values()), args.val_fraction)
        for i, (ids, mask) in enumerate(docs):
            writers["val" if i in val else "train"].add(ids, mask)
        for w in writers.values():
            w.close()
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    tr, va = writers["train"], writers["val"]
    print(f"{args.tokenizer}: vocab {tok.vocab_size}; {tr.docs + va.docs} documents in "
          f"{time.monotonic() - progress.t0:.1f} s; train {tr.total} tokens ({tr.trained} with loss) in "
          f"{len(tr.paths)} shard(s) ({args.out}_train_*.bin), val {va.total} tokens ({va.trained} with loss) in "
          f"{len(va.paths)} shard(s); loss on {'every token' if args.train_on_all else 'assistant / completion tokens'}"
          f"{'; uint32 tokens (llm.c version 2)' if wide else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
