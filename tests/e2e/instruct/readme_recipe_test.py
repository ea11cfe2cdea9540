#!/usr/bin/env python3
"""The README's recipe, run as written (tier 4, CPU): the bash block under `<!-- recipe: … -->` in README.md — a
Hugging Face chat model's directory and a JSONL of chats to a served fine-tune in five commands — and the export
command the text beside it gives instead of serving.

Only the block's variables are this test's own: MODEL (a tiny random Llama with its tokenizer and chat template,
made here with transformers, 2048 positions so the recipe's sequence length fits), CHATS (conversations made from
the repo's KJV text), NPROC=2 and PORT=0 (the server picks a free port and prints it). Every command line runs
verbatim through bash in a scratch directory whose build/bin, .venv/bin/python, configs and scripts lead to this
build and this checkout. Checked after each command:
  1 the shards and their loss masks exist;               2 the run's validation loss fell, and its checkpoint holds
  3 eval's held-out loss is below the base model's          adapters only, naming MODEL as its base;
  4 a non-empty reply;                                   5 a real HTTP client gets a chat completion;
  export: transformers loads the merged directory and its tokenizer.
Exit code 77 (skipped) without transformers or tokenizers.
Usage: readme_recipe_test.py BIN_DIR SOURCE_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(here))  # e2e_support, serve_support, tiny_llama
try:
    import tokenizers  # noqa: F401
    import transformers
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, run_checked  # noqa: E402
from serve_support import Server, request  # noqa: E402
from tiny_llama import make_tiny_llama  # noqa: E402
from tiny_tokenizer import kjv_lines  # noqa: E402

BIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
WORK = tempfile.mkdtemp(prefix="meshtrain_readme_recipe_")
check = Checks()


def recipe():
    """(variables, commands) of the README's recipe block; the export command from the text after it."""
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    block = re.search(r"<!-- recipe:[^\n]*-->\n```bash\n(.*?)```", text, re.S)
    if not block:
        sys.exit("FAIL: README.md has no recipe block (<!-- recipe: … --> then ```bash)")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    names = [m.group(1) for line in lines if (m := re.match(r"([A-Z]+)=", line))]
    commands = [line for line in lines if not re.match(r"[A-Z]+=", line)]
    export = re.search(r"`(build/bin/meshtrain export runs/chat/checkpoints[^`\n]*)`", text[block.end():])
    return names, commands, export.group(1) if export else ""


def scratch_dir():
    """WORK/run: build/bin, .venv/bin/python, configs and scripts as the recipe names them."""
    run_dir = os.path.join(WORK, "run")
    os.makedirs(os.path.join(run_dir, "build"))
    os.makedirs(os.path.join(run_dir, ".venv", "bin"))
    os.symlink(BIN, os.path.join(run_dir, "build", "bin"))
    python = os.path.join(run_dir, ".venv", "bin", "python")
    with open(python, "w") as f:  # a wrapper, not a link: a venv's python finds its packages by its own path
        f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    os.chmod(python, 0o755)
    for name in ("configs", "scripts"):
        os.symlink(os.path.join(SRC, name), os.path.join(run_dir, name))
    return run_dir


def make_chats(path, n=8000):
    """Conversations from the KJV text, one a verse: the user gives it, the assistant answers with the next (about
    600K tokens, so the recipe's 5 % validation split holds the 8 windows of 2049 tokens that 2 workers need)."""
    verses = [line.strip() for line in kjv_lines(SRC, n) if line.strip()]
    with open(path, "w", encoding="utf-8") as f:
        for question, answer in zip(verses, verses[1:]):
            f.write(json.dumps({"messages": [{"role": "user", "content": "What follows: " + question},
                                             {"role": "assistant", "content": answer}]}) + "\n")


