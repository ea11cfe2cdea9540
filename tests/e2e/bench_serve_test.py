#!/usr/bin/env python3
"""`meshtrain bench serve` (the C++ load generator) against a real `meshtrain serve --port 0` on the CPU.

The model, its checkpoint and the server come from scripts/bench/serve_compare.py (the tiny random Llama, saved
without a tokenizer, so the server is byte-level and has no end-of-text token: every request generates exactly
max_tokens tokens). Checked:
  - random prompts at concurrency 1 and 4: every request ok, tokens counted = requests × output tokens, the
    percentiles ordered, throughput > 0, the flags, the model's name and the machine in the JSON, a row per level
    in the table; the server's /metrics counts the same tokens and requests as the client did (warm-up included);
  - a JSONL prompt file (text and ids, a line's own max_tokens) taken in turn;
  - requests the server refuses (a token id outside the vocabulary): counted as failed with the server's message,
    the JSON still written, one line on stderr, exit 1;
  - an unreachable server: one line, exit 1; bad flags: one line naming the flag, exit 2.

    bench_serve_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers).
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs torch and transformers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
import serve_compare  # noqa: E402  (the model, the checkpoint and the server, made as the GPU benchmark makes them)
from e2e_support import Checks, run_checked  # noqa: E402

MESHTRAIN = os.path.join(BIN, "meshtrain")
WORK = tempfile.mkdtemp(prefix="meshtrain_bench_serve_")
PROMPT_TOKENS, OUTPUT_TOKENS, REQUESTS = 8, 6, 6
check = Checks()


def bench(*flags, timeout=300):
    p = subprocess.run([MESHTRAIN, "bench", "serve", *flags], capture_output=True, text=True, timeout=timeout)
    print(f"+ meshtrain bench serve {' '.join(flags)} -> {p.returncode}\n{p.stdout}{p.stderr}", flush=True)
    return p


def one_line(p):
    lines = p.stderr.strip().splitlines()
    return lines[0] if len(lines) == 1 and "Traceback" not in p.stderr else None


def load(path):
    return json.load(open(path)) if os.path.exists(path) else {}


def ordered(level, name):
    ps = [level[f"{name}_ms_p{q}"] for q in (50, 90, 99)]
    return all(v is not None and v >= 0 for v in ps) and ps[0] <= ps[1] <= ps[2]


def ordered_or_none(level, name):
    """Between-token percentiles exist only where a request's tokens came in more than one chunk: on a loaded
    machine the server may hand over all of a short request's tokens at once (tokens in the first chunk count in
    no gap), so a level may have no gap at all."""
    ps = [level[f"{name}_ms_p{q}"] for q in (50, 90, 99)]
    return all(v is None for v in ps) or ordered(level, name)


def server_figures(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v1/models")
    name = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.request("GET", "/metrics")
    metrics = {}
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("meshtrain_") and " " in line:
            metrics[line.split()[0]] = float(line.split()[1])
    conn.close()
    return name, metrics


def random_prompts(url):
    out = os.path.join(WORK, "random.json")
    p = bench("--url", url, "--concurrency", "1,4", "--requests", str(REQUESTS), "--prompt-tokens",
              str(PROMPT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS), "--seed", "3", "--warmup", "1", "--json", out)
    check(p.returncode == 0, f"random prompts: exit 0 (got {p.returncode}: {p.stderr.strip()})")
    res = load(out)
    levels = res.get("levels", [])
    check([lv["concurrency"] for lv in levels] == [1, 4], f"a level per concurrency: {levels}")
    for lv in levels:
        c = lv["concurrency"]
        check(lv["requests"] == REQUESTS and lv["ok"] == REQUESTS and lv["failed"] == 0 and lv["first_error"] is None,
              f"C={c}: every request ok ({lv})")
        check(lv["output_tokens"] == lv["tokens_requested"] == REQUESTS * OUTPUT_TOKENS and lv["ended_early"] == 0,
              f"C={c}: tokens counted = requests × output tokens ({lv['output_tokens']})")
        check(ordered(lv, "ttft") and ordered(lv, "e2e") and ordered_or_none(lv, "itl"),
              f"C={c}: percentiles ordered ({lv})")
        check(lv["ttft_ms_p50"] <= lv["e2e_ms_p50"], f"C={c}: first token before the end")
        check(lv["tokens_per_s"] > 0 and lv["requests_per_s"] > 0 and lv["time_s"] > 0, f"C={c}: positive rates")
    flags = res.get("flags", {})
    check(flags.get("seed") == 3 and flags.get("concurrency") == [1, 4] and flags.get("requests") == {"1": 6, "4": 6}
          and flags.get("prompt_tokens") == PROMPT_TOKENS and flags.get("output_tokens") == OUTPUT_TOKENS,
          f"the flags in the JSON: {flags}")
    check(res.get("machine", {}).get("host") and res["machine"].get("cpus", 0) > 0, f"the machine: {res.get('machine')}")
    rows = [line.split() for line in p.stdout.splitlines() if line.split()[:1] in (["1"], ["4"])]
    check("TTFT p50" in p.stdout and len(rows) == 2, "the table has its header and a row per level")
    return res


def jsonl_prompts(url):
    prompts = os.path.join(WORK, "prompts.jsonl")
    with open(prompts, "w") as f:
        f.write('{"prompt": "In the beginning"}\n\n{"prompt": [1, 2, 3], "max_tokens": 3}\n')
    out = os.path.join(WORK, "jsonl.json")
    p = bench("--url", url, "--concurrency", "2", "--requests", "4", "--prompts", prompts, "--output-tokens", "5",
              "--warmup", "0", "--json", out)
    lv = (load(out).get("levels") or [{}])[0]
    check(p.returncode == 0 and lv.get("ok") == 4 and lv.get("tokens_requested") == 16 == lv.get("output_tokens"),
          f"JSONL prompts taken in turn, each line's max_tokens: 5 + 3 + 5 + 3 tokens ({p.returncode}, {lv})")
    check(load(out).get("flags", {}).get("prompts") == prompts, "the prompt file in the JSON")


def refused_requests(url):
    prompts = os.path.join(WORK, "refused.jsonl")
    with open(prompts, "w") as f:
        f.write('{"prompt": [1, 2]}\n{"prompt": [1, 999]}\n')
    out = os.path.join(WORK, "refused.json")
    p = bench("--url", url, "--concurrency", "1", "--requests", "4", "--prompts", prompts, "--output-tokens", "2",
              "--warmup", "0", "--json", out)
    lv = (load(out).get("levels") or [{}])[0]
    line = one_line(p) or ""
    check(p.returncode == 1 and "2 request(s) failed" in line and "HTTP 400" in line and "999" in line,
          f"refused requests: exit 1 and one line with the server's message (got {p.returncode}: {p.stderr.strip()})")
    check(lv.get("ok") == 2 and lv.get("failed") == 2 and "999" in (lv.get("first_error") or ""),
          f"the JSON counts the failures and keeps the first message: {lv}")


def main():
    a = serve_compare.parse_args([BIN, WORK, "--device", "cpu", "--preset", "tiny-llama", "--dtype", "fp32",
                                  "--new-tokens", str(OUTPUT_TOKENS), "--prompt-tokens", str(PROMPT_TOKENS),
                                  "--concurrency", "1,4"])
    model, hf_dir = serve_compare.make_model(a, torch, transformers)
    del model
    proc, port, _ = serve_compare.start_server(a, serve_compare.import_checkpoint(a, hf_dir))
    url = f"http://127.0.0.1:{port}"
    try:
        res = random_prompts(url)
        name, metrics = server_figures(port)
        check(res.get("model") == name, f"the server's model name: {res.get('model')} == {name}")
        total = (1 + 2 * REQUESTS) * OUTPUT_TOKENS  # the warm-up request, then two levels
        check(metrics.get("meshtrain_generation_tokens_total") == total
              and metrics.get("meshtrain_requests_finished_total") == 1 + 2 * REQUESTS,
              f"the server generated what the client counted: {total} tokens, {1 + 2 * REQUESTS} requests "
              f"({metrics.get('meshtrain_generation_tokens_total')}, {metrics.get('meshtrain_requests_finished_total')})")
        jsonl_prompts(url)
        refused_requests(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=120) == 0, "the server stops with exit 0 on SIGTERM")

    # A port this test holds bound and never listens on: refused, and no other test's server can take it meanwhile.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    p = bench("--url", f"http://127.0.0.1:{closed_port}", "--concurrency", "1", "--requests", "1")
    closed.close()
    line = one_line(p) or ""
    check(p.returncode == 1 and "cannot reach the server" in line and f"127.0.0.1:{closed_port}" in line
          and not p.stdout, f"an unreachable server: exit 1 and one line (got {p.returncode}: {p.stderr.strip()})")

    missing = os.path.join(WORK, "missing.jsonl")
    for flags, needle in [(["--concurrency", "0"], "--concurrency"), (["--concurrency", "1,x"], "--concurrency"),
                          (["--url", "ftp://h"], "--url"), (["--url", "http://h:99999"], "--url"),
                          (["--prompt-tokens", "0"], "--prompt-tokens"), (["--output-tokens", "-1"], "--output-tokens"),
                          (["--requests", "many"], "--requests"), (["--timeout", "0"], "--timeout"),
                          (["--prompts", missing], "--prompts"),
                          (["--prompts", os.path.join(WORK, "prompts.jsonl"), "--prompt-tokens", "4"], "--prompt-tokens"),
                          (["--json", os.path.join(WORK, "no", "such", "dir", "x.json")], "--json"),
                          (["extra"], "extra"), (["--bogus"], "bogus")]:
        p = bench("--url", url, *flags)
        line = one_line(p) or ""
        check(p.returncode == 2 and needle in line, f"{' '.join(flags)}: exit 2 with one line naming it ({line})")


run_checked(main, check, WORK)
