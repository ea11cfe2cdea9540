#!/usr/bin/env python3
"""QLoRA end to end (tier 4; docs/lora.md "QLoRA"): model.base_quant nf4 over a base checkpoint, on the CPU.

A tiny Llama (byte-level KJV shards) is trained plainly for 2 steps: the base. Over it, LoRA (rank 4, all seven
projections) trains for 6 steps with checkpoints at 3 and 6, once with the base as it is (LoRA) and once with its
block linears held in NF4 (QLoRA). Asserts that
  - the QLoRA losses stay within LOSS_BOUND of the LoRA run's at every step (the base differs by the NF4 error
    alone: each block linear within about a tenth of its blocks' absmax; the bound is stated, not fitted: the
    runs measured here differ by far less), and differ from them (the base really is quantized);
  - the same QLoRA run under meshrun, DDP 2 and FSDP 2 (4 sequences a rank), follows one process of 8 sequences
    within LAYOUT_TOL (the fp32 sums of the loss and gradients in another order);
  - QLoRA's checkpoints hold the adapters only and name the base; the step-3 checkpoint resumed in a fresh run
    gives steps 4-6 bit for bit;
  - `meshtrain export --format hf` merges the adapters into the dequantized base: the merged weight less
    alpha/r · B A (from the PEFT export) is, in every block of 64, one absmax times NF4's 16 levels, and
    differs from the base's weight; `meshtrain generate --logits` of the checkpoint equals that of the merged
    export within 1e-4;
  - `meshtrain eval` of a QLoRA checkpoint (its NF4 base quantized from the base it records) gives the
    validation loss the run logged on the same windows (rel 1e-6);
  - model.base_quant nf4 without checkpoint.init_from is one line, exit 2, unless the run saves no checkpoint
    (a benchmark over the seeded base).
Exit code 77 (skipped) without safetensors or numpy.
Usage: qlora_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors.numpy
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)
from e2e_support import Checks, metrics, prepare_kjv, run, run_checked, tiny_llama_config  # noqa: E402

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
work = tempfile.mkdtemp(prefix="meshtrain_qlora_")
STEPS, HALF = 6, 3
LOSS_BOUND = 0.05  # |QLoRA − LoRA| per step, nats
LAYOUT_TOL = 1e-5
check = Checks()
# bitsandbytes' NF4 levels (model/nf4_tensor.h), to recognise a dequantized block.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0])


def losses(out_dir):
    return [r["loss"] for r in metrics(out_dir) if "loss" in r and "val_loss" not in r]


def train(cfg, out_dir, *sets, ranks=1, layout=()):
    args = [f"--set=train.out_dir={out_dir}", *(f"--set={s}" for s in sets)]
    if ranks == 1:
        run([meshtrain, "train", cfg, *args])
    else:
        run([meshrun, "--standalone", "--nproc-per-node", str(ranks), cfg, *(f"--set={s}" for s in layout), *args])
    return losses(out_dir)


def step_dir(out, step):
    return os.path.join(out, "checkpoints", f"step_{step:08d}")


def close(a, b, tol):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def only_adapters(ck):
    with open(os.path.join(ck, "meta.json")) as f:
        meta = json.load(f)
    names = [n for n in meta["tensors"] if n.startswith("model.")]
    return names and all(n.endswith((".lora_A", ".lora_B")) for n in names), meta["state"].get("lora", {})


def nf4_blocks(w):
    """Whether every block of 64 values (row-major) is one absmax times NF4 levels (to fp32 rounding)."""
    flat = w.astype(np.float64).reshape(-1)
    for s in range(0, flat.size, 64):
        b = flat[s:s + 64]
        am = np.abs(b).max()
        if am == 0:
            continue
        if np.abs(b[:, None] / am - NF4[None, :]).min(axis=1).max() > 1e-5:
            return False
    return True


def check_export(qlora_out, base):
    ck = step_dir(qlora_out, STEPS)
    merged, peft, plain = (os.path.join(work, n) for n in ("merged", "peft", "base_hf"))
    run([meshtrain, "export", ck, "--format", "hf", merged])
    run([meshtrain, "export", ck, "--format", "hf", "--adapters", peft])
    run([meshtrain, "export", base, "--format", "hf", plain])
    m = safetensors.numpy.load_file(os.path.join(merged, "model.safetensors"))
    p = safetensors.numpy.load_file(os.path.join(peft, "adapter_model.safetensors"))
    b = safetensors.numpy.load_file(os.path.join(plain, "model.safetensors"))
    scale = 8.0 / 4
    layers = 0
    for key, w in m.items():
        if not key.endswith("_proj.weight"):
            continue
        stem = "base_model.model." + key[:-len(".weight")]
        a_, b_ = p[stem + ".lora_A.weight"].astype(np.float64), p[stem + ".lora_B.weight"].astype(np.float64)
        deq = w.astype(np.float64) - scale * (b_ @ a_)
        check(nf4_blocks(deq) and not np.allclose(deq, b[key], atol=0, rtol=0),
              f"merged {key}: less the adapters, NF4 blocks (not the base's own weight)")
        layers += 1
    check(layers == 7 * 2, f"{layers} projections merged into the dequantized base")
    check(np.array_equal(m["model.norm.weight"], b["model.norm.weight"]), "the final norm is the base's, unquantized")
    logits = []
    for path in (ck, merged):
        out = os.path.join(work, f"logits_{len(logits)}.safetensors")
        run([meshtrain, "generate", path, "--prompt", "In the beginning", "--logits", out])
        logits.append(safetensors.numpy.load_file(out)["logits"])
    diff = float(np.abs(logits[0] - logits[1]).max())
    check(diff <= 1e-4, f"generate --logits: the QLoRA checkpoint = its merged export (max diff {diff:.2e})")


def check_eval(lora, base, prefix):
    """meshtrain eval of a QLoRA checkpoint (the NF4 path, its base quantized from the base it records) gives the
    validation loss the run logged on the same windows."""
    out = os.path.join(work, "qlora_eval")
    train(lora, out, f"checkpoint.init_from={base}", "model.base_quant=nf4", "train.steps=2", "checkpoint.every=2",
          f"data.val={prefix}_val.bin", "train.eval_every=2", "train.eval_batches=4")
    logged = [r["val_loss"] for r in metrics(out) if "val_loss" in r][-1]
    res = run([meshtrain, "eval", step_dir(out, 2), "--data", f"{prefix}_val.bin", "--batches", "4", "--json"])
    got = json.loads(res.strip().splitlines()[-1])["loss"]
    check(abs(got - logged) <= 1e-6 * abs(logged), f"eval of the QLoRA checkpoint: {got} = the run's val_loss {logged}")


def main():
    prefix = prepare_kjv(meshtrain, src, work)
    plain = tiny_llama_config(work, "base", prefix, STEPS, HALF)
    lora = tiny_llama_config(work, "lora", prefix, STEPS, HALF, lora_rank=4, lora_alpha=8.0)
    base_out = os.path.join(work, "base")
    train(plain, base_out, "train.steps=2", "checkpoint.every=2")
    base = step_dir(base_out, 2)

    ref = train(lora, os.path.join(work, "lora"), f"checkpoint.init_from={base}")
    q_out = os.path.join(work, "qlora")
    got = train(lora, q_out, f"checkpoint.init_from={base}", "model.base_quant=nf4")
    worst = max(abs(x - y) for x, y in zip(got, ref)) if len(got) == len(ref) == STEPS else float("inf")
    check(worst <= LOSS_BOUND and worst > 0, f"QLoRA losses {got} within {LOSS_BOUND} of LoRA's {ref} "
          f"(max |diff| {worst:.4f}), not equal")
    print(f"qlora vs lora: max |loss diff| over {STEPS} steps {worst:.4g} (bound {LOSS_BOUND})")

    # Two ranks of 4 sequences against one process of 8: the same global batch.
    single = train(lora, os.path.join(work, "qlora_mb8"), f"checkpoint.init_from={base}", "model.base_quant=nf4",
                   "checkpoint.every=0", "train.micro_batch_size=8")
    for layout, sets in (("ddp2", []), ("fsdp2", ["parallel.fsdp=2"])):
        other = train(lora, os.path.join(work, "qlora_" + layout), f"checkpoint.init_from={base}",
                      "model.base_quant=nf4", "checkpoint.every=0", ranks=2, layout=sets)
        worst = max(abs(x - y) for x, y in zip(other, single)) if len(other) == len(single) else float("inf")
        check(close(other, single, LAYOUT_TOL), f"QLoRA under {layout}: {other} = one process's {single} "
              f"(max |diff| {worst:.2e})")

    adapters, rec = only_adapters(step_dir(q_out, HALF))
    check(adapters and rec.get("adapters_only") and rec.get("base") == base,
          f"QLoRA checkpoint: adapters only, base {rec.get('base')}")
    resumed = os.path.join(work, "qlora_resumed")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copytree(step_dir(q_out, HALF), step_dir(resumed, HALF))
    with open(os.path.join(resumed, "checkpoints", "latest"), "w") as f:
        f.write(os.path.basename(step_dir(q_out, HALF)))
    again = train(lora, resumed, f"checkpoint.init_from={base}", "model.base_quant=nf4", "checkpoint.resume=auto",
                  "checkpoint.every=0")
    check(again == got[HALF:], f"resumed at step {HALF}: {again} = {got[HALF:]} bit for bit")

    check_export(q_out, base)
    check_eval(lora, base, prefix)

    p = subprocess.run([meshtrain, "train", lora, f"--set=train.out_dir={os.path.join(work, 'no_base')}",
                        "--set=model.base_quant=nf4"], capture_output=True, text=True)
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 2 and "model.base_quant" in last and "checkpoint.init_from" in last,
          f"nf4 without init_from: exit {p.returncode}, '{last}'")
    # …but a run that saves no checkpoint (a benchmark) may quantize its seeded base.
    p = subprocess.run([meshtrain, "train", lora, f"--set=train.out_dir={os.path.join(work, 'seeded')}",
                        "--set=model.base_quant=nf4", "--set=checkpoint.every=0", "--set=checkpoint.save_final=false",
                        "--set=train.steps=2"], capture_output=True, text=True)
    check(p.returncode == 0, f"nf4 over the seeded base, no checkpoint saved: exit {p.returncode}")
    # Not even at a stop signal: such a checkpoint would hold adapters over a base it cannot name.
    seeded = os.path.join(work, "seeded_stop")
    p = subprocess.Popen([meshtrain, "train", lora, f"--set=train.out_dir={seeded}", "--set=model.base_quant=nf4",
                          "--set=checkpoint.every=0", "--set=checkpoint.save_final=false", "--set=train.steps=100000",
                          "--set=logging.every=1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in p.stdout:
        out.append(line)
        if "step      2/" in line:
            p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)
    text = "".join(out)
    check(p.returncode == 128 + signal.SIGTERM and "exiting without a checkpoint" in text
          and not os.path.exists(os.path.join(seeded, "checkpoints", "latest")),
          f"nf4 over the seeded base stopped by SIGTERM: exit {p.returncode}, no checkpoint ({text[-600:]})")


run_checked(main, check, work)
