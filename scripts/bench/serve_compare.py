#!/usr/bin/env python3
"""Serving throughput and latency side by side in one run: `meshtrain serve` vs Hugging Face transformers
`generate`, on one random-init model of a preset shape (docs/serving.md, docs/PERFORMANCE.md "Serving").

One transformers LlamaForCausalLM of the preset's shape is initialised once (seed 0), saved as a Hugging Face
directory and imported with `meshtrain import`, so both sides hold the same weights. The prompts are random token
ids from a fixed seed, all of --prompt-tokens; no end-of-text token (the saved model has no tokenizer, so the
server is byte-level and stops only at max_tokens, and transformers gets eos_token_id=None), so every request
generates exactly --new-tokens tokens, greedily.

- A, transformers `generate`: at each concurrency C the requests go in batches of C (left padding; the prompts
  are of one length, so no pad is needed), KV cache on, greedy. A warm-up batch runs first and is not timed;
  each batch is timed between `torch.cuda.synchronize()` calls (on the CPU, wall time).
- B, `meshtrain serve` on a free loopback port (`--port 0`, the port read from the line it prints): one
  warm-up request, then at each concurrency C, N requests from C client threads (http.client, one keep-alive
  connection each), streamed, each timed from its send: time to first token, and between tokens (a chunk's gap
  split over the tokens it carries).
Output tokens/s = all generated tokens / the wall time of all N requests at that concurrency, on both sides.
The first prompt's greedy tokens from A (at the first concurrency) and B (its first request there) are
compared; in bf16 they may part after some tokens, so the first divergence is reported, not failed on.

Prints a table and writes OUT/serve_compare.json; exits 1 when either side failed, 2 on bad flags.

Usage: serve_compare.py BIN_DIR OUT [--preset llama3.2-1b] [--dtype bf16] [--device cuda] [--new-tokens 256]
                        [--hbm-tb-s TB_S] [--quantization none,fp8]
                        [--prompt-tokens 128] [--concurrency 1,8,64] [--requests N]
"""
import argparse
import http.client
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

# Llama shapes as in src/core/model_presets.cpp, plus a tiny one for the CPU smoke test.
PRESETS = {
    "tiny-llama": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0, tie_word_embeddings=False),
    "llama3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                        tie_word_embeddings=True),
    "llama3.2-3b": dict(vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                        num_attention_heads=24, num_key_value_heads=8, rope_theta=500000.0,
                        tie_word_embeddings=True),
    "llama3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                        tie_word_embeddings=False),
}
# The tiny model's weights get extra noise so that greedy decoding is far from ties (an fp32 equality check).
INIT_NOISE = {"tiny-llama": 0.2}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
BLOCK_SIZE = 16
TIMEOUT = 600  # seconds for any one wait (server start, one request)


class OneLineParser(argparse.ArgumentParser):
    """Bad flags: one line on stderr (which flag, what is valid) and exit 2, without the usage block."""

    def error(self, message):
        self.exit(2, f"serve_compare.py: {message}\n")



# Peak memory bandwidth of the SXM parts, TB/s (the vendors' data sheets), matched in torch.cuda.get_device_name().
HBM_TB_S = {"H200": 4.8, "H100": 3.35, "A100": 2.0}

