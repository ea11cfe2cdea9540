#!/usr/bin/env python3
"""`meshtrain generate` with a model's own tokenizer, against transformers on the same model.

For a Llama model with a Llama-3-style tokenizer, a Llama model with a Llama-2-style (SentencePiece, byte
fallback) tokenizer and Mistral v0.3's chat template, and a GPT-2 model with a GPT-2 tokenizer (the
tokenizers trained here on the KJV text by tests/reference/text_support.py, the models tiny and random;
nothing is downloaded): transformers saves the model, the tokenizer and a chat template into one directory,
`meshtrain import` copies the tokenizer files beside the checkpoint, and `meshtrain generate --temperature 0`
must print exactly the text transformers' greedy generate gives (prompt encoded with the tokenizer's special
tokens, reply ended by the end-of-text token, decoded without special tokens; a plain prompt's reply decoded
as the rest of the prompt's sequence, so Llama 2's decoder keeps the space between them), for a plain prompt, for
--chat (the template rendered by meshtrain), and for --chat --system; the same replies from `generate --input`
and from the server's /v1/completions and /v1/chat/completions. Then the mistakes: a chat template
outside the supported subset refuses --chat in one line (a plain prompt still works), --tokenizer at a missing
path, a tokenizer larger than the model's vocabulary — exit code 2, one line each.

    generate_tokenizer_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers / tokenizers).
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
    from transformers import PreTrainedTokenizerFast
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and tokenizers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
from text_support import train_tokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_support import Server  # noqa: E402

with open(os.path.join(SRC, "tests", "fixtures", "chat_templates", "mistral-v0.3.jinja"), encoding="utf-8") as f:
    MISTRAL = f.read()

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_generate_")
KJV = os.path.join(SRC, "data", "kjv", "kjv-genesis-2kings.txt")
NEW_TOKENS = 24
# Ends on a word: with Llama 2's byte fallback the emoji is a run of byte tokens, which a reply starting with
# byte tokens would extend when transformers decodes the whole sequence.
PROMPT = "And God said, Let there be light: 中文 😀 and there was light"
SYSTEM = "Answer as the King James Version would."
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
          "{% endif %}")
failures = []


def meshtrain(*args, expect=0):
    r = subprocess.run([MESHTRAIN, *args], capture_output=True, timeout=300)
    # Decoded by hand: text mode would turn a sampled "\r" into "\n" (universal newlines).
    r.stdout, r.stderr = (b.decode("utf-8", "surrogateescape") for b in (r.stdout, r.stderr))
    if r.returncode != expect:
        print(f"FAIL: meshtrain {' '.join(args)}: exit {r.returncode}, expected {expect}\n{r.stdout}\n{r.stderr}")
        sys.exit(1)
    return r


# Each style's end and start tokens and chat template.
SPECIALS = {"llama3": ("<|eot_id|>", "<|begin_of_text|>", LLAMA3), "llama2": ("</s>", "<s>", MISTRAL),
            "gpt2": ("<|endoftext|>", "<|endoftext|>", CHATML)}


def make_model(style, family):
    """A tiny random model saved with its tokenizer and chat template; returns (hf_dir, model, tokenizer)."""
    base = train_tokenizer(style, KJV, os.path.join(WORK, style + "_tok"))
    llama = family == "llama"
    eos, bos, template = SPECIALS[style]
    tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token=bos, eos_token=eos)
    tok.chat_template = template
    vocab = base.get_vocab_size(with_added_tokens=True)
    ids = dict(bos_token_id=tok.convert_tokens_to_ids(bos), eos_token_id=tok.convert_tokens_to_ids(eos))
    cfg = (transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, **ids)
           if llama else transformers.GPT2Config(vocab_size=vocab, n_positions=128, n_embd=64, n_layer=2, n_head=4, **ids))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():  # larger weights than the init, so greedy decoding is far from ties
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    hf_dir = os.path.join(WORK, style + "_hf")
    model.save_pretrained(hf_dir)
    tok.save_pretrained(hf_dir)
    return hf_dir, model, tok


def reference(model, tok, ids, after_prompt=False):
    """transformers' greedy reply to `ids`, decoded without special tokens: alone, or (`after_prompt`) as what
    the reply adds to the prompt's text when the whole sequence is decoded."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=model.config.eos_token_id, pad_token_id=model.config.eos_token_id)
    if after_prompt:
        prompt, whole = tok.decode(ids, skip_special_tokens=True), tok.decode(out[0].tolist(), skip_special_tokens=True)
        assert whole.startswith(prompt), (prompt, whole)
        return whole[len(prompt):]
    return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)


def check(name, got, want):
    if got != want:
        failures.append(f"{name}: meshtrain printed {got!r}, transformers {want!r}")
    else:
        print(f"ok: {name}: {got!r}")


def chat_ids(tok, messages):
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def spaced_prompt(model, tok):
    """PROMPT, or PROMPT and one more word, whose greedy reply starts with a space: the reply a decoder that
    takes it for the start of a text gets wrong (Llama 2's strips the space)."""
    # Many candidates: the tokenizer (trained here) differs from run to run, and so does each reply's first token.
    with open(KJV, encoding="utf-8") as f:
        words = list(dict.fromkeys(w.strip(".,:;") for w in f.read(20000).split()))[:80]
    for word in ["", *words]:
        prompt = f"{PROMPT} {word}".rstrip()
        ids = tok(prompt)["input_ids"]
        if reference(model, tok, ids, after_prompt=True).startswith(" "):
            return prompt, ids
    sys.exit("FAIL: no prompt among the candidates has a reply that starts with a space")