def bash(run_dir, env_lines, command, timeout=900):
    p = subprocess.run(["bash", "-c", "set -eu\n" + env_lines + command], cwd=run_dir, capture_output=True,
                       text=True, timeout=timeout)
    tail = (p.stdout + p.stderr)[-2000:]
    check(p.returncode == 0, f"`{command.split('#')[0].strip()}`: exit 0" +
          ("" if p.returncode == 0 else f" (exit {p.returncode}: {tail})"))
    return p.stdout + p.stderr


def eval_loss(out):
    found = re.findall(r"loss (\d+\.\d+)", out)
    return float(found[-1]) if found else float("nan")


def main():
    names, commands, export = recipe()
    check(names == ["MODEL", "CHATS", "NPROC", "PORT"] and len(commands) == 5 and export,
          f"the recipe: variables {names}, {len(commands)} commands, the export command {export!r}")
    if len(commands) != 5:
        return
    run_dir = scratch_dir()
    hf_dir, _, _ = make_tiny_llama(SRC, WORK, max_positions=2048)
    chats = os.path.join(WORK, "chats.jsonl")
    make_chats(chats)
    env_lines = f"MODEL={hf_dir}\nCHATS={chats}\nNPROC=2\nPORT=0\n"

    bash(run_dir, env_lines, commands[0])
    check(glob.glob(os.path.join(run_dir, "data", "chats_train_*.bin")) and
          glob.glob(os.path.join(run_dir, "data", "chats_val_*.bin")), "1: train and validation shards")

    out = bash(run_dir, env_lines, commands[1])
    check("shape from checkpoint.init_from" in out, "2: the model's shape taken from MODEL, said once")
    val = [r["val_loss"] for r in metrics(os.path.join(run_dir, "runs", "chat")) if "val_loss" in r] \
        if os.path.isfile(os.path.join(run_dir, "runs", "chat", "metrics.jsonl")) else []
    check(len(val) >= 2 and val[-1] < val[0] - 0.5, f"2: the validation loss fell: {val}")
    latest = os.path.join(run_dir, "runs", "chat", "checkpoints", "latest")
    step = open(latest).read().strip() if os.path.isfile(latest) else ""
    meta = os.path.join(run_dir, "runs", "chat", "checkpoints", step, "meta.json")
    lora = json.load(open(meta))["state"].get("lora", {}) if step else {}
    check(lora.get("adapters_only") and lora.get("base") == hf_dir, f"2: {step} holds adapters only over MODEL: {lora}")

    tuned = eval_loss(bash(run_dir, env_lines, commands[2]))
    base = eval_loss(bash(run_dir, env_lines, commands[2].replace("runs/chat/checkpoints", "$MODEL")))
    check(tuned < base - 0.5, f"3: held-out loss {tuned} below the base model's {base}")

    reply = bash(run_dir, env_lines, commands[3])
    check(reply.strip() != "", f"4: a reply ({reply.strip()[-200:]!r})")

    server = Server(None, None, None, argv=["bash", "-c", "set -eu\n" + env_lines + "exec " + commands[4]],
                    cwd=run_dir)
    try:
        status, body = request(server.connect(), "POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "Continue: In the beginning"}],
                                "max_tokens": 8, "temperature": 0})
        content = body["choices"][0]["message"]["content"] if status == 200 else None
        check(isinstance(content, str) and body["usage"]["completion_tokens"] > 0,
              f"5: a chat completion over HTTP ({status}: {body})")
    finally:
        server.proc.terminate()
        server.wait_exit()

    bash(run_dir, env_lines, export)
    merged = os.path.join(run_dir, "runs", "chat-hf")
    try:
        transformers.AutoModelForCausalLM.from_pretrained(merged)
        tok = transformers.AutoTokenizer.from_pretrained(merged)
        check(tok.chat_template is not None, "export: transformers loads the merged model, tokenizer and template")
    except Exception as e:  # noqa: BLE001 — any failure to load is the finding
        check(False, f"export: transformers loads {merged}: {e}")


run_checked(main, check, WORK)
