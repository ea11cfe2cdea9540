#!/usr/bin/env python3
"""`meshtrain serve`: a real server process and a real HTTP client (the standard library) on loopback.

A tiny random Llama with a Llama-3-style tokenizer and chat template (trained here on the KJV text by
tests/reference/text_support.py; nothing is downloaded) is imported, then served on a free port (--port 0: the
server prints the port it bound; the test waits for that line and for /health, never for a fixed time).
Checked against transformers' greedy generate on the same model:
  - a greedy completion of a text prompt, and of the same prompt as token ids, over one keep-alive connection;
  - several different prompts sent at once from threads, each answered with its own greedy text;
  - the same request streamed (server-sent events): the chunks concatenate to the whole text, [DONE] last;
  - stop strings: the text cut before the first match, finish_reason "stop", streamed or not;
  - a chat completion through the model's chat template;
  - a bounded waiting queue (--max-running 1 --max-waiting 1): a burst of requests gets 200s and 503s, counted
    exactly in /metrics, and so do the latency histograms and token counters; --max-waiting 0 is refused;
  - bad JSON, a field of the wrong type, max_tokens 0, a `model` other than the served one → 400 with OpenAI's
    error object and a one-line message;
    an unknown path → 404, a wrong method → 405; /metrics counts the generated tokens;
  - Expect: 100-continue answered before the body; a Content-Length over the body limit → 413;
  - a second server on the same port, one on a missing checkpoint, a bad --device or --dtype: one line, exit 2;
then SIGTERM with nothing in flight: drained at once, exit 0, and the port is free again (draining with requests
in flight: serve_drain_test.py). Last, the same checkpoint without its tokenizer files serves
a byte-level model (one token per prompt byte, greedy ids as transformers', no chat template → 400), and
SIGINT stops it with exit 0.

    serve_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers / tokenizers).
"""
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import torch
    import transformers  # noqa: F401 -- tiny_llama.py needs it; its absence skips the test
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and tokenizers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama import greedy_ids, make_tiny_llama  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_serve_")
NEW_TOKENS = 16
PROMPTS = ["And God said, Let there be light", "In the beginning", "And Moses went up", "The LORD is my",
           "Then Joseph said", "And it came to pass"]
TIMEOUT = 120  # seconds for any one wait: generous for a loaded 2-core machine
failures = []


def reference(model, tok, ids):
    """transformers' greedy reply to `ids`: (text without special tokens, finish_reason)."""
    new = greedy_ids(model, ids, NEW_TOKENS)
    reason = "stop" if new and new[-1] == model.config.eos_token_id else "length"
    return tok.decode(new, skip_special_tokens=True), reason


def check(name, cond, detail):
    if cond:
        print(f"ok: {name}")
    else:
        failures.append(f"{name}: {detail}")


def request(conn, method, path, body=None):
    """(status, parsed JSON or text) over `conn` (kept alive between calls)."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = conn.getresponse()
    text = r.read().decode()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def metric(text, name):
    """The value of `name` in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def start_server(ckpt, extra=("--max-running", "4")):
    proc = subprocess.Popen([MESHTRAIN, "serve", ckpt, "--port", "0", "--blocks", "64", "--block-size", "8",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stdout.readline, "")] + [lines.put(None)],
                     daemon=True).start()
    deadline = time.monotonic() + TIMEOUT
    seen = []
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            break
        if line is None:  # the server exited
            break
        seen.append(line)
        if "listening on http://" in line:
            return proc, int(line.rsplit(":", 1)[1])
    proc.kill()
    print(f"FAIL: the server printed no port: exit {proc.poll()}\n{''.join(seen)}\n{proc.stderr.read()}")
    sys.exit(1)


