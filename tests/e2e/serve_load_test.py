#!/usr/bin/env python3
"""`meshtrain serve` under load and when clients go away: a real server process, real sockets, a tiny random
byte-level Llama (tests/e2e/serve_support.py).

  - Malformed JSON, max_tokens -1, an unknown model, a prompt longer than the model's context: 400 with
    OpenAI's error object on one line each, and the server answers the next request.
  - A client that reads two chunks of a long stream and closes its socket: the request is aborted, the KV blocks
    it held return (/metrics' used-blocks gauge back at 0, polled) and requests_aborted_total counts it. The same
    for a whole (non-streamed) request whose client closes while it runs.
  - 500 requests from 64 client threads (half streamed) against --max-running 16 --max-waiting 40: every request
    gets a status, a 200 with the whole answer (max_tokens tokens, finish_reason length, [DONE] last when
    streamed) or a 503 with OpenAI's error object naming --max-waiting; none is lost or hangs (each has a
    timeout). Afterwards /metrics shows no block used, nothing running or waiting, finished = the 200s, refused =
    the 503s, and the two add up to 500. Which requests are refused depends on timing: only counts are checked.

    serve_load_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers).
"""
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

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
from serve_support import TIMEOUT, Server, make_byte_model, request, sse_events  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_serve_load_")
LONG = 8000  # tokens: a request that runs for seconds, so a client can leave it mid-way
check = Checks()
SHOWN = ("requests_running", "requests_waiting", "kv_blocks_used", "requests_finished_total",
         "requests_aborted_total", "requests_refused_total")


def shown(m):
    """The figures a check's message shows."""
    return {k: int(m[f"meshtrain_{k}"]) for k in SHOWN}


