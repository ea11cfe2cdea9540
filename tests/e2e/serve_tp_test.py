#!/usr/bin/env python3
"""Tensor-parallel serving under meshrun: `meshrun --nproc-per-node 2 --no-python meshtrain generate|serve CKPT ...`,
real worker processes on the CPU backend, against the single process (docs/serving.md "Tensor parallelism").

  - generate --input: the tiny Llama of tests/e2e/tiny_llama.py (4 query heads, 2 key/value heads, a tokenizer)
    over a cache small enough to preempt: every line's greedy token ids and text under TP 2 equal TP 1's; only
    rank 0 reports progress and writes the output, and each rank holds about half of the parameters; a tiny
    byte-level GPT-2 (learned positions, biases, tied head)
    the same;
  - generate --input --quantization fp8 under TP 2: each rank holds its shards in FP8, every line answered (TP 2
    equals TP 1 within FP8's rounding, not bit for bit: the share of equal ids is printed);
  - TP 3 (4 heads do not split over 3 ranks): meshrun exits 2 with the one line naming model.n_head, no output;
  - serve: an httpx client gets the same greedy text from TP 2 as from TP 1, whole and streamed (the chunks add up
    to the text, [DONE] last) and a chat completion; after an idle spell longer than --tp-timeout (the heartbeat
    keeps rank 1 waiting) the next request is answered;
  - SIGTERM to meshrun with a stream in flight: the stream finishes whole, rank 0 drains and stops the others
    (no failure reported), meshrun exits with 128 + SIGTERM as for any job it was told to stop (docs/launcher.md)
    and no worker is left; SIGTERM to rank 0 alone: the job exits 0;
  - a port already taken: rank 0, the only rank that binds, exits 2 with its one line, and so does meshrun;
  - kill -9 of rank 1: meshrun tears the group down and exits non-zero, no worker left.
Every wait has a deadline; loopback only.

    serve_tp_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers / tokenizers / httpx).
"""
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import httpx
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers, tokenizers and httpx into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama import make_tiny_llama  # noqa: E402

MESHTRAIN, MESHRUN = os.path.join(BIN, "meshtrain"), os.path.join(BIN, "meshrun")
WORK = tempfile.mkdtemp(prefix="meshtrain_serve_tp_")
TIMEOUT = 300  # seconds for any one process or wait: generous for a loaded 2-core machine
CACHE = ["--blocks", "16", "--block-size", "4", "--max-running", "4", "--max-step-tokens", "24"]
failures = []


def check(name, cond, detail=""):
    if cond:
        print(f"ok: {name}")
    else:
        failures.append(f"{name}: {detail}")
        print(f"FAIL: {name}: {detail}")


def meshrun(nproc, *args):
    return [MESHRUN, "--standalone", "--nproc-per-node", str(nproc), "--shutdown-timeout", "60", "--no-python",
            MESHTRAIN, *args]


def check_split(name, said):
    """Each rank says how many of the model's parameters it holds: about half each, not the whole model."""
    held = {int(r): (int(n), int(t)) for r, n, t in
            re.findall(r"tensor parallelism over 2 ranks: rank (\d) holds (\d+) of the model's (\d+) parameters", said)}
    check(f"{name}: each rank holds about half of the parameters", sorted(held) == [0, 1] and
          all(t * 0.45 < n < t * 0.6 for n, t in held.values()), f"{held}\n{said}")


