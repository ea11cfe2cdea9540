#!/usr/bin/env python3
"""meshtrain's chat-template renderer (C++, text_driver) against transformers' apply_chat_template.

A Llama-3-style tokenizer is trained here on the KJV text (text_support.train_tokenizer, nothing downloaded)
and saved with transformers' save_pretrained together with each template below: ChatML, a Llama-3-style
template (bos_token, trim, loop.index0), and templates that use the rest of the supported subset (system
message split off with messages[1:], whitespace control over several lines under trim_blocks/lstrip_blocks,
elif/else, for-else, loop.last/length, `is defined`, `in`, `|length`, `~`, string methods, integer
arithmetic, raise_exception). For every conversation both sides must give the same text and the same ids.
A template transformers refuses through raise_exception must fail in meshtrain too, and templates with
constructs outside the subset must fail with one line naming the construct.

With --fixtures DIR it checks the models' own templates instead (chat_template_models.py).

Usage: chat_template_test.py --driver PATH/text_driver --kjv FILE [--fixtures tests/fixtures/chat_templates]
Exit 0 pass, 1 mismatch, 77 skipped (no tokenizers / transformers / jinja2).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2  # noqa: F401
    import tokenizers  # noqa: F401
    from transformers import PreTrainedTokenizerFast
except ImportError as e:  # pragma: no cover
    print(f"SKIP: the chat-template test needs tokenizers, transformers and jinja2 in {sys.executable}: {e}")
    sys.exit(77)

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_support import train_tokenizer  # noqa: E402

# The {% generation %} template instruction data is prepared with in the e2e tests (scripts/prepare_instruct.py
# marks the assistant's span from it): `generate --chat` on such a model renders it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "instruct"))
from tiny_tokenizer import GENERATION  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
          "{% endif %}")
MULTILINE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system = "You are a helpful assistant." %}
    {%- set rest = messages %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' ~ system ~ '<|eot_id|>' }}
{%- for message in rest %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message.role == 'assistant' and message.content.strip().startswith('Amen') %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n(amen) ' + message.content.strip() + '<|eot_id|>' }}
    {%- elif message.role in ['user', 'assistant'] %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message['content'] | trim }}
        {{- '<|eot_id|>' }}
    {%- else %}
        {{- raise_exception('unknown role ' ~ message.role) }}
    {%- endif %}
    {%- if loop.last and rest | length > 2 %}{{ '(' ~ loop.length ~ ' turns, ' ~ (loop.length * 3 // 2) ~ ')' }}{% endif %}
{%- else %}
    {{- 'no turns' }}
{%- endfor %}
{%- if add_generation_prompt is defined and add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
# Not stripped: lstrip_blocks/trim_blocks decide the whitespace of these lines.
BLOCKS = """{% for message in messages %}
  {% if message.role == 'system' %}
<<SYS>> {{ message.content }} <</SYS>>
  {% else %}
