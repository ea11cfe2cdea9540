#!/usr/bin/env python3
"""`meshtrain plan` as a user runs it: the table for a config's layout, --json, --search (every layout, those
that fit first, fastest first, the ones that do not fit after a separator, marked; 100,000 layers within a
minute), a train.device: cpu config and a wrong flag as one line with exit code 2.
Usage: plan_cli_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import subprocess
import sys

bin_dir, src = sys.argv[1], sys.argv[2]
meshtrain = os.path.join(bin_dir, "meshtrain")
cfg = os.path.join(src, "configs", "node8", "llama3.1-8b-fsdp8.yaml")
failures = []


def run(*args):
    return subprocess.run([meshtrain, "plan", *args], capture_output=True, text=True, timeout=120)


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(f"{what}: {detail}")


p = run(cfg, "--gpus", "8")
check("table: exit 0", p.returncode == 0, p.stderr)
for item in ("AdamW state", "gathered FSDP units", "activations", "logits / loss", "CUDA context",
             "allocator slack", "predicted peak allocated", "step time:", "fsdp all-gather"):
    check(f"table names '{item}'", item in p.stdout, p.stdout)

p = run(cfg, "--gpus", "8", "--json")
j = json.loads(p.stdout)
lay = j["layouts"][0]
check("json: one layout, fsdp 8", len(j["layouts"]) == 1 and lay["parallel"]["fsdp"] == 8, lay["layout"])
items = lay["memory"]["items"]
check("json: items sum to the peak", sum(items.values()) == lay["memory"]["peak_allocated_bytes"], items)
# FSDP over 8: master shards, shard gradients and AdamW state are 4 + 4 + 8 bytes per parameter over 8 ranks.
check("json: sharded state ≈ 16 B × 8.03e9 / 8",
      abs(items["master"] + items["grads"] + items["optimizer"] - 16 * 8.03e9 / 8) < 0.02 * 16 * 8.03e9 / 8, items)
check("json: fits an H200", lay["memory"]["fits"], lay["memory"])

p = run(cfg, "--gpus", "8", "--gpu", "a100-40gb", "--search", "--json")
rows = json.loads(p.stdout)["layouts"]
check("search: several layouts", len(rows) > 10, len(rows))
check("search: every row has fits", all(r["fits"] == r["memory"]["fits"] for r in rows))
check("search: those that fit first", all(a["fits"] or not b["fits"] for a, b in zip(rows, rows[1:])))
check("search: sorted by step time within fitting and not fitting (the config's job before LoRA instead)",
      all(a["time"]["step_s"] <= b["time"]["step_s"] for a, b in zip(rows, rows[1:])
          if (a["fits"], a["changes_job"]) == (b["fits"], b["changes_job"])))
check("search: among those that fit, the full fine-tune's rows before LoRA's",
      all(not a["changes_job"] or b["changes_job"] for a, b in zip(rows, rows[1:]) if a["fits"] and b["fits"]))
check("search: offload and LoRA r16 among the choices of a full fine-tune",
      any(r["offload"] for r in rows) and any(r["lora_rank"] == 16 and r["changes_job"] for r in rows))
check("search: some fit an A100 40GB, some do not",
      any(r["memory"]["fits"] for r in rows) and not all(r["memory"]["fits"] for r in rows))
p = run(cfg, "--gpus", "8", "--search")
check("search table marks layouts that do not fit", " NO " in p.stdout, p.stdout[:2000])
check("search table: no stale pipeline text", "not built" not in p.stdout, p.stdout[:2000])

# 70B LoRA on 8 H100-80GB: faster layouts that do not fit exist; the first row fits, those that do not follow
# after a separator line.
lora = os.path.join(src, "configs", "node8", "llama3.1-70b-lora-fsdp8.yaml")
p = run(lora, "--gpus", "8", "--gpu", "h100-80gb", "--search")
body = p.stdout.splitlines()[2:]
sep = next((i for i, l in enumerate(body) if "do not fit" in l), -1)
check("70B LoRA search: exit 0, first row fits, a separator, then only NO rows",
      p.returncode == 0 and sep > 0 and all(" yes " in l for l in body[:sep])
      and len(body) > sep + 1 and all(" NO " in l for l in body[sep + 1:]), p.stdout[:3000])
check("70B LoRA search: LoRA and offload stated as the config's", "LoRA rank 16" in p.stdout
      and "offload off as the config sets them" in p.stdout, p.stdout[:300])

# A config that trains on the CPU: one line naming train.device, exit 2, no GPU figures.
p = run(cfg, "--gpus", "8", "--set", "train.device=cpu")
lines = p.stderr.strip().splitlines()
check("train.device cpu: exit 2, one line naming train.device, nothing on stdout",
      p.returncode == 2 and len(lines) == 1 and "train.device: cpu" in lines[0] and p.stdout == "", p.stderr)

# 100,000 layers: the planner's sums fold runs of like blocks, so the search takes about a second, as for 32
# (it once walked every layer of every layout: 636 s). 60 s is a wide margin on a loaded machine.
try:
    p = subprocess.run([meshtrain, "plan", cfg, "--set", "model.n_layer=100000", "--gpus", "8", "--search"],
                       capture_output=True, text=True, timeout=60)
    check("search over 100,000 layers: within 60 s, several layouts",
          p.returncode == 0 and p.stdout.count("\n") > 10, p.stderr[-500:])
except subprocess.TimeoutExpired:
    check("search over 100,000 layers: within 60 s", False, "still running after 60 s")

p = run(cfg, "--gpu", "v100")
lines = p.stderr.strip().splitlines()
check("bad --gpu: exit 2, one line naming the flag and the valid GPUs",
      p.returncode == 2 and len(lines) == 1 and "--gpu" in lines[0] and "h200-141gb" in lines[0], p.stderr)
p = run(cfg, "--gpus", "6")
check("layout not dividing the GPUs: exit 2 with the arithmetic", p.returncode == 2 and "fsdp" in p.stderr, p.stderr)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("PASS")
