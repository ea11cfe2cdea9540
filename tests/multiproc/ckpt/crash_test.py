#!/usr/bin/env python3
"""Crash safety of checkpoint saves with real processes (meshrun, 4 CPU ranks, FSDP layout).

For every stage of the save protocol (ckpt/crash_point.h) and a rank that dies there (rank 0, and rank 2
where the stage happens on every rank), a worker is SIGKILLed while saving step 2 over a complete step 1:
  - `latest` names step 1 (step 2 once the kill comes after `latest` moved) and that checkpoint loads
    under another world size and layout, tensors equal;
  - the next run removes the half-written step directory and saves again;
and a truncated file and a flipped bit are clear one-line errors naming the file and the tensor.

    crash_test.py BIN_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="meshtrain_ckpt_crash_")
WORLD = {"single": 1, "fsdp2": 2, "fsdp3": 3, "fsdp4": 4, "tp2": 2}


def run(layout, *args, env=None):
    cmd = [os.path.join(BIN, "meshrun"), "--standalone", "--nproc-per-node", str(WORLD[layout]), "--no-python",
           os.path.join(BIN, "ckpt_worker"), args[0], args[1], layout, *args[2:]]
    e = dict(os.environ)
    e.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    e.update(env or {})
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)


def check(cond, what, r=None):
    if not cond:
        print(f"FAIL: {what}")
        if r is not None:
            print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(1)


def out(r):
    return r.stdout + r.stderr


def latest(d):
    return open(os.path.join(d, "latest")).read().strip()


every_rank = ["host_copy", "file_partial", "file_synced"]
rank0_only = ["meta_written", "renamed", "committed"]
cases = [(s, 0) for s in every_rank + rank0_only] + [(s, 2) for s in every_rank]
for stage, rank in cases:
    d = os.path.join(WORK, f"{stage}_{rank}")
    r = run("fsdp4", "save", d, "1")
    check(r.returncode == 0, f"{stage}/{rank}: first save", r)
    r = run("fsdp4", "save", d, "2", env={"MESHTRAIN_CKPT_CRASH_AT": f"{stage}:{rank}:2"})
    check(r.returncode != 0, f"{stage}/{rank}: the killed save must fail", r)
    check(f"killing itself at stage '{stage}'" in r.stdout + r.stderr, f"{stage}/{rank}: hook did not fire", r)
    want = 2 if stage == "committed" else 1
    check(latest(d) == f"step_{want:08d}", f"{stage}/{rank}: latest is {latest(d)}, expected step {want}")
    for layout in ("fsdp2", "single"):
        r = run(layout, "load", d, str(want))
        check(r.returncode == 0 and r.stdout.count(f"loaded step {want}") == WORLD[layout],
              f"{stage}/{rank}: loading step {want} as {layout}", r)
    # The next run (another world size) cleans up and saves over it.
    r = run("fsdp3", "save", d, "2", "3")
    check(r.returncode == 0, f"{stage}/{rank}: save after the crash", r)
    left = [n for n in os.listdir(d) if n.endswith(".tmp")]
    check(not left, f"{stage}/{rank}: half-written directories left: {left}")
    check(latest(d) == "step_00000003", f"{stage}/{rank}: latest after resave is {latest(d)}")
    r = run("tp2", "load", d, "3")
    check(r.returncode == 0, f"{stage}/{rank}: load after resave", r)
    print(f"ok: SIGKILL at {stage} on rank {rank}: step {want} loads; the next save cleans up")

# Damaged files: one clear line, exit 2, naming file and tensor.
d = os.path.join(WORK, "damage")
check(run("fsdp4", "save", d, "1").returncode == 0, "damage: save")
step = os.path.join(d, "step_00000001")
f1 = os.path.join(step, "rank_00001.safetensors")
os.truncate(f1, os.path.getsize(f1) - 5)
r = run("single", "load", d)
check(r.returncode != 0 and "rank_00001.safetensors: tensor '" in out(r) and "truncated" in out(r),
      "truncated file: expected a clear error", r)
print("ok: truncated file:", [l for l in out(r).splitlines() if "error" in l][-1])
f2 = os.path.join(step, "rank_00002.safetensors")
with open(f2, "r+b") as f:
    f.seek(os.path.getsize(f2) - 3)
    b = f.read(1)
    f.seek(os.path.getsize(f2) - 3)
    f.write(bytes([b[0] ^ 0x40]))
r = run("fsdp2", "load", d)
check(r.returncode != 0 and "rank_00002.safetensors: tensor '" in out(r) and "fails its checksum" in out(r),
      "flipped bit: expected a checksum error", r)
print("ok: flipped bit:", [l for l in out(r).splitlines() if "checksum" in l][0])
with open(os.path.join(step, "meta.json"), "w") as f:
    f.write('{"format_version": 2, "step": ')
r = run("single", "load", d)
check(r.returncode != 0 and "meta.json: corrupt checkpoint metadata" in out(r), "corrupt meta.json", r)
print("ok: corrupt meta.json:", [l for l in out(r).splitlines() if "error" in l][-1])

shutil.rmtree(WORK)
print("crash safety: all ok")