[{{ message.role | upper }}] {{ message.content }}
  {% endif %}
{% endfor %}
{# a comment line #}
{% if add_generation_prompt %}[ASSISTANT]{% endif %}
"""
# The constructs of the models' own templates (tests/fixtures/chat_templates, chat_template_models.py)
# one by one, where a conversation reaches each of them: namespace() and `set ns.x`, tojson (unicode, escapes,
# indent, sort_keys), items / .items() with unpacking, a for loop's `if`, selectattr / rejectattr / select /
# reject / map / join / list / first / last / default, split, replace, strip with characters, slices with a
# step, previtem / nextitem, a block set, range, dict(), strftime_now as a defined name, is mapping /
# iterable / sequence / string / false, and {% generation %} markers, which render their body.
BUILTINS = """{%- set ns = namespace(users=0, last='') %}
{%- for m in messages %}
    {%- if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% set ns.last = m.content %}{% endif %}
{%- endfor %}
{{- ns.users ~ ' users, last ' ~ ns.last | tojson }}
{{- '|' ~ messages | tojson }}
{{- '|' ~ messages[0] | tojson(indent=2) }}
{{- '|' ~ messages[-1] | tojson(indent=4, sort_keys=true) }}
{%- for k, v in messages[0] | items %}{{ '|' ~ k ~ '=' ~ v | length }}{% endfor %}
{%- for k, v in messages[0].items() if k != 'role' %}{{ '|only ' ~ k ~ ' of ' ~ loop.length }}{% endfor %}
{{- '|' ~ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | map('trim') | join(', ') }}
{{- '|' ~ messages | rejectattr('role', 'equalto', 'user') | list | length }}
{{- '|' ~ ['a', 'b', 'a'] | reject('equalto', 'a') | first ~ (['x'] | select | list | last) }}
{{- '|' ~ (messages[0].missing | default('none given')) ~ messages[0].get('role') ~ messages[0].get('x', 'X') }}
{{- '|' ~ messages[0].content.split() | join('+') ~ '|' ~ 'a,b,,c'.split(',') | length ~ 'a b c'.split(' ', 1)[1] }}
{{- '|' ~ messages[-1].content.replace(' ', '_') ~ '|' ~ '\n\nx \n'.strip('\n') ~ '|' ~ 'xxhixx'.rstrip('x').lstrip('x') }}
{{- '|' ~ messages[::-1] | map(attribute='role') | join(',') ~ '|' ~ 'héllo😀'[::2] ~ 'héllo'[1:-1] ~ 'héllo' | length }}
{%- for m in messages %}{% if loop.previtem is defined %}{{ '|' ~ loop.previtem.role ~ '>' ~ m.role }}{% endif %}{% if loop.nextitem is undefined %}{{ '|end' }}{% endif %}{% endfor %}
{%- set block %}{{ messages | length }} turns{% endset %}
{{- '|' ~ block ~ '|' ~ range(3) | join ~ range(1, 7, 2) | join(',') ~ dict(a=1) | tojson }}
{{- '|' ~ (strftime_now is defined) ~ (messages[0] is mapping) ~ (messages is iterable) ~ (none is iterable) ~ (messages is sequence) ~ (false is false) ~ (0 is false) }}
{{- '|' ~ 'Hello World'.title() ~ 'hello'.capitalize() ~ 'ab'.upper() ~ ('abc'.startswith('a')) ~ 'banana'.count('a') ~ 'banana'.find('n') }}
{%- for m in messages %}{% generation %}{{ '|' ~ m.role }}{% set scoped = 1 %}{% endgeneration %}{% endfor %}
{{- '|' ~ (scoped is defined) }}
{%- if add_generation_prompt %}{{ '|gen' }}{% endif %}
"""
TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3, "multiline": MULTILINE, "blocks": BLOCKS, "builtins": BUILTINS,
             "generation": GENERATION}
UNSUPPORTED = {
    "macro": ("{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}", "'{% macro %}'"),
    "break": ("{% for m in messages %}{% break %}{% endfor %}", "'{% break %}'"),
    "dict literal": "{{ {'a': 1} | tojson }}",
    "tuple": "{% for a, b in [(1, 2)] %}{{ a }}{% endfor %}",
    "wordwrap": ("{{ messages[0].content | wordwrap(5) }}", "filter 'wordwrap'"),
    "format": ("{{ '%s'.format(1) }}", "method '.format()'"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "In the beginning?"}],
    [{"role": "system", "content": "  Answer in the style of the King James Version.\n"},
     {"role": "user", "content": "Who made the heaven and the earth?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": " Amen, hello. "},
     {"role": "user", "content": "\n  Tell me of Moses said <tool> things 中文 😀\n\n"},
     {"role": "assistant", "content": "He went up 3 mountains."}, {"role": "user", "content": "and?"}],
    [{"role": "system", "content": "Only a system message (the for loop's else)."}],
]
# `tojson` of a conversation holds its unicode and escapes as Python's json.dumps writes them.
CONVERSATIONS.append([{"role": "user", "content": 'Quote " back\\slash \t tab \x01 ctl, é 中 😀'},
                      {"role": "assistant", "content": ""}])
BAD_CONVERSATION = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def reference(tok, template: str, conv: list, gen: bool):
    tok.chat_template = template
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
    ids = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    return text, list(ids)


def run_driver(driver: str, d: str, convs: list, gen: bool) -> dict:
    req, out = os.path.join(d, "request.json"), os.path.join(d, "out.json")
    with open(req, "w", encoding="utf-8") as f:
        json.dump({"conversations": convs, "add_generation_prompt": gen}, f)
    subprocess.run([driver, "chat", d, req, out], check=True)
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--kjv", required=True)
    ap.add_argument("--fixtures", help="the models' templates (tests/fixtures/chat_templates): check those instead")
    args = ap.parse_args()
    if args.fixtures:
        from chat_template_models import check_models
        return check_models(args.driver, args.kjv, args.fixtures, run_driver)
    failures, checks = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tokenizer("llama3", args.kjv, os.path.join(tmp, "base"))
        tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
        for name, template in TEMPLATES.items():
            d = os.path.join(tmp, name)
            tok.chat_template = template
            tok.save_pretrained(d)
            if name == "chatml":  # the older layout: the template inside tokenizer_config.json
                os.remove(os.path.join(d, "chat_template.jinja"))
                with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
                    cfg = json.load(f)
                cfg["chat_template"] = template
                with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                    json.dump(cfg, f)
            for gen in (True, False):
                got = run_driver(args.driver, d, CONVERSATIONS, gen)
                if "error" in got:
                    failures.append(f"{name}: meshtrain refused it: {got['error']}")
                    continue
                for i, conv in enumerate(CONVERSATIONS):
                    text, ids = reference(tok, template, conv, gen)
                    checks += 1
                    if got["rendered"][i] != text:
                        failures.append(f"{name} conversation {i} (generation prompt {gen}): meshtrain "
                                        f"{got['rendered'][i]!r} vs transformers {text!r}")
                    elif got["ids"][i] != ids:
                        failures.append(f"{name} conversation {i}: ids differ")
        # A conversation the template itself rejects fails on both sides.
        d = os.path.join(tmp, "multiline")
        got = run_driver(args.driver, d, [BAD_CONVERSATION], True)
        checks += 1
        if "error" not in got or "roles must alternate" not in got["error"]:
            failures.append(f"multiline: raise_exception did not stop meshtrain: {got}")
        for name, template in UNSUPPORTED.items():
            template, construct = template if isinstance(template, tuple) else (template, name)
            d = os.path.join(tmp, "unsupported_" + name)
            tok.chat_template = template
            tok.save_pretrained(d)
            got = run_driver(args.driver, d, CONVERSATIONS[:1], True)
            checks += 1
            err = got.get("error", "")
            if not err or construct not in err or "\n" in err or "chat_template" not in err:
                failures.append(f"unsupported {name}: expected one line naming '{construct}', got {got}")
            else:
                print(f"  {name}: {err}")
    print(f"chat templates: {checks} checks, {len(failures)} failures")
    for f in failures[:20]:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
