#!/usr/bin/env python3
"""End-to-end: `meshtrain train` under tensor parallelism (meshrun, CPU workers) against the single process.

A small byte-level GPT (the quickstart config, shrunk) trains for a few steps:
  - TP 2 with sequence parallelism (2 workers, one data-parallel rank) on micro-batches of 8, and
  - DP 2 × TP 2 (4 workers) on micro-batches of 4 per data-parallel rank,
each against one process on batches of 8 (the same windows: data is sharded by data-parallel rank only, the
tp ranks of a group reading the same batch). Asserts that
  - the losses follow the single-process run within 2e-3 (fp32 sums in another order; a tp rank reading
    other data, or a gradient counted twice, departs by far more);
  - tokens per step count data-parallel ranks only (metrics `tokens` = steps × 8 × seq_len for both);
  - validation runs and a text sample is printed (generation through the TP layers, sequence parallelism
    switched off for it);
  - in DP 2 × TP 2 the replicas of each TP block (ranks 0/2 and 1/3) hold bit-identical parameters.
Usage: tp_train_test.py BIN_DIR SOURCE_DIR
"""
import os
import re
import shutil
import sys
import tempfile

from e2e_support import metrics, prepare_kjv, run

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
config = os.path.join(src, "configs", "quickstart.yaml")
STEPS, SEQ = 6, 64
work = tempfile.mkdtemp(prefix="meshtrain_tp_e2e_")


prefix = prepare_kjv(meshtrain, src, work)
common = [f"--set=data.train={prefix}_train.bin", f"--set=data.val={prefix}_val.bin",
          "--set=model.n_layer=2", "--set=model.d_model=128", f"--set=model.max_seq_len={SEQ}",
          f"--set=train.steps={STEPS}", "--set=logging.every=1", f"--set=train.eval_every={STEPS}",
          "--set=train.eval_batches=2", "--set=train.sample_tokens=16", "--set=checkpoint.every=0",
          "--set=checkpoint.save_final=false", "--set=schedule.warmup_steps=2"]

runs = {}
single = os.path.join(work, "single")
run([meshtrain, "train", config, *common, "--set=train.micro_batch_size=8", f"--set=train.out_dir={single}"])
runs["single"] = metrics(single)
outs = {}
for name, nproc, extra in [("tp2_sp", 2, ["--set=parallel.tp=2", "--set=parallel.sequence_parallel=true",
                                          "--set=train.micro_batch_size=8"]),
                           ("dp2_tp2", 4, ["--set=parallel.tp=2", "--set=train.micro_batch_size=4"])]:
    d = os.path.join(work, name)
    outs[name] = run([meshrun, "--standalone", "--nproc-per-node", str(nproc), config, *common, *extra,
                      f"--set=train.out_dir={d}"])
    runs[name] = metrics(d)

ref = [r["loss"] for r in runs["single"] if "loss" in r]
for name in ("tp2_sp", "dp2_tp2"):
    recs = runs[name]
    loss = [r["loss"] for r in recs if "loss" in r]
    assert len(loss) == STEPS, (name, loss)
    worst = max(abs(a - b) for a, b in zip(loss, ref))
    print(f"max |loss({name}) - loss(single)| over {STEPS} steps: {worst:.2e}")
    assert worst < 2e-3, f"{name} departs from the single-process run: {loss} vs {ref}"
    last = [r for r in recs if "loss" in r][-1]
    want = STEPS * 8 * SEQ
    assert last["tokens"] == want, f"{name}: {last['tokens']} tokens after {STEPS} steps, want {want}"
    assert any("val_loss" in r for r in recs), f"{name}: no validation loss"
    assert f"sample at step {STEPS} (temperature 0.8, top-k 40):" in outs[name], f"{name}: no sample printed"

sums = dict(re.findall(r"\[rank (\d)\]: .*parameter checksum ([0-9a-f]{8}) after step", outs["dp2_tp2"]))
assert set(sums) == {"0", "1", "2", "3"}, f"expected a checksum line from every rank, got {sums}"
assert sums["0"] == sums["2"] and sums["1"] == sums["3"], f"data-parallel replicas diverged: {sums}"
assert sums["0"] != sums["1"], f"tp ranks hold the same parameters: {sums}"

shutil.rmtree(work)
print("tensor-parallel training e2e: ok")