hf_dir, model, tok = make_tiny_llama(SRC, WORK)
ckpt = os.path.join(WORK, "imported")
subprocess.run([MESHTRAIN, "import", hf_dir, ckpt], check=True, capture_output=True, timeout=300)
proc, port = start_server(ckpt)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
try:
    status, body = request(conn, "GET", "/health")
    check("/health", status == 200, f"{status} {body}")

    # Greedy, as text and as token ids, on one keep-alive connection.
    ids = tok(PROMPTS[0])["input_ids"]
    want, want_reason = reference(model, tok, ids)
    greedy = {"max_tokens": NEW_TOKENS, "temperature": 0}
    status, body = request(conn, "POST", "/v1/completions", {"prompt": PROMPTS[0], **greedy})
    got = body["choices"][0] if status == 200 else {}
    check("greedy text prompt", status == 200 and got["text"] == want and got["finish_reason"] == want_reason,
          f"{status} {body}, transformers {want!r} ({want_reason})")
    check("usage", status == 200 and body["usage"]["prompt_tokens"] == len(ids)
          and body["usage"]["completion_tokens"] == len(got["token_ids"]), f"{body}")
    status, body = request(conn, "POST", "/v1/completions", {"prompt": ids, **greedy})
    check("greedy token-id prompt", status == 200 and body["choices"][0]["text"] == want, f"{status} {body}")

    # Several prompts at once, each on its own connection.
    results = {}

    def ask(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        results[i] = request(c, "POST", "/v1/completions", {"prompt": PROMPTS[i], **greedy})
        c.close()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    for i, p in enumerate(PROMPTS):
        w, _ = reference(model, tok, tok(p)["input_ids"])
        st, b = results.get(i, (None, None))
        check(f"concurrent {i}", st == 200 and b["choices"][0]["text"] == w, f"{st} {b}, transformers {w!r}")

    # Streamed: the chunks concatenate to the whole text.
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPTS[0], "stream": True, **greedy}))
    r = conn.getresponse()
    events = [line[len("data: "):] for line in r.read().decode().split("\n\n") if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    # How many chunks depends on timing (tokens sampled while a chunk is written go out together): not checked.
    streamed_ids = sum((c["choices"][0]["token_ids"] for c in chunks), [])
    check("stream", want and len(streamed_ids) == chunks[-1]["usage"]["completion_tokens"] and r.status == 200 and r.getheader("Content-Type") == "text/event-stream" and events[-1] == "[DONE]"
          and streamed == want and chunks[-1]["choices"][0]["finish_reason"] == want_reason,
          f"{r.status} {events}, transformers {want!r}")

    # Stop strings: the text ends before the first match, finish_reason "stop", nothing after it sent, streamed
    # or not; a stop string that never occurs changes nothing.
    stop = want[len(want) // 2:len(want) // 2 + 3]
    cut = want[:want.index(stop)]
    status, body = request(conn, "POST", "/v1/completions", {"prompt": PROMPTS[0], "stop": ["never!", stop], **greedy})
    got = body["choices"][0] if status == 200 else {}
    check("stop string", len(want) > 6 and status == 200 and got["text"] == cut and got["finish_reason"] == "stop"
          and body["usage"]["completion_tokens"] == len(got["token_ids"]) < NEW_TOKENS,
          f"{status} {body}, stop {stop!r} in {want!r}")
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPTS[0], "stream": True, "stop": stop,
                                                             **greedy}))
    r = conn.getresponse()
    events = [line[len("data: "):] for line in r.read().decode().split("\n\n") if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events[:-1]]
    check("stop string streamed", r.status == 200 and events[-1] == "[DONE]"
          and "".join(c["choices"][0]["text"] for c in chunks) == cut
          and chunks[-1]["choices"][0]["finish_reason"] == "stop", f"{r.status} {events}, want {cut!r}")
    status, body = request(conn, "POST", "/v1/completions", {"prompt": PROMPTS[0], "stop": "never!", **greedy})
    check("stop string not met", status == 200 and body["choices"][0]["text"] == want
          and body["choices"][0]["finish_reason"] == want_reason, f"{status} {body}")

    # Chat through the model's template.
    msgs = [{"role": "user", "content": PROMPTS[1]}]
    chat_ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    chat_ids = list(chat_ids if isinstance(chat_ids, list) else chat_ids["input_ids"])
    w, _ = reference(model, tok, chat_ids)
    status, body = request(conn, "POST", "/v1/chat/completions", {"messages": msgs, **greedy})
    check("chat", status == 200 and body["choices"][0]["message"]["content"] == w, f"{status} {body}, want {w!r}")
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"messages": msgs, "stream": True, **greedy}))
    r = conn.getresponse()
    events = [line[len("data: "):] for line in r.read().decode().split("\n\n") if line.startswith("data: ")]
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
    check("chat stream", r.status == 200 and deltas[0].get("role") == "assistant" and events[-1] == "[DONE]"
          and "".join(d.get("content", "") for d in deltas) == w, f"{r.status} {events}, want {w!r}")

    # Mistakes: one-line OpenAI errors.
    def error(name, method, path, payload, want_status, param=None):
        st, b = request(conn, method, path, payload)
        e = b.get("error", {}) if isinstance(b, dict) else {}
        one_line = "\n" not in e.get("message", "\n")
        check(name, st == want_status and e.get("type") == "invalid_request_error" and one_line
              and (param is None or e.get("param") == param), f"{st} {b}")

    error("bad JSON", "POST", "/v1/completions", b"{not json", 400)
    error("wrong type", "POST", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature")
    error("max_tokens 0", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens")
    error("no prompt", "POST", "/v1/completions", {"max_tokens": 2}, 400, "prompt")
    error("5 stop strings", "POST", "/v1/completions", {"prompt": "x", "stop": list("abcde")}, 400, "stop")
    error("unknown model", "POST", "/v1/chat/completions", {"messages": msgs, "model": "gpt-4"}, 400, "model")
    st, b = request(conn, "POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"})
    check("unknown model names the served one", st == 400 and ckpt in b["error"]["message"]
          and "gpt-4" in b["error"]["message"], f"{st} {b}")
    st, b = request(conn, "POST", "/v1/completions", {"prompt": PROMPTS[0], "model": ckpt, **greedy})
    check("the served model by name", st == 200 and b["choices"][0]["text"] == want, f"{st} {b}")
    error("unknown path", "GET", "/v2/nothing", None, 404)
    error("wrong method", "GET", "/v1/completions", None, 405)
    # Expect: 100-continue (curl sends it before larger bodies): the server says go on before the body is sent,
    # and refuses a body over the limit (8M by default) from its Content-Length alone.
    def expect_continue(body, length):
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n".encode())
            first = s.recv(4096).decode(errors="replace")
            if not first.startswith("HTTP/1.1 100"):
                return first
            s.sendall(body)
            reply = b""
            while b'"usage"' not in reply and (chunk := s.recv(65536)):
                reply += chunk
            return first + reply.decode(errors="replace")

    body = json.dumps({"prompt": PROMPTS[0], **greedy}).encode()
    reply = expect_continue(body, len(body))
    try:
        text = json.loads(reply.split("\r\n\r\n")[-1])["choices"][0]["text"]
    except (ValueError, KeyError, IndexError):
        text = None
    check("Expect: 100-continue", reply.startswith("HTTP/1.1 100") and "200 OK" in reply and text == want, reply)
    reply = expect_continue(b"", 9 << 20)
    check("body over the limit → 413", reply.startswith("HTTP/1.1 413") and "invalid_request_error" in reply, reply)

    # Start-up mistakes while it runs: its port taken, a missing checkpoint, a device or dtype it cannot use
    # (a CUDA index past the visible ones holds on every machine) — one line, exit 2.
    for name, args, fragment in (("port in use", [ckpt, "--port", str(port)], "cannot listen on 127.0.0.1:"),
                                 ("no checkpoint", [os.path.join(WORK, "nope"), "--port", "0"], "nope"),
                                 ("bad dtype", [ckpt, "--port", "0", "--dtype", "fp16"], "--dtype fp16: expected"),
                                 ("bad device", [ckpt, "--port", "0", "--device", "tpu"], "--device tpu: expected"),
                                 ("CUDA index", [ckpt, "--port", "0", "--device", "cuda:4096"], "--device cuda:4096")):
        r = subprocess.run([MESHTRAIN, "serve", *args], capture_output=True, text=True, timeout=TIMEOUT)
        err = r.stderr.strip()
        check(name, r.returncode == 2 and "\n" not in err and fragment in err, f"exit {r.returncode}: {err!r}")
    status, text = request(conn, "GET", "/metrics")
    check("/metrics", status == 200 and "meshtrain_generation_tokens_total" in text and
          "meshtrain_kv_blocks_free 64" in text, f"{status} {text}")
finally:
    conn.close()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "killed after the timeout"
check("SIGTERM → exit 0", code == 0, f"exit {code}: {proc.stderr.read()}")
with socket.socket() as s:
    # SO_REUSEADDR as servers bind (ours too): connections the server closed may linger in TIME_WAIT, but nothing
    # may still listen on the port.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
        check("port freed", True, "")
    except OSError as e:
        check("port freed", False, str(e))

# A bounded waiting queue: one request runs, one waits, the rest get 503 with OpenAI's error object at once.
# Each request is a 90-token prompt prefilled one token per step, so a burst of 8 sent together (a barrier) finds
# the queue full; which ones are refused depends on timing, so the check is on counts: every answer is 200 or
# that 503, and /metrics counts exactly the 503s seen and the 200s finished. A burst is repeated (at most 5 times)
# only if the machine spread its 8 arrivals so far apart that none was refused.
proc, port = start_server(ckpt, ["--max-running", "1", "--max-waiting", "1", "--max-step-tokens", "1"])
long_prompt = (ids * 90)[:90]
answered, generated, refused, wrong = 0, 0, 0, []


def burst(n):
    barrier, out = threading.Barrier(n), [None] * n

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        barrier.wait()
        out[i] = request(c, "POST", "/v1/completions", {"prompt": long_prompt, "max_tokens": 8, "temperature": 0})
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    return out


for _ in range(5):
    for st, b in burst(8):
        e = b.get("error", {}) if isinstance(b, dict) else {}
        if st == 503 and e.get("type") == "server_error" and "--max-waiting" in e.get("message", "") \
                and "\n" not in e["message"]:
            refused += 1
        elif st == 200 and b["usage"]["completion_tokens"] >= 1:
            answered += 1
            generated += b["usage"]["completion_tokens"]
        else:
            wrong.append((st, b))
    if refused:
        break
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
status, text = request(conn, "GET", "/metrics")
check("waiting queue full → 503", refused >= 1 and not wrong and metric(text, "meshtrain_requests_refused_total") == refused
      and metric(text, "meshtrain_requests_finished_total") == answered, f"{refused} refused, {answered} answered, "
      f"wrong {wrong}\n{text}")
# The latency histograms count every token of the answered requests: one first token each, the rest gaps.
counts = {name: metric(text, f"meshtrain_{name}") for name in (
    "time_to_first_token_seconds_count", "time_to_first_token_seconds_bucket{le=\"+Inf\"}",
    "time_between_tokens_seconds_count", "generation_tokens_total", "prompt_tokens_total")}
check("latency histograms", counts == {
    "time_to_first_token_seconds_count": answered, "time_to_first_token_seconds_bucket{le=\"+Inf\"}": answered,
    "time_between_tokens_seconds_count": generated - answered, "generation_tokens_total": generated,
    "prompt_tokens_total": 90 * answered} and metric(text, "meshtrain_time_to_first_token_seconds_sum") > 0,
      f"{counts}, {answered} answered\n{text}")
# Every engine step timed once; the tokens through the model and those the prefix cache gave cover the answered
# prompts (90 each; the prompts are the same, so later ones may share the first's full blocks), and a rate gauge
# for each kind of token.
steps = metric(text, "meshtrain_engine_steps_total")
hits = metric(text, "meshtrain_prefix_cache_hit_tokens_total")
check("step histogram, computed tokens, rates", steps and metric(text, "meshtrain_engine_step_seconds_count") == steps
      and hits is not None and metric(text, "meshtrain_computed_tokens_total") + hits >= 90 * answered
      and metric(text, "meshtrain_kv_blocks_cached") is not None
      and all((metric(text, f"meshtrain_{k}_tokens_per_second") or -1) >= 0 for k in ("generation", "computed")),
      text)
conn.close()
r = subprocess.run([MESHTRAIN, "serve", ckpt, "--max-waiting", "0"], capture_output=True, text=True, timeout=TIMEOUT)
check("--max-waiting 0 → exit 2", r.returncode == 2 and "--max-waiting" in r.stderr and "\n" not in r.stderr.strip(),
      f"exit {r.returncode}: {r.stderr!r}")
proc.send_signal(signal.SIGTERM)
check("queue server SIGTERM → exit 0", proc.wait(TIMEOUT) == 0, proc.stderr.read())

# Without a tokenizer the model is byte-level, as `meshtrain generate` treats it: one token per byte of the prompt.
shutil.rmtree(hf_dir)  # the checkpoint recorded it as where it was imported from: a place to find a tokenizer
for root, _, files in os.walk(ckpt):
    for f in files:
        if f.startswith("tokenizer") or f in ("chat_template.jinja", "special_tokens_map.json"):
            os.remove(os.path.join(root, f))
proc, port = start_server(ckpt)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
byte_ids = list(PROMPTS[2].encode())
model.generation_config.eos_token_id = None  # no tokenizer, no end-of-text token: only max_tokens ends it
with torch.no_grad():
    ref = model.generate(torch.tensor([byte_ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                         pad_token_id=0)[0, len(byte_ids):].tolist()
status, body = request(conn, "POST", "/v1/completions", {"prompt": PROMPTS[2], "max_tokens": NEW_TOKENS,
                                                         "temperature": 0})
check("byte-level prompt", status == 200 and body["choices"][0]["token_ids"] == ref
      and body["usage"]["prompt_tokens"] == len(byte_ids), f"{status} {body}, transformers {ref}")
status, body = request(conn, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
check("no chat template → 400", status == 400 and body["error"]["param"] == "messages", f"{status} {body}")
conn.close()
proc.send_signal(signal.SIGINT)
check("SIGINT → exit 0", proc.wait(TIMEOUT) == 0, proc.stderr.read())

shutil.rmtree(WORK, ignore_errors=True)
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok: meshtrain serve answers like transformers, streams, refuses bad input and stops on SIGTERM")
