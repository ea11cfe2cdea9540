#!/usr/bin/env python3
"""`checkpoint.resume: auto` over damaged checkpoint directories (tier 4; meshrun --standalone, FSDP 2 on the CPU
backend, so each rank reads only its own shards and the ranks must agree on what to load).

One run of 8 steps saves step_2, 4, 6 and 8 and gives the reference parameter checksums; every case starts from a
copy of its checkpoints with step_8 removed and `latest` at step_6 (a run stopped after step 6), damages it and
reruns 8 steps with `resume: auto`:
  fallback cases   a dangling / empty / missing `latest`, `latest` naming a .tmp directory (→ step 6, `latest`
                   reported); step_6 without meta.json, with a truncated rank file, with a flipped bit in one
                   rank's model shard (found by one rank only, while loading), with a hand-edited step of -7
                   (→ step 4, the reason named). Each must end bit-identical to the uninterrupted run.
  error cases      step 6's meta.json says step 1000000 (nothing left to train), no checkpoint usable: a failed
                   run with one clear line, and no checkpoint touched.
  fresh            a directory without checkpoints starts at step 0 (and equals the reference too).
  generate         `meshtrain generate` on a meta.json missing a tensor, with a negative byte range, with dtype
                   I8: exit 2, one line naming meta.json, the tensor and what is valid.
Usage: resume_auto_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
from ckpt_e2e import kjv_setup, rank_checksums

bin_dir, src = sys.argv[1], sys.argv[2]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, "resume_auto")
STEPS = 8
failures = []


def train(out):
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=2", "model.d_model=64", "data.seq_len=64",
            "train.micro_batch_size=4", "train.threads=1", "logging.every=1", "train.eval_every=0",
            "train.sample_tokens=0", f"train.steps={STEPS}", "checkpoint.every=2", "checkpoint.keep=0",
            "schedule.warmup_steps=2", f"train.out_dir={out}", "checkpoint.resume=auto", "parallel.fsdp=2",
            "logging.all_ranks=true"]
    cmd = [meshrun, "--standalone", "--nproc-per-node", "2", config, *[f"--set={s}" for s in sets]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return r.returncode, r.stdout


def expect(cond, case, what, log=""):
    if not cond:
        failures.append(f"{case}: {what}")
        print(f"FAIL {case}: {what}\n{log[-4000:]}", flush=True)


def snapshot(ckpt):
    """Every file under the checkpoint directory with its size and modification time."""
    out = {}
    for root, _, files in os.walk(ckpt):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, ckpt)] = (os.path.getsize(p), os.path.getmtime(p))
    return out


def edit_meta(step_dir, fn):
    path = os.path.join(step_dir, "meta.json")
    meta = json.load(open(path))
    fn(meta)
    json.dump(meta, open(path, "w"))


def flip_model_byte(step_dir, rank_file):
    """Flips one bit inside the first model tensor stored in `rank_file` (a safetensors file)."""
    path = os.path.join(step_dir, rank_file)
    with open(path, "r+b") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(hlen))
        name = sorted(k for k in header if k.startswith("model.") and header[k]["data_offsets"][1] > 0)[0]
        off = 8 + hlen + header[name]["data_offsets"][0] + 2
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ 0x10]))


ref_dir = os.path.join(work, "ref")
rc, ref_log = train(ref_dir)
assert rc == 0, ref_log[-4000:]
want = rank_checksums(ref_log)
assert len(want) == 2 and all(s == str(STEPS) for _, _, s in want), want
base = os.path.join(work, "base")
shutil.copytree(os.path.join(ref_dir, "checkpoints"), base)
shutil.rmtree(os.path.join(base, "step_00000008"))
open(os.path.join(base, "latest"), "w").write("step_00000006\n")


def setup(case, damage):
    out = os.path.join(work, case)
    ckpt = os.path.join(out, "checkpoints")
    shutil.copytree(base, ckpt)
    damage(ckpt)
    return out, ckpt


def write(path, text):
    open(path, "w").write(text)


FALLBACK = {  # case → (damage, step resumed from, what the warning says)
    "dangling_latest": (lambda c: write(f"{c}/latest", "step_00000099\n"), 6, "names step_00000099, which does not exist"),
    "empty_latest": (lambda c: write(f"{c}/latest", ""), 6, "latest: empty"),
    "no_latest": (lambda c: os.remove(f"{c}/latest"), 6, "latest: missing"),
    "latest_tmp": (lambda c: write(f"{c}/latest", "step_00000006.tmp\n"), 6, "not a complete step directory"),
    "no_meta": (lambda c: os.remove(f"{c}/step_00000006/meta.json"), 4, "meta.json: no such checkpoint metadata"),
    "truncated": (lambda c: os.truncate(f"{c}/step_00000006/rank_00001.safetensors", 1000), 4, "(truncated)"),
    "bit_flip": (lambda c: flip_model_byte(f"{c}/step_00000006", "rank_00000.safetensors"), 4, "fails its checksum"),
    "negative_step": (lambda c: edit_meta(f"{c}/step_00000006", lambda m: m.update(step=-7)), 4, "step -7 is negative"),
}
for case, (damage, step, why) in FALLBACK.items():
    out, ckpt = setup(case, damage)
    rc, log = train(out)
    expect(rc == 0, case, f"exit code {rc}", log)
    expect(f"resumed from {ckpt}/step_{step:08d} at step {step}" in log, case, f"did not resume from step {step}", log)
    expect(why in log, case, f"no warning saying '{why}'", log)
    got = rank_checksums(log)
    expect(got == want, case, f"parameters {got} differ from the uninterrupted run's {want}", log)
    print(f"{case}: resumed from step {step}, parameters equal the uninterrupted run's", flush=True)


def none_usable(c):
    for s in ("step_00000002", "step_00000004", "step_00000006"):
        os.remove(f"{c}/{s}/meta.json")


ERRORS = {  # case → (damage, the one line)
    "past_the_end": (lambda c: edit_meta(f"{c}/step_00000006", lambda m: m.update(step=1000000)),
                     "saved at step 1000000 but train.steps is 8: nothing left to train (raise train.steps"),
    "none_usable": (none_usable, "holds checkpoints but none is usable"),
}
for case, (damage, line) in ERRORS.items():
    out, ckpt = setup(case, damage)
    before = snapshot(ckpt)
    rc, log = train(out)
    expect(rc != 0, case, "exit code 0", log)
    expect(line in log, case, f"no error line '{line}'", log)
    expect(snapshot(ckpt) == before, case, "the checkpoint directory changed", log)
    expect("step      1/" not in log, case, "it trained", log)
    print(f"{case}: refused, checkpoints untouched", flush=True)

rc, log = train(os.path.join(work, "fresh"))
expect(rc == 0 and "resumed from" not in log and rank_checksums(log) == want, "fresh", "no fresh start", log)

GENERATE = {  # case → (edit of step 6's meta.json, what the line says)
    "missing_tensor": (lambda m: m["tensors"].pop("model.final_norm.weight"),
                       "/meta.json: tensor 'model.final_norm.weight' is missing from the checkpoint"),
    "negative_range": (lambda m: m["tensors"]["model.final_norm.weight"]["shards"][0].update(byte_range=[-256, 0]),
                       "tensor 'model.final_norm.weight': shard in rank_0000"),
    "dtype_i8": (lambda m: m["tensors"]["model.final_norm.weight"].update(dtype="I8"),
                 "meta.json: tensor 'model.final_norm.weight': unsupported dtype 'I8' (valid: "),
}
for case, (edit, line) in GENERATE.items():
    _, ckpt = setup("generate_" + case, lambda c: edit_meta(f"{c}/step_00000006", edit))
    r = subprocess.run([meshtrain, "generate", os.path.join(ckpt, "step_00000006"), "--tokens", "4"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    expect(r.returncode == 2, "generate_" + case, f"exit code {r.returncode}, expected 2", r.stdout)
    expect(line in r.stdout and len(r.stdout.strip().splitlines()) == 1, "generate_" + case,
           f"expected one line with '{line}'", r.stdout)

if failures:
    sys.exit("FAILED:\n  " + "\n  ".join(failures))
shutil.rmtree(work, ignore_errors=True)  # kept only when the test fails
print("resume: auto over damaged checkpoints: ok")
