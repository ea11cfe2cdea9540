#!/usr/bin/env python3
"""`meshtrain serve` shutting down: a real server process, real clients, a tiny random byte-level Llama
(tests/e2e/serve_support.py), --max-running 1 so requests queue behind one another.

  - SIGTERM drains: with one stream running and two whole requests queued, /health turns 503 and a new request
    gets 503 with OpenAI's error object naming the shutdown, while the three finish whole (the stream with
    [DONE]); then the server exits 0.
  - A second signal (SIGINT after the SIGTERM) cuts the drain short: the server exits 1 at once, saying how many
    requests it left unfinished, and exactly that many clients got no whole answer.
  - --drain-timeout 1 with seconds of queued work: exit 1 after the timeout, the same count.

A drain is checked only while requests are still in flight, which takes seconds of generation; should this
machine finish them all before the test's next request arrives (the server is gone then), the round is run
again, at most three times.

    serve_drain_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers).
"""
import http.client
import json
import os
import signal
import socket
import sys
import time
import tempfile
import threading

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_support import Checks, run_checked  # noqa: E402
from serve_support import TIMEOUT, Server, request, make_byte_model, shutting_down, sse_events  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_serve_drain_")
TOKENS = 3500  # per request: three of them take seconds on the CPU
check = Checks()


class Inconclusive(Exception):
    """The server finished everything (and exited) before the round could look at it draining."""


def dechunk(raw):
    """The body of a chunked HTTP response as far as it came (a cut-off one ends where it was cut)."""
    body, rest = b"", raw.split(b"\r\n\r\n", 1)[-1]
    while b"\r\n" in rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2:]
    return body.decode(errors="replace")


class InFlight:
    """One streamed request, running (its first chunk read before this returns), and `queued` whole ones waiting
    behind it (each request's prompt counted in /metrics). outcome() gives each one's 'whole' or what it got."""

    def __init__(self, server, queued=2):
        self.server, self.results = server, {}
        body = {"prompt": [1, 2, 3], "max_tokens": TOKENS, "temperature": 0}
        data = json.dumps({**body, "stream": True}).encode()
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.raw = b""
        while b"data: " not in self.raw and (chunk := self.sock.recv(65536)):
            self.raw += chunk
        self.threads = [threading.Thread(target=self.whole, args=(i, body)) for i in range(queued)]
        for t in self.threads:
            t.start()
        server.wait_metrics(lambda m: m["meshtrain_prompt_tokens_total"] == 3 * (queued + 1))
        self.stream_thread = threading.Thread(target=self.read_stream)
        self.stream_thread.start()

    def whole(self, i, body):
        try:
            status, reply = self.server.request("POST", "/v1/completions", body)
            done = status == 200 and reply["usage"]["completion_tokens"] == TOKENS
            self.results[i] = "whole" if done else f"{status} {str(reply)[:200]}"
        except (OSError, http.client.HTTPException) as e:
            self.results[i] = f"{type(e).__name__}"

    def read_stream(self):
        try:  # until the server closes the connection, which it does after a response while it drains
            while chunk := self.sock.recv(65536):
                self.raw += chunk
        except OSError:
            pass
        self.sock.close()
        events = sse_events(dechunk(self.raw))
        last = json.loads(events[-2]) if len(events) >= 2 and events[-1] == "[DONE]" else {}
        done = last.get("usage", {}).get("completion_tokens") == TOKENS
        self.results["stream"] = "whole" if done else f"stream ended: {events[-2:] if events else 'nothing'}"

    def outcome(self):
        for t in self.threads + [self.stream_thread]:
            t.join(TIMEOUT)
        return self.results


def wait_draining(server):
    """Polls /health until it answers 503 (the drain has begun); Inconclusive if the server is already gone."""
    while True:
        try:
            status, body = server.request("GET", "/health")
        except OSError:
            raise Inconclusive()
        if status == 503:
            return body
        if server.proc.poll() is not None:
            raise Inconclusive()
        time.sleep(0.01)  # a poll's interval, not a wait for an outcome


def graceful(ckpt):
    server = Server(MESHTRAIN, ckpt, ["--blocks", "1200", "--block-size", "8", "--max-running", "1"])
    work = InFlight(server)
    server.proc.send_signal(signal.SIGTERM)
    try:
        health = wait_draining(server)
        status, body = server.request("POST", "/v1/completions", {"prompt": [7], "max_tokens": 2})
    except OSError:
        raise Inconclusive()
    results, code = work.outcome(), server.wait_exit()
    if status != 503 and code == 0 and all(r == "whole" for r in results.values()):
        raise Inconclusive()
    check(shutting_down(503, health), f"draining: /health → 503 with the error object ({health})")
    check(shutting_down(status, body), f"draining: a new request → 503 naming the shutdown ({status} {body})")
    check(results == {"stream": "whole", 0: "whole", 1: "whole"},
          f"draining: the running stream and the two queued requests finish whole ({results})")
    check(code == 0 and any("drained" in line for line in server.lines),
          f"drained → exit 0 ({code}, {server.lines[-2:]}, {server.proc.stderr.read()})")


def cut_short(ckpt, how):
    """how: 'signal' (SIGINT after the SIGTERM) or 'timeout' (--drain-timeout 1)."""
    extra = ["--drain-timeout", "1"] if how == "timeout" else []
    server = Server(MESHTRAIN, ckpt, ["--blocks", "1200", "--block-size", "8", "--max-running", "1", *extra])
    work = InFlight(server)
    server.proc.send_signal(signal.SIGTERM)
    if how == "signal":
        wait_draining(server)
        server.proc.send_signal(signal.SIGINT)
    code, results = server.wait_exit(), work.outcome()
    err = server.proc.stderr.read().strip()
    unfinished = [k for k, r in results.items() if r != "whole"]
    if code == 0 and not unfinished:
        raise Inconclusive()
    cause = "a second signal" if how == "signal" else "serve.drain_timeout_s 1 s"
    check(code == 1 and unfinished and f"stopped by {cause} with {len(unfinished)} request(s) unfinished" in err
          and "\n" not in err,
          f"cut short by {cause}: exit 1 and one line counting the {len(unfinished)} unfinished ({code}, {err!r}, "
          f"{results})")


def rounds(name, fn, *args):
    for _ in range(3):
        try:
            return fn(*args)
        except Inconclusive:
            print(f"(the requests finished before the {name} round could see them in flight: again)")
    check(False, f"{name}: three rounds finished before they could be checked")


def main():
    ckpt = make_byte_model(MESHTRAIN, WORK, max_positions=4096)
    rounds("graceful", graceful, ckpt)
    rounds("second signal", cut_short, ckpt, "signal")
    rounds("drain timeout", cut_short, ckpt, "timeout")


run_checked(main, check, WORK)
