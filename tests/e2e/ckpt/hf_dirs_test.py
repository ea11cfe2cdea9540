#!/usr/bin/env python3
"""Hugging Face directories everywhere: `meshtrain generate`, `eval`, `serve` and `checkpoint.init_from` read a
Hugging Face model directory in place, or an `org/name` from a local Hub cache (HF_HOME, resolved offline through
refs/main), with the same results as `meshtrain import` first.

A tiny random Llama with a Llama-3-style tokenizer and a chat template (tests/e2e/tiny_llama.py: save_pretrained,
fp32) and a tiny GPT-2 (Conv1D's transposed, fused tensors); a fake Hub cache built from the Llama's files as the
Hub lays them out (blobs/, snapshots/<rev>/ links into them, refs/main). For each of import / directory / org/name:
  - generate --prompt and --chat: the same text (the chat template from the same directory);
  - generate --input: the same token ids per line (the serving engine);
  - export org/name --format hf: the directory's tensors and tokenizer back;
  - eval --json: the same loss; the org/name under tensor parallelism 2 and the GPT-2 directory under FSDP 2
    (each rank reads only its rows) within 1e-5 of the imported checkpoint in one process;
  - serve org/name: starts, lists the model by its id, a greedy completion equals generate --input's text;
  - train with checkpoint.init_from: the same losses in one process; org/name under FSDP 2 within 1e-4; the
    tokenizer files copied to train.out_dir.
Mistakes, exit 2 and one line: a directory that is neither a checkpoint nor a Hugging Face model (the line lists
what was expected); an org/name the cache lacks (the line names where it looked) for generate, eval and
init_from; an init_from whose model section differs from config.json's; LoRA adapters resumed over another
directory of the same shapes. LoRA over org/name from a config without a model section (the shape taken from
init_from): the losses and merged export of LoRA over the import.

    hf_dirs_test.py BIN_DIR SOURCE_DIR
Exit 0 pass, 1 failure, 77 skipped (no torch / transformers / tokenizers).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs transformers and tokenizers into the venv)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_support import Checks, metrics, prepare_kjv, run_checked  # noqa: E402
from serve_support import Server  # noqa: E402
from tiny_llama import make_tiny_llama  # noqa: E402

MESHTRAIN, MESHRUN = os.path.join(BIN, "meshtrain"), os.path.join(BIN, "meshrun")
WORK = tempfile.mkdtemp(prefix="meshtrain_hf_dirs_")
HF_HOME = os.path.join(WORK, "hf_home")
HUB_ID = "meshtest/tiny-llama"
REV = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
os.environ.pop("HF_HUB_CACHE", None)
os.environ["HF_HOME"] = HF_HOME  # every command below (and the server) finds the fake cache
check = Checks()


def mt(*args, timeout=300):
    return subprocess.run([MESHTRAIN, *args], capture_output=True, text=True, timeout=timeout)


def ok_out(p, what):
    failed = "" if p.returncode == 0 else f" (exit {p.returncode}: {p.stderr[-1500:]})"
    check(p.returncode == 0, f"{what}: exit 0{failed}")
    return p.stdout


def one_line(what, p, fragments, logs=False):
    """Exit 2 and one stderr line holding every fragment: the only line, or (`logs`: a trainer's start-up lines
    come before it) the only one naming the first fragment."""
    lines = [line for line in p.stderr.splitlines() if line.strip() and (not logs or fragments[0] in line)]
    got = lines[-1] if lines else ""
    check(p.returncode == 2 and len(lines) == 1 and all(f in got for f in fragments),
          f"{what}: exit 2, one line naming {fragments} (exit {p.returncode}: {p.stderr.strip()[-800:]!r})")


def fake_hub(hf_dir, hub_id):
    """HF_HOME/hub/models--org--name as the Hub writes it: each file a blob named by its hash, the snapshot's
    entries relative links into blobs/, refs/main holding the revision."""
    repo = os.path.join(HF_HOME, "hub", "models--" + hub_id.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", REV)
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "refs"))
    for name in sorted(os.listdir(hf_dir)):
        with open(os.path.join(hf_dir, name), "rb") as f:
            blob = hashlib.sha256(f.read()).hexdigest()
        shutil.copyfile(os.path.join(hf_dir, name), os.path.join(repo, "blobs", blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(REV)


def make_tiny_gpt2():
    """A tiny random GPT-2 over bytes (no dropout: the layouts' runs compare exactly), saved as HF saves it."""
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(1)
    out = os.path.join(WORK, "gpt2")
    transformers.AutoModelForCausalLM.from_config(cfg).float().eval().save_pretrained(out)
    return out


def eval_loss(model, val, *extra, nproc=1):
    cmd = [MESHTRAIN, "eval", model, "--data", val, "--batches", "4", "--set", "data.seq_len=32", "--json", *extra]
    if nproc > 1:
        cmd = [MESHRUN, "--standalone", "--nproc-per-node", str(nproc), "--no-python", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = ok_out(p, f"eval {model} {' '.join(extra)}")
    lines = [line for line in out.splitlines() if '{"checkpoint"' in line]
    return json.loads(lines[-1][lines[-1].index("{"):])["loss"] if lines else float("nan")


def train(config, prefix, out, init_from, *sets, nproc=1):
    sets = [f"data.train={prefix}_train.bin", "data.val=", "data.seq_len=32", "train.micro_batch_size=4",
            "train.steps=3", "train.eval_every=0", "train.sample_tokens=0", "train.threads=1", "logging.every=1",
            "schedule.warmup_steps=1", f"train.out_dir={out}", f"checkpoint.init_from={init_from}", *sets]
    cmd = [MESHTRAIN, "train", config] if nproc == 1 else [MESHRUN, "--standalone", "--nproc-per-node", str(nproc),
                                                           config]
    return subprocess.run([*cmd, *[f"--set={s}" for s in sets]], capture_output=True, text=True, timeout=600)


def losses(out):
    return {r["step"]: r["loss"] for r in metrics(out) if "loss" in r}


def main():
    hf_dir, _, _ = make_tiny_llama(SRC, WORK)
    fake_hub(hf_dir, HUB_ID)
    imported = os.path.join(WORK, "imported")
    ok_out(mt("import", hf_dir, imported), "import")
    sources = {"import": imported, "directory": hf_dir, "org/name": HUB_ID}

    # generate: one prompt, a chat, a file of prompts through the engine.
    prompts = ["And God said, Let there be light", "In the beginning", "And Moses went up"]
    texts, chats, lines = {}, {}, {}
    with open(os.path.join(WORK, "prompts.jsonl"), "w") as f:
        f.writelines(json.dumps({"prompt": p, "id": i}) + "\n" for i, p in enumerate(prompts))
    for name, src in sources.items():
        texts[name] = ok_out(mt("generate", src, "--prompt", prompts[0], "--temperature", "0", "--max-tokens", "12"),
                             f"generate {name}")
        chats[name] = ok_out(mt("generate", src, "--chat", "--prompt", prompts[1], "--temperature", "0",
                                "--max-tokens", "12"), f"generate --chat {name}")
        out = os.path.join(WORK, f"gen_{name.replace('/', '_')}.jsonl")
        ok_out(mt("generate", src, "--input", os.path.join(WORK, "prompts.jsonl"), "--output", out, "--temperature",
                  "0", "--max-tokens", "10"), f"generate --input {name}")
        lines[name] = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    for name in ("directory", "org/name"):
        check(texts[name] == texts["import"] and texts[name].strip(), f"generate {name} = import: {texts[name]!r}")
        check(chats[name] == chats["import"] and chats[name].strip(), f"generate --chat {name} = import")
        check([g["token_ids"] for g in lines[name]] == [g["token_ids"] for g in lines["import"]] and
              len(lines[name]) == len(prompts), f"generate --input {name}: token ids = import's")

    # export org/name: the directory's own tensors and tokenizer written back.
    exported = os.path.join(WORK, "exported")
    ok_out(mt("export", HUB_ID, "--format", "hf", exported), "export org/name --format hf")
    from safetensors.torch import load_file
    a = load_file(os.path.join(hf_dir, "model.safetensors"))
    b = load_file(os.path.join(exported, "model.safetensors")) if os.path.isdir(exported) else {}
    check(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
          and os.path.isfile(os.path.join(exported, "tokenizer.json")), "export org/name: the directory's tensors")

    # serve org/name: its id as the model's name, a greedy completion as the engine's file run gave.
    server = Server(MESHTRAIN, HUB_ID, ["--max-running", "2"])
    try:
        status, models = server.request("GET", "/v1/models")
        check(status == 200 and models["data"][0]["id"] == HUB_ID, f"serve {HUB_ID}: /v1/models {models}")
        status, body = server.request("POST", "/v1/completions", {"prompt": prompts[2], "max_tokens": 10,
                                                                  "temperature": 0})
        want = lines["import"][2]["text"] if len(lines["import"]) == 3 else None
        check(status == 200 and body["choices"][0]["text"] == want,
              f"serve {HUB_ID}: greedy completion = generate --input's ({body} vs {want!r})")
    finally:
        server.proc.terminate()
        server.wait_exit()

    # eval: the same loss; sharded readers (TP 2 over the Hub id, FSDP 2 over GPT-2's transposed tensors).
    prefix = prepare_kjv(MESHTRAIN, SRC, WORK)
    val = f"{prefix}_val.bin"
    loss = {name: eval_loss(src, val) for name, src in sources.items()}
    for name in ("directory", "org/name"):
        check(loss[name] == loss["import"], f"eval {name}: loss {loss[name]!r} = import's {loss['import']!r}")
    tp = eval_loss(HUB_ID, val, "--set", "parallel.tp=2", "--batches", "4", nproc=2)
    check(abs(tp - loss["import"]) <= 1e-5, f"eval {HUB_ID} under TP 2: {tp!r} ≈ {loss['import']!r}")
    gpt2 = make_tiny_gpt2()
    gpt2_imported = os.path.join(WORK, "gpt2_imported")
    ok_out(mt("import", gpt2, gpt2_imported), "import gpt2")
    g_one, g_dir = eval_loss(gpt2_imported, val), eval_loss(gpt2, val)
    g_fsdp = eval_loss(gpt2, val, "--set", "parallel.fsdp=2", "--batches", "2", nproc=2)
    check(g_dir == g_one, f"eval GPT-2 directory: {g_dir!r} = import's {g_one!r}")
    check(abs(g_fsdp - g_one) <= 1e-5, f"eval GPT-2 directory under FSDP 2: {g_fsdp!r} ≈ {g_one!r}")

    # train from checkpoint.init_from: the imported config.yaml's model section, each source's weights.
    config = os.path.join(imported, "config.yaml")
    got = {}
    for name, src in sources.items():
        out = os.path.join(WORK, f"train_{name.replace('/', '_')}")
        p = train(config, prefix, out, src)
        ok_out(p, f"train init_from {name}")
        got[name] = losses(out) if p.returncode == 0 else {}
    for name in ("directory", "org/name"):
        check(got[name] == got["import"] and len(got[name]) == 3, f"train init_from {name}: losses {got[name]} = "
              f"import's {got['import']}")
    hub_out = os.path.join(WORK, "train_org_name")
    check(all(os.path.isfile(os.path.join(hub_out, f)) for f in ("tokenizer.json", "tokenizer_config.json")),
          "train init_from org/name: the tokenizer files copied to train.out_dir")
    fsdp_out = os.path.join(WORK, "train_fsdp2")
    p = train(config, prefix, fsdp_out, HUB_ID, "parallel.fsdp=2", "train.micro_batch_size=2", nproc=2)
    ok_out(p, "train init_from org/name under FSDP 2")
    check("initialised the model from the Hugging Face directory" in p.stdout + p.stderr, "the init line names it")
    fsdp = losses(fsdp_out) if p.returncode == 0 else {}
    check(len(fsdp) == 3 and all(abs(fsdp[s] - got["import"][s]) <= 1e-4 for s in fsdp),
          f"train init_from org/name under FSDP 2: {fsdp} ≈ {got['import']}")
    # generate from that run's checkpoint finds the tokenizer through the recorded org/name.
    ok_out(mt("generate", os.path.join(hub_out, "checkpoints"), "--chat", "--prompt", "Hi", "--max-tokens", "2"),
           "generate --chat from a run started from org/name")

    # Mistakes.
    empty = os.path.join(WORK, "empty")
    os.makedirs(empty)
    one_line("generate on a directory that is neither", mt("generate", empty, "--max-tokens", "2"),
             [empty, "neither a meshtrain checkpoint", "meta.json", "config.json", "model.safetensors"])
    absent = os.path.join(HF_HOME, "hub", "models--meshtest--absent", "refs", "main")
    one_line("generate on an org/name the cache lacks", mt("generate", "meshtest/absent", "--max-tokens", "2"),
             ["meshtest/absent", absent, "nothing is downloaded"])
    one_line("eval on an org/name the cache lacks", mt("eval", "meshtest/absent", "--data", val), [absent])
    p = train(config, prefix, os.path.join(WORK, "bad1"), "meshtest/absent")
    one_line("init_from an org/name the cache lacks", p, ["checkpoint.init_from meshtest/absent", absent], logs=True)
    p = train(config, prefix, os.path.join(WORK, "bad2"), hf_dir, "model.n_kv_head=4")
    one_line("init_from a directory of another model", p, ["checkpoint.init_from", "model.n_kv_head is 4",
                                                            "config.json gives 2"], logs=True)
    lora_over_hf(hf_dir, imported, prefix)


def lora_over_hf(hf_dir, imported, prefix):
    """LoRA straight over a Hugging Face directory, from a config with no model section (its shape taken from
    checkpoint.init_from): the same losses and merged export as LoRA over the import; the adapters-only
    checkpoints name the directory by a content id that another directory of the same shapes does not match."""
    bare = os.path.join(WORK, "bare.yaml")
    with open(bare, "w") as f:
        f.write("# no model section: the shape comes from checkpoint.init_from\ntrain:\n  seed: 1337\n")
    runs, got, merged = {}, {}, {}
    for name, src in (("import", imported), ("org/name", HUB_ID)):
        runs[name] = os.path.join(WORK, f"lora_{name.replace('/', '_')}")
        p = train(bare, prefix, runs[name], src, "model.lora_rank=4", "checkpoint.every=3")
        ok_out(p, f"LoRA over {name} from a config without a model section")
        check("shape from checkpoint.init_from" in p.stdout + p.stderr, f"LoRA over {name}: the shape's source said")
        got[name] = losses(runs[name]) if p.returncode == 0 else {}
        merged[name] = os.path.join(WORK, f"merged_{name.replace('/', '_')}")
        ok_out(mt("export", os.path.join(runs[name], "checkpoints"), "--format", "hf", merged[name]),
               f"export of LoRA over {name}")
    check(got["org/name"] == got["import"] and len(got["import"]) == 3,
          f"LoRA over {HUB_ID}: losses {got['org/name']} = over the import {got['import']}")
    # QLoRA straight over the directory: the NF4 base quantized from its safetensors as from the import's values.
    q = {}
    for name, src in (("import", imported), ("org/name", HUB_ID)):
        out = os.path.join(WORK, f"qlora_{name.replace('/', '_')}")
        p = train(bare, prefix, out, src, "model.lora_rank=4", "model.base_quant=nf4")
        ok_out(p, f"QLoRA over {name}")
        q[name] = losses(out) if p.returncode == 0 else {}
    check(len(q["import"]) == 3 and q["org/name"] == q["import"],
          f"QLoRA over {HUB_ID}: losses {q['org/name']} = over the import {q['import']}")
    meta_file = os.path.join(runs["org/name"], "checkpoints", "step_00000003", "meta.json")
    rec = json.load(open(meta_file))["state"]["lora"] if os.path.isfile(meta_file) else {}
    check(rec.get("adapters_only") and rec.get("base") == HUB_ID and rec.get("id", "").startswith("hf-crc32c:"),
          f"LoRA over {HUB_ID}: adapters-only checkpoint naming its base by content id ({rec})")
    from safetensors.torch import load_file
    a, b = (load_file(os.path.join(merged[n], "model.safetensors")) if os.path.isdir(merged[n]) else {}
            for n in ("import", "org/name"))
    check(a and sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
          "merged export of LoRA over org/name = over the import")
    # meshrun checks such a config through the worker binary, which reads the source's shape: a sequence longer
    # than its positions stops the launch before any worker starts, in the worker's own line.
    p = subprocess.run([MESHRUN, "--standalone", "--nproc-per-node", "2", bare, f"--set=checkpoint.init_from={HUB_ID}",
                        f"--set=data.train={prefix}_train.bin", "--set=data.seq_len=4096"], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 2 and "data.seq_len: given 4096; valid ≤ model.max_seq_len (128)" in p.stderr
          and "the config check above failed" in p.stderr and "[rank" not in p.stdout + p.stderr,
          f"meshrun: a source-shaped config checked before any worker (exit {p.returncode}: {p.stderr[-600:]!r})")
    # The same shapes, other weights: the adapters refuse it as their base.
    other = os.path.join(WORK, "hf_other")
    shutil.copytree(hf_dir, other)
    w = load_file(os.path.join(other, "model.safetensors"))
    w["model.norm.weight"] = w["model.norm.weight"] + 0.5
    from safetensors.torch import save_file
    save_file(w, os.path.join(other, "model.safetensors"), metadata={"format": "pt"})
    p = train(bare, prefix, runs["org/name"], other, "model.lora_rank=4", "train.steps=4", "checkpoint.resume=auto")
    one_line("resume LoRA adapters over another directory", p, ["belong to the base", HUB_ID, other], logs=True)


run_checked(main, check, WORK)