def write_lines(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def read_out(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def generate(cmd_prefix, ckpt, inp, out):
    return subprocess.run([*cmd_prefix, "generate", ckpt, "--input", inp, "--output", out, "--temperature", "0",
                           "--max-tokens", "12", *CACHE], capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, MESHTRAIN_PROGRESS_EVERY_S="0"))


def compare_generate(name, ckpt, lines):
    inp = os.path.join(WORK, f"{name}.jsonl")
    write_lines(inp, lines)
    out1, out2 = os.path.join(WORK, f"{name}.tp1.jsonl"), os.path.join(WORK, f"{name}.tp2.jsonl")
    r1 = generate([MESHTRAIN], ckpt, inp, out1)
    check(f"{name}: TP 1 exit 0", r1.returncode == 0, r1.stderr)
    r2 = generate(meshrun(2), ckpt, inp, out2)
    check(f"{name}: TP 2 under meshrun exit 0", r2.returncode == 0, f"exit {r2.returncode}\n{r2.stdout}\n{r2.stderr}")
    if r1.returncode or r2.returncode:
        return
    a, b = read_out(out1), read_out(out2)
    check(f"{name}: one line per prompt", len(a) == len(b) == len(lines), f"{len(a)} / {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        check(f"{name} line {i}: TP 2 token ids = TP 1", x["token_ids"] == y["token_ids"] and len(x["token_ids"]) > 0,
              f"TP 1 {x['token_ids']}, TP 2 {y['token_ids']}")
        check(f"{name} line {i}: text, finish reason, usage", (x["text"], x["finish_reason"], x["usage"]) ==
              (y["text"], y["finish_reason"], y["usage"]), f"{x} / {y}")
    check_split(name, r2.stdout + r2.stderr)
    progress = r2.stdout + r2.stderr
    check(f"{name}: rank 0 reports, rank 1 does not", f"[rank 0]: generate: {len(lines)}/{len(lines)}" in progress
          and "[rank 1]: generate:" not in progress and "[rank 1]: meshtrain generate: wrote" not in progress,
          progress)
    return r2


# --- generate --input: Llama with a tokenizer ----------------------------------------------------------------------
hf_dir, model, tok = make_tiny_llama(SRC, WORK)
llama = os.path.join(WORK, "llama")
subprocess.run([MESHTRAIN, "import", hf_dir, llama], check=True, capture_output=True, timeout=TIMEOUT)
PROMPTS = ["And God said, Let there be light", "In the beginning", "And Moses went up", "The LORD is my",
           "Then Joseph said", "And it came to pass"]
lines = [{"prompt": p, "id": i} for i, p in enumerate(PROMPTS)]
lines += [{"prompt": tok(PROMPTS[0])["input_ids"], "max_tokens": 5},
          {"messages": [{"role": "user", "content": PROMPTS[1]}]}]
compare_generate("llama", llama, lines)

# --- FP8 block weights under TP 2: each rank holds its shards in FP8 (the CPU's composite maths). The row-parallel
# layers scale each rank's slice of a row by its own maximum, so TP 2 equals TP 1 within FP8 rounding, not bit for
# bit: every line answered, each rank's weights line printed, the share of equal ids shown.
fp8_in, fp8_out1, fp8_out2 = (os.path.join(WORK, f) for f in ("fp8.jsonl", "fp8.tp1.jsonl", "fp8.tp2.jsonl"))
write_lines(fp8_in, lines)
r1 = subprocess.run([MESHTRAIN, "generate", llama, "--input", fp8_in, "--output", fp8_out1, "--temperature", "0",
                     "--max-tokens", "12", "--quantization", "fp8", *CACHE], capture_output=True, text=True,
                    timeout=TIMEOUT)
r2 = subprocess.run([*meshrun(2), "generate", llama, "--input", fp8_in, "--output", fp8_out2, "--temperature", "0",
                     "--max-tokens", "12", "--quantization", "fp8", *CACHE], capture_output=True, text=True,
                    timeout=TIMEOUT, env=dict(os.environ, MESHTRAIN_PROGRESS_EVERY_S="0"))
said = r2.stdout + r2.stderr
check("fp8 TP 1 and TP 2: exit 0", r1.returncode == 0 and r2.returncode == 0,
      f"TP 1 exit {r1.returncode}: {r1.stderr}\nTP 2 exit {r2.returncode}: {said}")
if r1.returncode == 0 and r2.returncode == 0:
    a, b = read_out(fp8_out1), read_out(fp8_out2)
    check("fp8 TP 2: one line per prompt, each with tokens", len(b) == len(lines) and all(x["token_ids"] for x in b),
          f"{b}")
    check("fp8 TP 2: both ranks hold their shards in FP8", said.count("FP8 weights: 14 linear layers") == 2, said)
    same = sum(x == y for p, q in zip(a, b) for x, y in zip(p["token_ids"], q["token_ids"]))
    print(f"fp8: TP 2 gave {same} of {sum(len(p['token_ids']) for p in a)} token ids equal to TP 1's")

# --- TP 3: 4 heads cannot be split -----------------------------------------------------------------------------------
bad_out = os.path.join(WORK, "tp3.jsonl")
r = generate(meshrun(3), llama, os.path.join(WORK, "llama.jsonl"), bad_out)
said = r.stdout + r.stderr
check("TP 3: exit 2", r.returncode == 2, f"exit {r.returncode}\n{said}")
check("TP 3: one line naming model.n_head", "model.n_head 4 is not divisible by 3" in said, said)
check("TP 3: no output", not os.path.exists(bad_out), "an output file was written")

# --- generate --input: GPT-2 (learned positions, biases, tied head), byte-level -------------------------------------
torch.manual_seed(0)
gpt2_cfg = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4)
gpt2_hf, gpt2 = os.path.join(WORK, "gpt2_hf"), os.path.join(WORK, "gpt2")
gpt2_model = transformers.GPT2LMHeadModel(gpt2_cfg).float().eval()
with torch.no_grad():  # larger weights than the init, so greedy decoding is far from ties
    for p in gpt2_model.parameters():
        p.add_(torch.randn_like(p) * 0.2)
