"""Helpers shared by the end-to-end tests of `meshtrain serve` that need no tokenizer (imported from the test's
own folder): a tiny random byte-level Llama imported as a checkpoint, a server started on a free port, plain
HTTP requests and /metrics read back. Every wait polls a condition with a deadline; none sleeps a fixed time
to decide an outcome."""
import http.client
import json
import queue
import subprocess
import sys
import threading
import time

TIMEOUT = 120  # seconds for any one wait: generous for a loaded 2-core machine


def make_byte_model(meshtrain, work, max_positions=8192):
    """A tiny random Llama over bytes (vocabulary 256, no tokenizer: the server takes one token per byte and has
    no end-of-text token, so a generation always runs to max_tokens), imported into WORK/ckpt; returns its path.
    Many positions, so one request can run long enough to be caught mid-way."""
    import torch
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=max_positions, tie_word_embeddings=False)
    torch.manual_seed(0)
    hf_dir, ckpt = f"{work}/hf", f"{work}/ckpt"
    transformers.AutoModelForCausalLM.from_config(cfg).float().eval().save_pretrained(hf_dir)
    subprocess.run([meshtrain, "import", hf_dir, ckpt], check=True, capture_output=True, timeout=300)
    return ckpt


class Server:
    """A `meshtrain serve CKPT --port 0 ARGS` process (or `argv`, a command that runs one on port 0): its port
    (from the line it prints), its stdout lines."""

    def __init__(self, meshtrain, ckpt, args, argv=None, **popen):
        argv = argv or [meshtrain, "serve", ckpt, "--port", "0", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        self.lines = []
        got = queue.Queue()

        def read():
            for line in iter(self.proc.stdout.readline, ""):
                self.lines.append(line)
                got.put(line)
            got.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + TIMEOUT
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = got.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            if "listening on http://" in line:
                self.port = int(line.rsplit(":", 1)[1])
                return
        self.proc.kill()
        sys.exit(f"FAIL: the server printed no port: exit {self.proc.poll()}\n{''.join(self.lines)}"
                 f"\n{self.proc.stderr.read()}")

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)

    def request(self, method, path, body=None):
        """(status, parsed JSON or text) on a connection of its own."""
        conn = self.connect()
        try:
            return request(conn, method, path, body)
        finally:
            conn.close()

    def metrics(self):
        """/metrics as {name: value}."""
        _, text = self.request("GET", "/metrics")
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line and not line.startswith("#")}

    def wait_metrics(self, cond):
        """Polls /metrics until cond(metrics) holds (returns them) or the timeout passes (returns the last)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            m = self.metrics()
            if cond(m) or time.monotonic() > deadline:
                return m
            time.sleep(0.02)

    def wait_exit(self):
        """The exit code, or None if it did not exit within the timeout (then it is killed)."""
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def request(conn, method, path, body=None):
    """(status, parsed JSON or text) over `conn`."""
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = conn.getresponse()
    text = r.read().decode()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def sse_events(text):
    """The `data:` payloads of a server-sent-events body, in order."""
    return [part[len("data: "):] for part in text.split("\n\n") if part.startswith("data: ")]


def shutting_down(status, body):
    """True for the 503 a draining server answers: OpenAI's error object, one line, naming the shutdown."""
    e = body.get("error", {}) if isinstance(body, dict) else {}
    msg = e.get("message", "")
    return status == 503 and e.get("type") == "server_error" and "shutting down" in msg and "\n" not in msg
