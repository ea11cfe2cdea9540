#!/usr/bin/env python3
"""Tokenize text into llm.c token shards for meshtrain (data.format: llmc).

    scripts/prepare_data.py --tokenizer gpt2 --input 'corpus/*.txt' --out data/corpus
    scripts/prepare_data.py --tokenizer hf:path/to/tokenizer_dir --input book.txt --out data/book --val-fraction 0.05

Tokenizers: `gpt2` (tiktoken's GPT-2 encoding; tiktoken fetches its BPE files from the network once and
caches them — offline without that cache this is one line and exit 2) or `hf:PATH`, a local Hugging Face
tokenizer (a directory with tokenizer.json, or the tokenizer.json itself, read with `tokenizers`; other
directories through `transformers` with local_files_only — nothing is downloaded).

Every input file is one document; the end-of-text token goes between documents (GPT-2's <|endoftext|>; for
HF tokenizers the eos_token of tokenizer_config.json or a usual name, or --eot). The end of the concatenated
text (--val-fraction of its bytes, cut at a line start, as `meshtrain prepare` does) becomes validation.
Shards: PREFIX_train_000000.bin, … and PREFIX_val_000000.bin, … (llm.c: 256 × int32 header, magic 20240520,
version 1, header[2] = token count, then uint16 tokens), each written to a temporary file and renamed;
shards of the same names left from an earlier, longer run are removed. Token ids must fit uint16 (vocab < 65536).
Mistakes are one line on stderr and exit code 2.
"""
import argparse
import array
import glob
import json
import os
import re
import sys
import time

PROG = "prepare_data.py"
MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
READ_CHUNK = 1 << 20  # bytes of text per encode call (extended to the end of its line)
EOT_NAMES = ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[EOS]", "<|im_end|>"]


class UserError(Exception):
    pass


# ---- tokenizers -------------------------------------------------------------------------------------------
class Tokenizer:
    name: str
    vocab_size: int
    eot: int

    def encode(self, text):  # -> list of ids, special-token strings in the text treated as plain text
        raise NotImplementedError


class TiktokenGPT2(Tokenizer):
    def __init__(self):
        try:
            import tiktoken
        except ImportError:
            raise UserError("--tokenizer gpt2 needs tiktoken (pip install tiktoken)")
        try:
            self.enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # requests/urllib errors, blob fetch failures: all mean "cannot load it"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError("tiktoken cannot load the GPT-2 encoding offline (its BPE files come from the network "
                            "and are not cached; set TIKTOKEN_CACHE_DIR to a cache that has them): "
                            f"{type(e).__name__}: {first[:160]}")
        self.name, self.vocab_size, self.eot = "gpt2 (tiktoken)", self.enc.n_vocab, self.enc.eot_token

    def encode(self, text):
        return self.enc.encode_ordinary(text)


def _eot_candidates(path_dir, explicit):
    if explicit:
        return [explicit]
    names = []
    cfg = os.path.join(path_dir, "tokenizer_config.json") if path_dir else None
    if cfg and os.path.isfile(cfg):
        try:
            with open(cfg, encoding="utf-8") as f:
                eos = json.load(f).get("eos_token")
            if isinstance(eos, dict):
                eos = eos.get("content")
            if isinstance(eos, str):
                names.append(eos)
        except (OSError, ValueError):
            pass
    return names + EOT_NAMES


class HFTokenizers(Tokenizer):
    """tokenizer.json through the `tokenizers` library."""

    def __init__(self, path, eot_name):
        try:
            from tokenizers import Tokenizer as TK
        except ImportError:
            raise UserError(f"hf:{path} needs the tokenizers library (pip install tokenizers)")
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        try:
            self.tk = TK.from_file(file)
        except Exception as e:
            raise UserError(f"hf:{path}: cannot load {file}: {str(e).splitlines()[0] if str(e) else e!r}")
        self.name = f"hf:{path}"
        self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
        vocab = self.tk.get_vocab(with_added_tokens=True)
        if vocab:
            self.vocab_size = max(self.vocab_size, max(vocab.values()) + 1)
        self.eot = _find_eot(self.name, _eot_candidates(os.path.dirname(file), eot_name), self.tk.token_to_id)
        # "<|endoftext|>" written in the text is text, not a document boundary (tiktoken: encode_ordinary)
        if hasattr(self.tk, "encode_special_tokens"):
            self.tk.encode_special_tokens = True
        else:
            print(f"{PROG}: warning: tokenizers {getattr(sys.modules.get('tokenizers'), '__version__', '?')} "
                  "turns special-token strings in the text into special tokens (≥ 0.15 does not)", file=sys.stderr)

    def encode(self, text):
        return self.tk.encode(text, add_special_tokens=False).ids