gpt2_model.save_pretrained(gpt2_hf)
subprocess.run([MESHTRAIN, "import", gpt2_hf, gpt2], check=True, capture_output=True, timeout=TIMEOUT)
compare_generate("gpt2", gpt2, [{"prompt": list(p.encode())} for p in PROMPTS[:5]])


# --- serve ----------------------------------------------------------------------------------------------------------
class Server:
    """A `meshtrain serve` job (one process, or meshrun's group): its port from the line rank 0 prints."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.out, self.err = [], []
        got = queue.Queue()

        def read(stream, into, tell):
            for line in iter(stream.readline, ""):
                into.append(line)
                if tell:
                    got.put(line)
            if tell:
                got.put(None)

        threading.Thread(target=read, args=(self.proc.stdout, self.out, True), daemon=True).start()
        threading.Thread(target=read, args=(self.proc.stderr, self.err, False), daemon=True).start()
        deadline = time.monotonic() + TIMEOUT
        self.port = None
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = got.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            if "listening on http://" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
                break
        if self.port is None:
            self.kill()
            sys.exit(f"FAIL: the server printed no port: exit {self.proc.poll()}\n{self.text()}")
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=TIMEOUT)

    def text(self):
        return "".join(self.out) + "".join(self.err)

    def workers(self):
        """{rank: pid} of meshrun's workers (read from their environment)."""
        ranks = {}
        kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        for pid in map(int, kids.stdout.split()):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            except OSError:
                continue
            if b"RANK" in env:
                ranks[int(env[b"RANK"])] = pid
        return ranks

    def complete(self, prompt, max_tokens=12):
        r = self.client.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
        r.raise_for_status()
        return r.json()["choices"][0]["text"]

    def chat(self, content):
        r = self.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}],
                                                           "max_tokens": 12, "temperature": 0})
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"]

    def stream(self, prompt, max_tokens=12, first_chunk=None):
        """The streamed text and whether [DONE] came last; `first_chunk()` is called once the first chunk is in."""
        parts, done = [], False
        with self.client.stream("POST", "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens,
                                                                  "temperature": 0, "stream": True}) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                parts.append(json.loads(line[6:])["choices"][0]["text"])
                if first_chunk and len(parts) == 1:
                    first_chunk()
        return "".join(parts), done

    def wait(self):
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def gone(pids):
    """True once none of `pids` runs (a zombie counts as gone); waits up to TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


SERVE = ["serve", llama, "--port", "0", "--blocks", "64", "--block-size", "4", "--max-running", "4"]
single = Server([MESHTRAIN, *SERVE])
want_whole = {p: single.complete(p) for p in PROMPTS[:4]}
want_chat = single.chat(PROMPTS[2])
long_prompt = PROMPTS[5]
want_long = single.complete(long_prompt, max_tokens=60)
kv_tp1 = float(re.search(r"KV cache: 64 blocks of 4 tokens \(256 tokens\), (\d+\.\d+) MiB", single.text()).group(1))
single.proc.send_signal(signal.SIGTERM)
check("TP 1 server: SIGTERM exit 0", single.wait() == 0, single.text())

# --tp-timeout 20: long enough for the ranks' start-up on a loaded machine (it bounds their rendezvous too), short
# enough to idle past it below.
tp = Server(meshrun(2, *SERVE, "--tp-timeout", "20"))
workers = tp.workers()
check("TP 2 server: two workers", sorted(workers) == [0, 1], f"{workers}")
check_split("TP 2 server", tp.text())
kv = re.search(r"\[rank 0\]: meshtrain serve: KV cache: 64 blocks of 4 tokens \(256 tokens\), (\d+\.\d+) MiB per rank "
               r"\(2 tensor-parallel ranks\)", tp.text())
check("TP 2 server: the KV cache line counts a rank's half of the heads", kv and abs(float(kv.group(1)) * 2 - kv_tp1) < 0.015,
      f"{kv_tp1} MiB for TP 1\n{tp.text()}")
for p, want in want_whole.items():
    check(f"TP 2 whole answer = TP 1 ({p!r})", tp.complete(p) == want, f"{tp.complete(p)!r} vs {want!r}")
for p in PROMPTS[:2]:
    text, done = tp.stream(p)
    check(f"TP 2 streamed answer = TP 1 ({p!r}), [DONE] last", text == want_whole[p] and done, f"{text!r} {done}")
check("TP 2 chat = TP 1", tp.chat(PROMPTS[2]) == want_chat)
# Longer than --tp-timeout with nothing to run: rank 0's heartbeat keeps rank 1's wait from timing out.
idle_until = time.monotonic() + 22.0
while time.monotonic() < idle_until:
    time.sleep(max(0.0, idle_until - time.monotonic()))
check("TP 2 answers after an idle spell longer than --tp-timeout", tp.complete(PROMPTS[3]) == want_whole[PROMPTS[3]],
      tp.text())
# SIGTERM to meshrun while a stream runs: it finishes whole, every rank leaves, no worker is left.
text, done = tp.stream(long_prompt, max_tokens=60, first_chunk=lambda: tp.proc.send_signal(signal.SIGTERM))
check("SIGTERM to meshrun: the stream in flight finishes whole", text == want_long and done, f"{text!r} {done}")
code = tp.wait()
said = tp.text()
check("SIGTERM to meshrun: rank 0 drained and stopped the others", "[rank 0]: meshtrain serve: drained, stopped" in said
      and "root cause" not in said.lower() and "failed" not in said, said)
check("SIGTERM to meshrun: exit 128 + SIGTERM (meshrun's code for a job it was told to stop)", code == 143,
      f"exit {code}\n{said}")
check("SIGTERM to meshrun: no worker left", gone(workers.values()), f"{workers}")

# SIGTERM to rank 0 alone: it drains, stops rank 1, and the job exits 0.
tp = Server(meshrun(2, *SERVE))
workers = tp.workers()
check("second TP 2 server answers", tp.complete(PROMPTS[0]) == want_whole[PROMPTS[0]])
os.kill(workers[0], signal.SIGTERM)
code = tp.wait()
check("SIGTERM to rank 0: the job exits 0", code == 0, f"exit {code}\n{tp.text()}")
check("SIGTERM to rank 0: no worker left", gone(workers.values()), f"{workers}")

# The port taken: rank 0 (the only one that binds) exits 2 with its one line, and so does the job.
with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    r = subprocess.run(meshrun(2, "serve", llama, "--port", str(port)), capture_output=True, text=True,
                       timeout=TIMEOUT)
said = r.stdout + r.stderr
check("port taken under meshrun: exit 2 naming the port", r.returncode == 2 and
      f"[rank 0]: meshtrain: error: cannot listen on 127.0.0.1:{port}" in said, f"exit {r.returncode}\n{said}")

# kill -9 of rank 1: meshrun tears the group down and fails.
tp = Server(meshrun(2, *SERVE))
workers = tp.workers()
check("third TP 2 server answers", tp.complete(PROMPTS[1]) == want_whole[PROMPTS[1]])
os.kill(workers[1], signal.SIGKILL)
code = tp.wait()
check("kill -9 of rank 1: meshrun exits non-zero", code not in (0, None), f"exit {code}\n{tp.text()}")
check("kill -9 of rank 1: the root cause names rank 1",
      re.search(r"root cause \(first worker to fail\):\s*\n\s*rank\s*: 1 ", tp.text()), tp.text())
check("kill -9 of rank 1: no worker left", gone(workers.values()), f"{workers}")

shutil.rmtree(WORK, ignore_errors=True)
if failures:
    print(f"{len(failures)} failure(s):\n" + "\n".join(failures))
    sys.exit(1)
print("all passed")