def raw_post(port, body):
    """A socket with a POST /v1/completions sent on it, for a client that will go away."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def bad_input(server, ckpt):
    """Each mistake of the issue's list → 400 with OpenAI's error object on one line; the server stays up."""
    too_long = {"prompt": [7] * 8300, "max_tokens": 4}  # past the model's 8192 positions, within the cache
    for name, body, param in (("malformed JSON", b"{\"prompt\": [1, 2", None),
                              ("max_tokens -1", {"prompt": [1], "max_tokens": -1}, "max_tokens"),
                              ("unknown model", {"prompt": [1], "model": "gpt-4"}, "model"),
                              ("a prompt longer than the context", too_long, None)):
        conn = server.connect()
        conn.request("POST", "/v1/completions", body=body if isinstance(body, bytes) else json.dumps(body))
        r = conn.getresponse()
        reply = json.loads(r.read())
        conn.close()
        e = reply.get("error", {})
        check(r.status == 400 and e.get("type") == "invalid_request_error" and "\n" not in e.get("message", "\n")
              and (param is None or e.get("param") == param), f"{name} → 400 ({r.status} {reply})")
    status, reply = server.request("POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 3, "model": ckpt})
    check(status == 200 and reply["usage"]["completion_tokens"] == 3, f"the server stays up ({status} {reply})")


def disconnects(ckpt):
    server = Server(MESHTRAIN, ckpt, ["--blocks", "1100", "--block-size", "8", "--max-running", "1"])
    try:
        bad_input(server, ckpt)
        # A stream: read two chunks, then close.
        s = raw_post(server.port, {"prompt": [1, 2, 3], "max_tokens": LONG, "temperature": 0, "stream": True})
        got = b""
        while got.count(b"data: ") < 2 and (chunk := s.recv(65536)):
            got += chunk
        running = server.metrics()
        s.close()
        check(got.startswith(b"HTTP/1.1 200") and got.count(b"data: ") >= 2 and running["meshtrain_kv_blocks_used"] > 0,
              f"a long stream runs and holds KV blocks ({running['meshtrain_kv_blocks_used']:.0f} used)")
        m = server.wait_metrics(lambda m: m["meshtrain_kv_blocks_used"] == 0 and m["meshtrain_requests_aborted_total"] == 1)
        check(m["meshtrain_kv_blocks_used"] == 0 and m["meshtrain_requests_aborted_total"] == 1
              and m["meshtrain_requests_running"] == 0 and m["meshtrain_requests_finished_total"] == 1,
              f"stream client gone → aborted, its blocks free again: {shown(m)}")

        # A whole answer: the client closes while the engine runs its request.
        s = raw_post(server.port, {"prompt": [4, 5, 6], "max_tokens": LONG, "temperature": 0})
        m = server.wait_metrics(lambda m: m["meshtrain_requests_running"] == 1 and m["meshtrain_kv_blocks_used"] > 0)
        check(m["meshtrain_requests_running"] == 1, f"a long whole request runs: {shown(m)}")
        s.close()
        m = server.wait_metrics(lambda m: m["meshtrain_kv_blocks_used"] == 0 and m["meshtrain_requests_aborted_total"] == 2)
        check(m["meshtrain_kv_blocks_used"] == 0 and m["meshtrain_requests_aborted_total"] == 2
              and m["meshtrain_requests_running"] == 0 and m["meshtrain_requests_finished_total"] == 1,
              f"whole-answer client gone → aborted, its blocks free again: {shown(m)}")
    finally:
        server.proc.send_signal(signal.SIGTERM)
        code = server.wait_exit()
    check(code == 0, f"SIGTERM → exit 0 (exit {code}: {server.proc.stderr.read()})")


def load(ckpt):
    # 16 running and 40 waiting hold 56 of the 64 clients: most requests are served, the rest refused at once.
    n_requests, n_clients, max_tokens = 500, 64, 16
    server = Server(MESHTRAIN, ckpt, ["--blocks", "256", "--block-size", "8", "--max-running", "16",
                                      "--max-waiting", "40"])
    outcomes, lock = [], threading.Lock()
    next_index = iter(range(n_requests))
    barrier = threading.Barrier(n_clients)

    def outcome(i):
        """'ok', 'refused' or what went wrong, for request i (streamed when i is odd)."""
        stream = i % 2 == 1
        body = {"prompt": [1 + i % 200, 2, 3], "max_tokens": max_tokens, "temperature": 0, "stream": stream}
        try:
            conn = server.connect()
            try:
                status, reply = request(conn, "POST", "/v1/completions", body)
            finally:
                conn.close()
        except OSError as e:  # includes the client's timeout: a request that hung
            return f"request {i}: {type(e).__name__} {e}"
        if status == 503:
            e = reply.get("error", {}) if isinstance(reply, dict) else {}
            ok = e.get("type") == "server_error" and "--max-waiting" in e.get("message", "")
            return "refused" if ok else f"request {i}: 503 {reply}"
        if status != 200:
            return f"request {i}: {status} {reply}"
        if stream:
            events = sse_events(reply)
            last = json.loads(events[-2]) if len(events) >= 2 and events[-1] == "[DONE]" else {}
            ids = sum((json.loads(e)["choices"][0]["token_ids"] for e in events[:-1]), [])
            good = last.get("usage", {}).get("completion_tokens") == max_tokens == len(ids) \
                and last["choices"][0]["finish_reason"] == "length"
        else:
            good = reply["usage"]["completion_tokens"] == max_tokens == len(reply["choices"][0]["token_ids"]) \
                and reply["choices"][0]["finish_reason"] == "length"
        return "ok" if good else f"request {i}: incomplete answer {reply}"

    def client():
        barrier.wait()  # the first wave arrives together
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            o = outcome(i)
            with lock:
                outcomes.append(o)
            if o == "refused":
                time.sleep(0.02)  # backs off as a client of a full server should; decides nothing checked

    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    seconds = time.monotonic() - start
    answered, refused = outcomes.count("ok"), outcomes.count("refused")
    wrong = [o for o in outcomes if o not in ("ok", "refused")]
    print(f"{n_requests} requests from {n_clients} clients in {seconds:.1f} s: {answered} answered, {refused} refused")
    check(len(outcomes) == n_requests and not wrong and not any(t.is_alive() for t in threads),
          f"every request answered or refused: {len(outcomes)} outcomes, wrong {wrong[:5]}")
    m = server.wait_metrics(lambda m: m["meshtrain_requests_finished_total"] + m["meshtrain_requests_refused_total"] >= n_requests)
    check(m["meshtrain_kv_blocks_used"] == 0 and m["meshtrain_requests_running"] == 0
          and m["meshtrain_requests_waiting"] == 0 and m["meshtrain_requests_finished_total"] == answered
          and m["meshtrain_requests_refused_total"] == refused and answered + refused == n_requests
          and m["meshtrain_requests_aborted_total"] == 0,
          f"/metrics after the load: no block used, nothing running or waiting, finished {answered} + refused "
          f"{refused} = {n_requests}: {shown(m)}")
    server.proc.send_signal(signal.SIGTERM)
    code = server.wait_exit()
    check(code == 0, f"SIGTERM → exit 0 (exit {code}: {server.proc.stderr.read()})")


def main():
    ckpt = make_byte_model(MESHTRAIN, WORK)
    disconnects(ckpt)
    load(ckpt)


run_checked(main, check, WORK)
