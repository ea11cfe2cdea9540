#!/usr/bin/env python3
"""Per-layer GPU memory of a Llama 3.1 70B-shaped model, measured on one GPU, against `meshtrain plan`.

A 70B model does not fit one GPU, but one of its layers does: the script trains the 70B shape (d_model 8192,
d_ff 28672, 64 heads, 8 KV heads, vocabulary 128256) with 2 and with 4 layers through `meshtrain bench train`
(the real training loop, synthetic tokens; peak = the caching allocator's peak allocated bytes during the steps,
which is what the plan predicts; building and loading the model are reported apart, as "setup"), and takes
  per layer = (peak(4 layers) − peak(2 layers)) / 2        the rest = peak(2 layers) − 2 × per layer
then asks `meshtrain plan CFG --gpus 1 --json` for the same two configs and prints predicted vs measured, per
layer and for the rest, with their ratio, and writes OUT/layer_memory.json. The 70B arithmetic in
configs/node8/llama3.1-70b-{lora,offload}-fsdp8.yaml and docs/plan.md scales these per-layer figures to 80
layers over FSDP 8.

Modes (--modes, comma-separated):
  full      every parameter trains, state on the GPU (bf16 autocast, fp32 master and AdamW)
  lora      LoRA r16 on q,k,v,o,gate,up,down over a frozen bf16 base: model.lora_rank=16, model.lora_alpha=32
  qlora     the same LoRA over the block linears held in NF4 (model.base_quant=nf4, docs/lora.md "QLoRA"): the seeded
            base quantized at start-up (a benchmark saves no checkpoint, so no checkpoint.init_from is needed)
  offload   full fine-tune with optimizer.offload: cpu
  offload_fsdp  full fine-tune with optimizer.offload: cpu under FSDP over one rank (parallel.zero_stage 3,
            parallel.param_dtype bf16): the streamed FSDP path of configs/node8/llama3.1-70b-offload-fsdp8.yaml
            (each block a unit gathered from its bf16 shard, the reduced shard gradient streamed to the host
            during the backward, no fp32 master or gradient shard on the GPU). One rank's shard is the whole
            layer (2 bytes a parameter); under FSDP 8 the planner divides the shard by 8 and keeps the gathered
            unit, the activations and the transients as measured here.
The plan gets the same --set values as the run. A mode whose run fails is reported, not fatal
for the others.

    python3 scripts/bench/layer_memory.py build/bin/meshtrain OUT [--seq 4096] [--batch 1]
        [--modes full,lora,offload,offload_fsdp] [--gpu auto|h100-80gb|...]

The plan's card (--gpu) is by default the one the runs use (nvidia-smi's name of GPU 0, as `meshtrain plan --gpu`
names it); the per-layer peaks do not depend on it, but the table and the JSON say which card measured them.
"""
import argparse
import json
import os
import subprocess
import sys

SHAPE = "llama3.1-70b"
MODES = {  # name: (--set values of both the run and the plan, unused)
    "full": ([], []),
    "lora": (["model.lora_rank=16", "model.lora_alpha=32"], []),
    "qlora": (["model.lora_rank=16", "model.lora_alpha=32", "model.base_quant=nf4"], []),
    "offload": (["optimizer.offload=cpu"], []),
    "offload_fsdp": (["optimizer.offload=cpu", "parallel.zero_stage=3", "parallel.param_dtype=bf16"], []),
}


def config_text(layers, seq, batch, sets):
    lines = [f"model: {{preset: {SHAPE}, n_layer: {layers}}}",
             f"data: {{train: synthetic, seq_len: {seq}}}",
             f"train: {{micro_batch_size: {batch}, activation_checkpointing: true}}"]
    return "\n".join(lines) + "\n"


def measure(meshtrain, out, mode, layers, args):
    sets, _ = MODES[mode]
    js = os.path.join(out, f"bench_{mode}_{layers}L.json")
    cmd = [meshtrain, "bench", "train", "--preset", SHAPE, "--layers", str(layers), "--seq", str(args.seq),
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", "1", "--activation-checkpointing",
           "--json", js]
    for s in sets:
        cmd += ["--set", s]
    log = os.path.join(out, f"bench_{mode}_{layers}L.log")
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=1200)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(cmd)} — see {log}", file=sys.stderr)
        return None
    with open(js) as f:
        j = json.load(f)
    return j["step_peak_memory_bytes"], j["setup_peak_memory_bytes"]