def check_batch_and_server(style, ckpt, model, tok, user):
    """A completion's text is what the reply adds to the prompt's (Llama 2 keeps the space between them) and a
    chat reply's its text alone — from `generate --input` and from the server's endpoints."""
    prompt, plain_ids = spaced_prompt(model, tok)
    reply, chat_reply = reference(model, tok, plain_ids, after_prompt=True), reference(model, tok, chat_ids(tok, user))
    prompts, outputs = os.path.join(WORK, style + "_prompts.jsonl"), os.path.join(WORK, style + "_out.jsonl")
    with open(prompts, "w", encoding="utf-8") as f:
        for line in ({"prompt": prompt}, {"messages": user}):
            f.write(json.dumps(dict(line, max_tokens=NEW_TOKENS), ensure_ascii=False) + "\n")
    meshtrain("generate", ckpt, "--input", prompts, "--output", outputs, "--temperature", "0")
    with open(outputs, encoding="utf-8") as f:
        got = [json.loads(line)["text"] for line in f]
    check(f"{style} generate --input, prompt", got[0], reply)
    check(f"{style} generate --input, messages", got[1], chat_reply)
    server = Server(MESHTRAIN, ckpt, [])
    try:
        _, body = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": NEW_TOKENS,
                                                             "temperature": 0})
        check(f"{style} /v1/completions", body["choices"][0]["text"], reply)
        _, body = server.request("POST", "/v1/chat/completions", {"messages": user, "max_tokens": NEW_TOKENS,
                                                                  "temperature": 0})
        check(f"{style} /v1/chat/completions", body["choices"][0]["message"]["content"], chat_reply)
    finally:
        server.proc.terminate()
        server.wait_exit()


for style, family in (("llama3", "llama"), ("llama2", "llama"), ("gpt2", "gpt2")):
    hf_dir, model, tok = make_model(style, family)
    out = os.path.join(WORK, style + "_imported")
    r = meshtrain("import", hf_dir, out)
    assert "tokenizer.json" in r.stdout and os.path.exists(os.path.join(out, "tokenizer.json")), r.stdout
    greedy = ["--temperature", "0", "--tokens", str(NEW_TOKENS)]
    plain_ids = tok(PROMPT)["input_ids"]
    want = tok.decode(plain_ids, skip_special_tokens=True) + reference(model, tok, plain_ids, after_prompt=True)
    check(f"{style} plain prompt", meshtrain("generate", out, "--prompt", PROMPT, *greedy).stdout[:-1], want)
    user = [{"role": "user", "content": PROMPT}]
    check(f"{style} --chat", meshtrain("generate", out, "--prompt", PROMPT, "--chat", *greedy).stdout[:-1],
          reference(model, tok, chat_ids(tok, user)))
    both = [{"role": "system", "content": SYSTEM}] + user
    check(f"{style} --chat --system",
          meshtrain("generate", out, "--prompt", PROMPT, "--chat", "--system", SYSTEM, *greedy).stdout[:-1],
          reference(model, tok, chat_ids(tok, both)))
    # The tokenizer found through --tokenizer when the checkpoint has none beside it.
    bare = os.path.join(WORK, style + "_bare")
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("tokenizer*", "chat_template.jinja", "special_tokens_map.json"))
    check(f"{style} --tokenizer DIR", meshtrain("generate", bare, "--prompt", PROMPT, "--tokenizer", hf_dir,
                                                *greedy).stdout[:-1], want)
    check_batch_and_server(style, out, model, tok, user)


def one_line_error(name, r, *fragments):
    err = r.stderr.strip()
    if "\n" in err or not all(f in err for f in fragments):
        failures.append(f"{name}: expected one line with {fragments}, got {err!r}")
    else:
        print(f"ok: {name}: {err}")


# A template outside the subset: --chat refused in one line, a plain prompt still works.
odd = os.path.join(WORK, "odd_tokenizer")
shutil.copytree(os.path.join(WORK, "llama3_hf"), odd)
with open(os.path.join(odd, "chat_template.jinja"), "w") as f:
    f.write("{% macro turn(m) %}{{ m.content }}{% endmacro %}{% for m in messages %}{{ turn(m) }}{% endfor %}")
llama_out = os.path.join(WORK, "llama3_imported")
one_line_error("unsupported template", meshtrain("generate", llama_out, "--chat", "--tokenizer", odd, expect=2),
               "'{% macro %}'", "--chat is unavailable", "chat_template.jinja")
meshtrain("generate", llama_out, "--tokenizer", odd, "--tokens", "2")
one_line_error("missing --tokenizer", meshtrain("generate", llama_out, "--tokenizer", os.path.join(WORK, "nope"),
                                                 expect=2), "--tokenizer", "no such file or directory")
one_line_error("tokenizer larger than the vocabulary",
               meshtrain("generate", os.path.join(WORK, "gpt2_imported"), "--tokenizer", os.path.join(WORK, "llama3_hf"),
                         expect=2), "the tokenizer has", "the model's vocabulary is")
one_line_error("--system without --chat", meshtrain("generate", llama_out, "--system", "x", expect=2), "--system")

shutil.rmtree(WORK, ignore_errors=True)
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok: generate with tokenizers matches transformers")