def parse_args(argv):
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", help="the directory holding the meshtrain binary (build/bin)")
    ap.add_argument("out", help="directory for serve_compare.json, the checkpoint and the server's log")
    ap.add_argument("--preset", default="llama3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])  # what `meshtrain serve --dtype` takes
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quantization", default="none",
                    help="`meshtrain serve --quantization`, a comma-separated list of none and fp8: one server run "
                         "each against the one transformers run (fp8 holds the block weights in FP8; transformers "
                         "stays in --dtype, and the batch-1 limit is that of the --dtype weights)")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--concurrency", default="1,8,64", help="comma-separated positive integers")
    ap.add_argument("--hbm-tb-s", type=float, default=None,
                    help="the device's memory bandwidth in TB/s, for the batch-1 limit (default: by the GPU's name, "
                         f"{', '.join(f'{k} {v}' for k, v in HBM_TB_S.items())}; none for another)")
    ap.add_argument("--requests", type=int, default=0,
                    help="requests per concurrency (default: 2 × the concurrency, at least 4)")
    a = ap.parse_args(argv)
    try:
        a.levels = [int(c) for c in a.concurrency.split(",")]
    except ValueError:
        a.levels = []
    if not a.levels or min(a.levels) < 1 or len(set(a.levels)) != len(a.levels):
        ap.error(f"--concurrency {a.concurrency}: expected distinct comma-separated positive integers, e.g. 1,8,64")
    for flag in ("new_tokens", "prompt_tokens"):
        if getattr(a, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} {getattr(a, flag)}: must be a positive integer")
    a.quantizations = a.quantization.split(",")
    if not a.quantizations or any(q not in ("none", "fp8") for q in a.quantizations) or \
            len(set(a.quantizations)) != len(a.quantizations):
        ap.error(f"--quantization {a.quantization}: expected distinct values of none and fp8, e.g. none,fp8")
    a.quantization = a.quantizations[0]
    if a.requests < 0:
        ap.error(f"--requests {a.requests}: must be a positive integer (0 = 2 × the concurrency)")
    a.meshtrain = os.path.join(a.bin_dir, "meshtrain")
    if not os.access(a.meshtrain, os.X_OK):
        ap.error(f"BIN_DIR {a.bin_dir}: no executable meshtrain in it (build it: scripts/build.sh)")
    return a


def requests_at(a, c):
    return a.requests or max(4, 2 * c)


def percentile(xs, q):
    """The q-th percentile (0..100) by linear interpolation; None for no samples."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def make_model(a, torch, transformers):
    """The random-init model of the preset's shape, saved as an HF directory; returns (model, hf_dir).

    The tiny model is made in fp32 on the CPU (its noise is added there); a real shape is made directly on the
    device in the compared dtype, so an 8B model takes seconds to initialise and its saved weights are the ones
    side A runs (no fp32 copy of 32 GB on the host and on disk)."""
    cfg = transformers.LlamaConfig(**PRESETS[a.preset], rms_norm_eps=1e-5,
                                   max_position_embeddings=max(8192, a.prompt_tokens + a.new_tokens),
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    if a.preset in INIT_NOISE:
        model = transformers.LlamaForCausalLM(cfg).float().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * INIT_NOISE[a.preset])
    else:
        dtype = getattr(torch, DTYPES[a.dtype])
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(a.device):
                model = transformers.LlamaForCausalLM(cfg).eval()
        finally:
            torch.set_default_dtype(previous)
    hf_dir = os.path.join(a.out, "hf")
    shutil.rmtree(hf_dir, ignore_errors=True)
    model.save_pretrained(hf_dir)
    return model, hf_dir


def weight_bytes(model):
    """Bytes of weights one decode step reads: every distinct parameter once (a tied head is the embedding)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def make_prompts(a, torch, vocab):
    n = max(max(a.levels), max(requests_at(a, c) for c in a.levels))
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (n, a.prompt_tokens), generator=g).tolist()


def import_checkpoint(a, hf_dir):
    ckpt = os.path.join(a.out, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    p = subprocess.run([a.meshtrain, "import", hf_dir, ckpt], capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"meshtrain import {hf_dir} failed ({p.returncode}): {p.stderr.strip()}")
    return ckpt


# ---- side A: transformers generate ---------------------------------------------------------------------------

def side_hf(a, torch, model, prompts):
    dev = torch.device(a.device)
    model = model.to(device=dev, dtype=getattr(torch, DTYPES[a.dtype]))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def generate(batch):
        ids = torch.tensor(batch, device=dev)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new_tokens,
                                 min_new_tokens=a.new_tokens, do_sample=False, use_cache=True, pad_token_id=0)
        return out[:, ids.shape[1]:].tolist()

    generate(prompts[:max(a.levels)])  # warm-up, not timed
    rows, first_tokens = [], None
    for c in a.levels:
        n = requests_at(a, c)
        tokens, elapsed = 0, 0.0
        for start in range(0, n, c):
            batch = prompts[start:min(start + c, n)]
            sync()
            t0 = time.perf_counter()
            out = generate(batch)
            sync()
            elapsed += time.perf_counter() - t0
            tokens += sum(len(o) for o in out)
            if first_tokens is None:
                first_tokens = out[0]
        rows.append({"concurrency": c, "requests": n, "output_tokens": tokens, "time_s": elapsed,
                     "tokens_per_s": tokens / elapsed})
        print(f"  transformers C={c}: {tokens / elapsed:.1f} tok/s", flush=True)
    return {"rows": rows, "device": a.device, "dtype": a.dtype}, first_tokens