def predict(meshtrain, out, mode, layers, args):
    sets, _ = MODES[mode]
    cfg = os.path.join(out, f"plan_{layers}L.yaml")
    with open(cfg, "w") as f:
        f.write(config_text(layers, args.seq, args.batch, []))
    cmd = [meshtrain, "plan", cfg, "--gpus", "1", "--json", "--gpu", args.gpu]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"FAILED: {' '.join(cmd)}: {p.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(p.stdout)["layouts"][0]["memory"]["peak_allocated_bytes"]


# meshtrain plan's card names (src/plan/gpu_spec.cpp) by a part of the name nvidia-smi gives; the first match wins.
PLAN_GPUS = [("H200", "h200-141gb"), ("H100", "h100-80gb"), ("A100-SXM4-40GB", "a100-40gb"),
             ("A100-PCIE-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("L4", "l4-24gb")]


def visible_gpu():
    """(nvidia-smi's name of GPU 0, the plan's name for it); the plan's default card where neither is known."""
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        name = ""
    plan = next((p for part, p in PLAN_GPUS if part in name), None)
    if plan is None:
        print(f"the GPU is '{name or 'unknown'}', which meshtrain plan does not name: planning for h200-141gb",
              file=sys.stderr)
    return name or "unknown", plan or "h200-141gb"


def split(two, four):
    per = (four - two) / 2
    return per, two - 2 * per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meshtrain", help="path to the meshtrain binary (a CUDA build)")
    ap.add_argument("out", help="directory for the logs and layer_memory.json")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gpu", default="auto",
                    help="the GPU the plan assumes (meshtrain plan --gpu); auto: the card the runs use")
    ap.add_argument("--modes", default="full,lora,offload,offload_fsdp")
    args = ap.parse_args()
    card = args.gpu
    if args.gpu == "auto":
        card, args.gpu = visible_gpu()
    os.makedirs(args.out, exist_ok=True)
    gib = 1024 ** 3
    rows, ok = [], True
    print(f"{SHAPE} shape, micro-batch {args.batch} × {args.seq}, activation checkpointing, one GPU ({card}; "
          f"planned for {args.gpu})")
    print(f"{'mode':<12} {'what':<10} {'measured GiB':>13} {'planned GiB':>12} {'meas/plan':>9} {'setup GiB':>10}")
    for mode in args.modes.split(","):
        if mode not in MODES:
            sys.exit(f"--modes: given '{mode}'; valid: {', '.join(MODES)}")
        runs = [measure(args.meshtrain, args.out, mode, n, args) for n in (2, 4)]
        plan = [predict(args.meshtrain, args.out, mode, n, args) for n in (2, 4)]
        if None in runs or None in plan:
            ok = False
            rows.append({"mode": mode, "error": "a run failed (see the logs)"})
            continue
        meas, setup = [r[0] for r in runs], [r[1] for r in runs]
        m_per, m_rest = split(*meas)
        p_per, p_rest = split(*plan)
        s_per, s_rest = split(*setup)
        for what, m, p, s in (("per layer", m_per, p_per, s_per), ("rest", m_rest, p_rest, s_rest)):
            print(f"{mode:<12} {what:<10} {m / gib:13.2f} {p / gib:12.2f} {m / p if p else 0:9.2f} {s / gib:10.2f}")
        rows.append({"mode": mode, "measured_peak_bytes": {"2": meas[0], "4": meas[1]},
                     "setup_peak_bytes": {"2": setup[0], "4": setup[1]},
                     "planned_peak_bytes": {"2": plan[0], "4": plan[1]},
                     "measured_per_layer_bytes": m_per, "planned_per_layer_bytes": p_per,
                     "setup_per_layer_bytes": s_per,
                     "measured_rest_bytes": m_rest, "planned_rest_bytes": p_rest})
    with open(os.path.join(args.out, "layer_memory.json"), "w") as f:
        json.dump({"shape": SHAPE, "seq": args.seq, "batch": args.batch, "gpu": card, "plan_gpu": args.gpu,
                   "rows": rows}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
