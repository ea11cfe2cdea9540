"""The chat templates that models ship (tests/fixtures/chat_templates/*.jinja: Llama 3.1 and 3.2, Qwen 2.5 and
3, Mistral v0.1 and v0.3, Gemma 2 and 3, SmolLM and SmolLM2) rendered by meshtrain (C++, text_driver) and by
transformers' apply_chat_template: the same text and the same ids for every conversation (with and without a
system message, one turn and several, ending on the user or the assistant, unicode and white space at the
edges, a reply with Qwen 3's <think> block), with add_generation_prompt true and false. A conversation a
template rejects through raise_exception (Gemma 2's system message, roles out of turn) is rejected by both,
with the template's message.

A Llama-3-style tokenizer is trained here on the KJV text (text_support.train_tokenizer, nothing downloaded)
and saved by transformers' save_pretrained with each template and the model's own bos/eos token strings.

chat_template_test.py --fixtures DIR runs it (that script checks the packages are there first).
"""
from __future__ import annotations

import datetime
import glob
import os
import tempfile

import jinja2
from transformers import PreTrainedTokenizerFast

from text_support import train_tokenizer

# The bos / eos strings of each model's tokenizer_config.json (by the fixture's name).
SPECIALS = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen": (None, "<|im_end|>"),
    "mistral": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "smollm": ("<|im_start|>", "<|im_end|>"),
}

SYSTEM = {"role": "system", "content": "  You are a careful scribe; answer in the style of the King James Version.\n"}
CONVERSATIONS = [
    [{"role": "user", "content": "In the beginning?"}],
    [SYSTEM, {"role": "user", "content": "Who made the heaven and the earth?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": " Amen, hello. "},
     {"role": "user", "content": "\n  Tell me of Moses 中文 😀 — «quoted» \t\n\n"}],
    [SYSTEM, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "He went up 3 mountains."},
     {"role": "user", "content": "and?"}],
    [{"role": "user", "content": "Count to three."},
     {"role": "assistant", "content": "<think>\nThe user wants numbers.\n</think>\n\nOne, two, three."}],
    [SYSTEM, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>r1</think>a1"},
     {"role": "user", "content": "q2"}, {"role": "assistant", "content": "\n\na2 "}],
    [{"role": "user", "content": ""}],
    # Out of turn: the templates that check the order raise, the others render it.
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
]


def family(name: str) -> str:
    return next(k for k in SPECIALS if name.startswith(k))


def reference(tok, template: str, conv: list, gen: bool) -> dict:
    try:
        text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, chat_template=template)
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    ids = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen, chat_template=template)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    return {"text": text, "ids": list(ids)}


def compare(name: str, i: int, gen: bool, want: dict, got: dict) -> str | None:
    where = f"{name} conversation {i} (generation prompt {gen})"
    if "error" in want:
        if "error" not in got or want["error"] not in got["error"] or "\n" in got["error"]:
            return f"{where}: transformers raised {want['error']!r}, meshtrain gave {got}"
        return None
    if "error" in got:
        return f"{where}: meshtrain refused it: {got['error']}"
    if got["text"] != want["text"]:
        return f"{where}: meshtrain {got['text']!r} vs transformers {want['text']!r}"
    if got["ids"] != want["ids"]:
        return f"{where}: ids differ"
    return None


def check_models(driver: str, kjv: str, fixtures_dir: str, run_driver) -> int:
    """`run_driver(driver, dir, conversations, gen)`: text_driver's answer for the conversations."""
    fixtures = sorted(glob.glob(os.path.join(fixtures_dir, "*.jinja")))
    if len(fixtures) < 10:
        print(f"expected the ten model templates in {fixtures_dir}, found {len(fixtures)}")
        return 1
    failures, checks, raised = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tokenizer("llama3", kjv, os.path.join(tmp, "base"))
        for path in fixtures:
            name = os.path.basename(path)[:-len(".jinja")]
            with open(path, encoding="utf-8") as f:
                template = f.read()
            bos, eos = SPECIALS[family(name)]
            tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token=bos, eos_token=eos)
            tok.chat_template = template
            d = os.path.join(tmp, name)
            tok.save_pretrained(d)
            for gen in (True, False):
                for i, conv in enumerate(CONVERSATIONS):
                    # strftime_now (Llama 3.2's date): both sides read the clock; a render that straddles
                    # midnight is not compared.
                    day = datetime.datetime.now().strftime("%d %b %Y")
                    want = reference(tok, template, conv, gen)
                    got = run_driver(driver, d, [conv], gen)
                    got = got if "error" in got else {"text": got["rendered"][0], "ids": got["ids"][0]}
                    if datetime.datetime.now().strftime("%d %b %Y") != day:
                        continue
                    checks += 1
                    raised += "error" in want
                    if (failure := compare(name, i, gen, want, got)) is not None:
                        failures.append(failure)
    print(f"model chat templates: {len(fixtures)} templates, {checks} renders ({raised} refused by the template), "
          f"{len(failures)} failures")
    for f in failures[:20]:
        print("  " + f)
    return 1 if failures else 0