class HFTransformers(Tokenizer):
    """Any other local tokenizer directory through transformers.AutoTokenizer (local_files_only)."""

    def __init__(self, path, eot_name):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise UserError(f"hf:{path}: no tokenizer.json there, and loading other tokenizer files needs "
                            "transformers (pip install transformers)")
        try:
            self.tk = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as e:
            raise UserError(f"hf:{path}: cannot load a tokenizer from this directory: "
                            f"{str(e).splitlines()[0] if str(e) else e!r}")
        self.name = f"hf:{path}"
        self.vocab_size = len(self.tk)
        names = [eot_name] if eot_name else ([self.tk.eos_token] if self.tk.eos_token else []) + EOT_NAMES
        unk = self.tk.unk_token_id

        def lookup(tok):
            i = self.tk.convert_tokens_to_ids(tok)
            return None if i is None or i == unk else i

        self.eot = _find_eot(self.name, names, lookup)

    def encode(self, text):
        try:
            return self.tk.encode(text, add_special_tokens=False, split_special_tokens=True)
        except TypeError:  # transformers without split_special_tokens
            return self.tk.encode(text, add_special_tokens=False)


def _find_eot(name, candidates, lookup):
    for c in candidates:
        i = lookup(c)
        if i is not None:
            return i
    raise UserError(f"{name}: no end-of-text token ({', '.join(candidates[:4])}, … not in its vocabulary); "
                    "name one with --eot TOKEN")


def load_tokenizer(spec, eot_name):
    if spec == "gpt2":
        if eot_name:
            raise UserError("--eot applies to hf: tokenizers; gpt2 uses <|endoftext|>")
        return TiktokenGPT2()
    if spec.startswith("hf:") and len(spec) > 3:
        path = os.path.expanduser(spec[3:])
        if not os.path.exists(path):
            raise UserError(f"--tokenizer {spec}: {path} does not exist (a local directory with tokenizer.json, "
                            "or the file itself; nothing is downloaded)")
        if os.path.isfile(path) or os.path.isfile(os.path.join(path, "tokenizer.json")):
            return HFTokenizers(path, eot_name)
        return HFTransformers(path, eot_name)
    raise UserError(f"--tokenizer {spec!r}: valid: gpt2 | hf:PATH")


# ---- shards -----------------------------------------------------------------------------------------------
def write_shard(path, tokens):
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    toks = tokens
    if sys.byteorder != "little":
        header.byteswap()
        toks = array.array("H", tokens)
        toks.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            header.tofile(f)
            toks.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"{path}: cannot write ({e.strerror})")


class ShardWriter:
    def __init__(self, prefix, split, shard_tokens):
        self.prefix, self.split, self.shard_tokens = prefix, split, shard_tokens
        self.buf = array.array("H")
        self.paths = []
        self.total = 0

    def add(self, ids):
        self.buf.extend(ids)  # OverflowError for ids ≥ 65536 is caught by the caller's vocab check first
        self.total += len(ids)
        while len(self.buf) >= self.shard_tokens:
            self._flush(self.buf[:self.shard_tokens])
            del self.buf[:self.shard_tokens]

    def _flush(self, tokens):
        path = f"{self.prefix}_{self.split}_{len(self.paths):06d}.bin"
        write_shard(path, tokens)
        self.paths.append(path)

    def close(self):
        if len(self.buf) or (not self.paths and self.split == "train"):
            self._flush(self.buf)
        self.buf = array.array("H")
        d, base = os.path.split(self.prefix)
        pattern = re.compile(re.escape(f"{base}_{self.split}_") + r"(\d{6})\.bin$")
        removed = []
        for name in os.listdir(d or "."):
            m = pattern.match(name)
            if m and int(m.group(1)) >= len(self.paths):
                os.unlink(os.path.join(d, name))
                removed.append(name)
        if removed:
            print(f"{PROG}: removed {len(removed)} {self.split} shard(s) left from an earlier run "
                  f"({', '.join(sorted(removed)[:3])}{', …' if len(removed) > 3 else ''})", file=sys.stderr)


# ---- input ------------------------------------------------------------------------------------------------
def checked_inputs(args):
    """The flags both preparers share, checked (UserError naming the flag); returns the input files."""
    if not 0 <= args.val_fraction <= 0.5:
        raise UserError(f"--val-fraction: given {args.val_fraction}; valid: 0 to 0.5")
    if args.shard_tokens < 1:
        raise UserError(f"--shard-tokens: given {args.shard_tokens}; valid: ≥ 1")
    return input_files(args.input)


def input_files(patterns):
    files = []
    for p in patterns:
        if glob.has_magic(p):
            matched = sorted(f for f in glob.glob(os.path.expanduser(p)) if os.path.isfile(f))
            if not matched:
                raise UserError(f"--input {p}: matches no file")
            files.extend(matched)
        elif os.path.isdir(p):
            raise UserError(f"--input {p}: is a directory; give files or a glob such as '{p.rstrip('/')}/*.txt'")
        elif not os.path.isfile(p):
            raise UserError(f"--input {p}: no such file")
        else:
            files.append(p)
    return files