# ---- side B: meshtrain serve ---------------------------------------------------------------------------------

def start_server(a, ckpt):
    """`meshtrain serve` on a free loopback port; returns (process, port, log path)."""
    log = os.path.join(a.out, "serve.log")
    c_max = max(a.levels)
    blocks = c_max * -(-(a.prompt_tokens + a.new_tokens) // BLOCK_SIZE) + 16  # every request's cache at once
    cmd = [a.meshtrain, "serve", ckpt, "--port", "0", "--blocks", str(blocks), "--block-size", str(BLOCK_SIZE),
           "--max-running", str(c_max), "--device", a.device, "--dtype", a.dtype, "--quantization", a.quantization]
    f = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
    f.close()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        with open(log) as f:
            for line in f:
                if "listening on http://" in line:
                    return proc, int(line.rsplit(":", 1)[1]), cmd
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # polls for the line; the condition, not the time, ends the wait
    proc.kill()
    proc.wait()
    with open(log) as f:
        raise RuntimeError(f"meshtrain serve printed no port (exit {proc.returncode}): {f.read().strip()}")


def stream_request(conn, prompt, new_tokens):
    """One streamed greedy completion: (token ids, [(seconds since send, ids in that chunk)])."""
    body = json.dumps({"prompt": prompt, "max_tokens": new_tokens, "temperature": 0, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"POST /v1/completions: {r.status} {r.read().decode(errors='replace').strip()}")
    ids, chunks, done = [], [], False
    for raw in r:  # server-sent events, one "data: ..." line per chunk
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        got = json.loads(line[6:])["choices"][0].get("token_ids", [])
        if got:
            chunks.append((time.perf_counter() - t0, got))
            ids += got
    if not done:
        raise RuntimeError("the stream ended without data: [DONE]")
    return ids, chunks


def run_level(port, prompts, n, c, new_tokens):
    """N requests from C client threads; returns (row, the first request's tokens)."""
    results, errors, lock = [None] * n, [], threading.Lock()
    next_index = iter(range(n))

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        try:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                results[i] = stream_request(conn, prompts[i], new_tokens)
        except Exception as e:  # noqa: BLE001 - reported as this side's failure
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(c)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors[0])
    ttft, itl, tokens = [], [], 0
    for ids, chunks in results:
        tokens += len(ids)
        ttft.append(chunks[0][0])
        for (prev, _), (t, got) in zip(chunks, chunks[1:]):
            itl += [(t - prev) / len(got)] * len(got)
    ms = lambda v: None if v is None else v * 1000.0  # noqa: E731
    row = {"concurrency": c, "requests": n, "output_tokens": tokens, "time_s": elapsed,
           "tokens_per_s": tokens / elapsed, "ttft_ms_p50": ms(percentile(ttft, 50)),
           "ttft_ms_p90": ms(percentile(ttft, 90)), "itl_ms_p50": ms(percentile(itl, 50)),
           "itl_ms_p90": ms(percentile(itl, 90))}
    return row, results[0][0]


def side_serve(a, ckpt, prompts):
    proc, port, cmd = start_server(a, ckpt)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        stream_request(conn, prompts[0], a.new_tokens)  # warm-up, not timed
        conn.close()
        rows, first_tokens = [], None
        for c in a.levels:
            row, first = run_level(port, prompts, requests_at(a, c), c, a.new_tokens)
            rows.append(row)
            if first_tokens is None:
                first_tokens = first
            print(f"  meshtrain serve C={c}: {row['tokens_per_s']:.1f} tok/s", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    if code != 0:
        raise RuntimeError(f"meshtrain serve exited {code} on SIGTERM (see {os.path.join(a.out, 'serve.log')})")
    return {"rows": rows, "device": a.device, "dtype": a.dtype, "command": cmd[1:]}, first_tokens


# ---- the report ----------------------------------------------------------------------------------------------

def greedy_check(a_tokens, b_tokens):
    if a_tokens is None or b_tokens is None:
        return None
    n = min(len(a_tokens), len(b_tokens))
    mismatches = sum(x != y for x, y in zip(a_tokens, b_tokens)) + abs(len(a_tokens) - len(b_tokens))
    first = next((i for i in range(n) if a_tokens[i] != b_tokens[i]), None)
    if first is None and len(a_tokens) != len(b_tokens):
        first = n
    return {"compared": max(len(a_tokens), len(b_tokens)), "mismatches": mismatches, "first_divergence": first,
            "transformers": a_tokens, "meshtrain": b_tokens}


def divergence_margin(torch, model, prompt, a_tokens, b_tokens, i):
    """Where the two greedy runs part: the fp32 logits after their common prefix, from the same weights. A gap
    between the two picks far below the logits' bf16 rounding (about 2^-8 of their magnitude) means a near-tie
    that bf16 arithmetic decides either way, not a wrong model."""
    if i >= min(len(a_tokens), len(b_tokens)):
        return {}
    model = model.float()
    ids = torch.tensor([prompt + a_tokens[:i]], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1].float()
    top = logits.topk(2).values
    return {"fp32_logit_gap_at_divergence": float(logits[a_tokens[i]] - logits[b_tokens[i]]),
            "fp32_top2_margin": float(top[0] - top[1]), "fp32_top_logit": float(top[0])}


def machine(torch):
    m = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        m["gpu"] = torch.cuda.get_device_name(0)
    return m


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def serve_keys(a, q):
    """The result's keys of one server run: the first quantization's are the plain names (as before lists)."""
    if q == a.quantizations[0]:
        return "meshtrain_serve", "ratios_b_over_a"
    return f"meshtrain_serve_{q}", f"ratios_b_over_a_{q}"


def print_table(a, result):
    hf = {r["concurrency"]: r for r in (result["transformers"] or {}).get("rows", [])}
    print(f"\n{a.preset}, random init, greedy, prompt {a.prompt_tokens} + {a.new_tokens} new tokens; transformers on "
          f"{a.device} in {a.dtype}, meshtrain serve the same (block weights as --quantization says)")
    print(f"{'C':>4s} {'quant':>5s} {'HF tok/s':>10s} {'serve tok/s':>12s} {'× HF':>7s} {'TTFT p50':>9s} "
          f"{'TTFT p90':>9s} {'ITL p50':>8s} {'ITL p90':>8s}  (ms)")
    lim = result.get("weight_bandwidth_limit_tokens_per_s")
    for q in a.quantizations:
        key, ratios = serve_keys(a, q)
        ms = {r["concurrency"]: r for r in (result.get(key) or {}).get("rows", [])}
        for c in a.levels:
            h, m = hf.get(c, {}), ms.get(c, {})
            print(f"{c:4d} {q:>5s} {fmt(h.get('tokens_per_s'), '10.1f')} {fmt(m.get('tokens_per_s'), '12.1f')} "
                  f"{fmt(result.get(ratios, {}).get(str(c)), '7.2f')} {fmt(m.get('ttft_ms_p50'), '9.1f')} "
                  f"{fmt(m.get('ttft_ms_p90'), '9.1f')} {fmt(m.get('itl_ms_p50'), '8.2f')} "
                  f"{fmt(m.get('itl_ms_p90'), '8.2f')}")
        one = ms.get(1, {}).get("tokens_per_s")
        if lim and one and a.device == "cuda":
            print(f"batch 1, {q}: {one:.1f} tok/s = {100 * one / lim:.1f} % of the weight-bandwidth limit "
                  f"({lim:.0f} tok/s: {result['weights_gb']:.2f} GB of {a.dtype} weights at {a.hbm_tb_s} TB/s)")
            itl = ms.get(1, {}).get("itl_ms_p50")
            if itl:  # the decode steps alone: the request's rate above also waits for its prompt's prefill
                print(f"batch 1, {q}, decode alone (1000 / ITL p50): {1e3 / itl:.1f} tok/s = "
                      f"{100 * 1e3 / itl / lim:.1f} % of that limit")
    g = result["greedy"]
    if g:
        print(f"greedy, first prompt: {g['mismatches']} of {g['compared']} tokens differ; first divergence: "
              f"{'none' if g['first_divergence'] is None else g['first_divergence']}")
        if "fp32_logit_gap_at_divergence" in g:
            print(f"  there, in fp32: transformers' pick − meshtrain's = {g['fp32_logit_gap_at_divergence']:.5f}, "
                  f"top-2 margin {g['fp32_top2_margin']:.5f}, top logit {g['fp32_top_logit']:.3f}")
    for side, err in result["errors"].items():
        print(f"FAILED: {side}: {err}", file=sys.stderr)


def write_json(path, obj):
    """Whole or not at all: a temporary file renamed over the target."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"serve_compare.py: {e} (scripts/setup.sh installs torch and transformers into the venv)",
              file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("serve_compare.py: --device cuda: no CUDA device visible to torch (use --device cpu)", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    result = {"machine": machine(torch), "versions": {"torch": torch.__version__,
                                                      "transformers": transformers.__version__},
              "settings": {"preset": a.preset, "dtype": a.dtype, "device": a.device, "new_tokens": a.new_tokens,
                           "prompt_tokens": a.prompt_tokens, "concurrency": a.levels,
                           "requests": {str(c): requests_at(a, c) for c in a.levels}, "greedy": True},
              "transformers": None, "meshtrain_serve": None, "ratios_b_over_a": {}, "greedy": None, "errors": {}}
    print(f"making the {a.preset} model and importing it", flush=True)
    model, hf_dir = make_model(a, torch, transformers)
    prompts = make_prompts(a, torch, PRESETS[a.preset]["vocab_size"])
    a_tokens = b_tokens = None
    try:
        ckpt = import_checkpoint(a, hf_dir)
    except Exception as e:  # noqa: BLE001
        result["errors"]["meshtrain_serve"] = str(e)
        ckpt = None
    try:
        result["transformers"], a_tokens = side_hf(a, torch, model, prompts)
    except Exception as e:  # noqa: BLE001 - one side failing still reports the other
        traceback.print_exc()
        result["errors"]["transformers"] = f"{type(e).__name__}: {e}"
    result["weights_gb"] = weight_bytes(model) / 1e9
    result["quantization"] = a.quantizations
    if a.hbm_tb_s is None and a.device == "cuda":
        name = torch.cuda.get_device_name()
        a.hbm_tb_s = next((v for k, v in HBM_TB_S.items() if k in name), None)
        result["gpu"] = name
    # One token per step at batch 1 reads every weight once: the ceiling on batch-1 decode.
    if a.hbm_tb_s:
        result["hbm_tb_s"] = a.hbm_tb_s
        result["weight_bandwidth_limit_tokens_per_s"] = a.hbm_tb_s * 1e12 / (result["weights_gb"] * 1e9)
    if a.device == "cuda":
        torch.cuda.empty_cache()  # the server is another process and sizes nothing from what is left here
    b_tokens = None
    for q in a.quantizations if ckpt else []:
        a.quantization = q
        key, ratios = serve_keys(a, q)
        try:
            result[key], tokens = side_serve(a, ckpt, prompts)
            b_tokens = tokens if q == a.quantizations[0] else b_tokens
        except Exception as e:  # noqa: BLE001
            result["errors"][key] = f"{type(e).__name__}: {e}"
            continue
        if result["transformers"]:
            result[ratios] = {str(h["concurrency"]): m["tokens_per_s"] / h["tokens_per_s"]
                              for h, m in zip(result["transformers"]["rows"], result[key]["rows"])}
    a.quantization = a.quantizations[0]
    result["greedy"] = greedy_check(a_tokens, b_tokens)
    if result["greedy"] and result["greedy"]["first_divergence"] is not None:
        result["greedy"].update(divergence_margin(torch, model, prompts[0], a_tokens, b_tokens,
                                                  result["greedy"]["first_divergence"]))
    del model
    write_json(os.path.join(a.out, "serve_compare.json"), result)
    print_table(a, result)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
