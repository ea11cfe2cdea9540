#!/usr/bin/env python3
"""Non-finite steps (tier 4; meshrun --standalone, FSDP 2 on the CPU backend: parameters and AdamW state are
sharded, so each rank keeps its own half and both must decide alike).

  skip   optimizer.lr=1e30 without clipping or warmup: step 1's update sends the weights to ~1e30 and from step 2
         on the loss is nan. Steps 2, 3, 4 are skipped (warned, `skipped_steps` 1, 2, 3 in metrics.jsonl) and the
         run stops at step 4 with one line naming train.max_nonfinite_steps (3). Checkpoints are saved every step:
         step_2 and step_3 (after skipped updates) must hold exactly step_1's model and optimizer state (AdamW step
         counters included; compared by every shard's CRC), every saved number is finite, and there is no step_4.
  save   optimizer.lr=1e39 (inf in fp32): step 1's update itself makes the weights non-finite while its loss and
         gradient norm were finite. The save at step 1 is refused with one line; no step directory is written.
Usage: nonfinite_test.py BIN_DIR SOURCE_DIR
"""
import array
import json
import math
import os
import shutil
import struct
import subprocess
import sys
from ckpt_e2e import kjv_setup

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "nonfinite")


def train(out, lr):
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=2", "model.d_model=64", "data.seq_len=64",
            "train.micro_batch_size=4", "train.threads=1", "logging.every=1", "train.eval_every=0",
            "train.sample_tokens=0", "train.steps=10", "checkpoint.every=1", "checkpoint.keep=0",
            "schedule.warmup_steps=0", "schedule.kind=constant", f"optimizer.lr={lr}", "optimizer.grad_clip=0",
            "train.max_nonfinite_steps=3", f"train.out_dir={out}", "parallel.fsdp=2"]
    cmd = [meshrun, "--standalone", "--nproc-per-node", "2", config, *[f"--set={s}" for s in sets]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(r.stdout[-3000:], flush=True)
    return r.returncode, r.stdout


def shard_crcs(step_dir, prefixes=("model.", "optim.")):
    meta = json.load(open(os.path.join(step_dir, "meta.json")))
    return {name: [(s["file"], s["crc32c"]) for s in t["shards"]]
            for name, t in meta["tensors"].items() if name.startswith(prefixes)}


def all_finite(step_dir):
    """Every F32 number of every rank file (model, optimizer state) is finite."""
    for f in os.listdir(step_dir):
        if not f.endswith(".safetensors"):
            continue
        data = open(os.path.join(step_dir, f), "rb").read()
        hlen = struct.unpack("<Q", data[:8])[0]
        for name, e in json.loads(data[8:8 + hlen]).items():
            if name == "__metadata__" or e["dtype"] != "F32":
                continue
            b, end = e["data_offsets"]
            values = array.array("f", data[8 + hlen + b:8 + hlen + end])
            if not all(math.isfinite(v) for v in values):
                return f"{f}: {name}"
    return ""


# skip
out = os.path.join(work, "skip")
ckpt = os.path.join(out, "checkpoints")
rc, log = train(out, "1e30")
assert rc != 0, "a run whose loss stays nan must fail"
assert "(train.max_nonfinite_steps = 3): stopping; the parameters are those of step 1" in log, "no clear stop line"
assert "step 2: non-finite loss or gradient norm: update skipped (1 in a row" in log, "skipped step not warned"
records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
skipped = {r["step"]: r["skipped_steps"] for r in records if "skipped_steps" in r}
assert skipped == {1: 0, 2: 1, 3: 2, 4: 3}, skipped
steps = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))
assert steps == ["step_00000001", "step_00000002", "step_00000003"], steps
first = shard_crcs(os.path.join(ckpt, "step_00000001"))
assert any(n.endswith(".step") for n in first) and len({f for v in first.values() for f, _ in v}) == 2, first
for s in steps:
    assert shard_crcs(os.path.join(ckpt, s)) == first, f"{s}: a skipped update changed model or optimizer state"
    bad = all_finite(os.path.join(ckpt, s))
    assert not bad, f"{s}: non-finite values saved in {bad}"
print("skip: steps 2-4 skipped on both ranks, state unchanged, stopped after 3 in a row: ok", flush=True)

# save
out = os.path.join(work, "save")
rc, log = train(out, "1e39")
assert rc != 0, "a run whose weights are inf must fail"
assert "step 1: no checkpoint written: " in log and "holds inf or nan values" in log, "no clear refusal"
ckpt = os.path.join(out, "checkpoints")
assert not [d for d in os.listdir(ckpt) if d.startswith("step_")] if os.path.isdir(ckpt) else True
print("save: a checkpoint of non-finite weights is refused: ok")
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