def pieces(files, split_byte):
    """Yields (file_index, text, is_val) pieces of at most ~READ_CHUNK bytes, each ending at a line end (or
    the file end); the piece holding byte split_byte of the concatenation is cut at the start of its line."""
    offset = 0
    for fi, path in enumerate(files):
        file_pos = 0
        with open(path, "rb") as f:
            while True:
                data = f.read(READ_CHUNK)
                if not data:
                    break
                if not data.endswith(b"\n"):
                    data += f.readline()
                start, end = offset, offset + len(data)
                offset = end
                if start < split_byte < end:
                    local = split_byte - start
                    nl = data.rfind(b"\n", 0, local)
                    cut = nl + 1 if nl >= 0 else 0
                    if cut == 0 and start == 0:  # no line start before the split point at all
                        cut = local
                        while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # keep UTF-8 characters whole
                            cut += 1
                    parts = [(data[:cut], False, 0), (data[cut:], True, cut)]
                else:
                    parts = [(data, start >= split_byte, 0)]
                for raw, is_val, at in parts:
                    if raw:
                        try:
                            text = raw.decode("utf-8")
                        except UnicodeDecodeError as e:
                            raise UserError(f"{path}: not UTF-8 text (byte {file_pos + at + e.start})")
                        yield fi, text, is_val, len(raw)
                file_pos += len(data)


# ---- main -------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Tokenize text into llm.c token shards (uint16).")
    ap.add_argument("--tokenizer", required=True, help="gpt2 (tiktoken) | hf:PATH (local Hugging Face tokenizer)")
    ap.add_argument("--input", required=True, nargs="+", metavar="TEXT_OR_GLOB",
                    help="text files or globs (quoted); each file is one document")
    ap.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX_{train,val}_NNNNNN.bin")
    ap.add_argument("--val-fraction", type=float, default=0.05,
                    help="share of the text (its end) kept for validation, 0 to 0.5 (default 0.05)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per shard (default 100M, as llm.c)")
    ap.add_argument("--eot", metavar="TOKEN", help="hf: the end-of-text token (default: eos_token or a usual name)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    try:
        files = checked_inputs(args)
        total_bytes = sum(os.path.getsize(f) for f in files)
        if total_bytes == 0:
            raise UserError(f"--input: {', '.join(args.input)}: empty text")
        tok = load_tokenizer(args.tokenizer, args.eot)
        if tok.vocab_size >= 65536:
            raise UserError(f"{tok.name}: vocabulary of {tok.vocab_size} tokens does not fit llm.c shards "
                            "(uint16 tokens: vocab must be < 65536)")
        if not 0 <= tok.eot < 65536:
            raise UserError(f"{tok.name}: end-of-text id {tok.eot} does not fit uint16")
        parent = os.path.dirname(args.out)
        if parent:
            os.makedirs(parent, exist_ok=True)

        split_byte = total_bytes - int(total_bytes * args.val_fraction) if args.val_fraction > 0 else total_bytes
        writers = {False: ShardWriter(args.out, "train", args.shard_tokens),
                   True: ShardWriter(args.out, "val", args.shard_tokens)}
        t0 = last = time.monotonic()
        done_bytes = 0
        show = not args.quiet  # a line every 5 s: long inputs only
        prev_file = None
        for fi, text, is_val, nbytes in pieces(files, split_byte):
            w = writers[is_val]
            if prev_file is not None and fi != prev_file:
                w.add([tok.eot])  # between documents (on the side the next document starts)
            prev_file = fi
            ids = tok.encode(text)
            if ids and max(ids) >= 65536:
                raise UserError(f"{tok.name}: token id {max(ids)} ≥ 65536 does not fit uint16")
            w.add(ids)
            done_bytes += nbytes
            now = time.monotonic()
            if show and now - last >= 5.0:
                last = now
                n = writers[False].total + writers[True].total
                print(f"{PROG}: {n / 1e6:.1f}M tokens, {done_bytes / 1e6:.1f}/{total_bytes / 1e6:.1f} MB, "
                      f"{done_bytes / 1e6 / (now - t0):.2f} MB/s", file=sys.stderr, flush=True)
        for w in writers.values():
            w.close()
        if args.val_fraction > 0 and writers[True].total == 0:
            print(f"{PROG}: warning: the text is too short for a validation split; no val shard written",
                  file=sys.stderr)
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    secs = time.monotonic() - t0
    tr, va = writers[False], writers[True]
    print(f"{tok.name}: vocab {tok.vocab_size}, eot {tok.eot}; {total_bytes / 1e6:.2f} MB in {secs:.1f} s; "
          f"train {tr.total} tokens in {len(tr.paths)} shard(s) ({args.out}_train_*.bin), "
          f"val {va.total} tokens in {len(va.paths)} shard(s) ({args.out}_val_*.bin)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
