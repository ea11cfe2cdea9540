#!/usr/bin/env python3
"""The trainer's sharded checkpoints through real processes (meshrun, CPU backend, fp32, deterministic).

  exact LAYOUT   LAYOUT in ddp2 | fsdp2 | zero2. One meshrun run with --max-restarts 1 in which rank 0 kills
                 itself right after committing step 3 (MESHTRAIN_CKPT_CRASH_AT=committed:0:3); meshrun restarts
                 the group, `checkpoint.resume: auto` resumes from step 3. Every step's loss and every rank's
                 final parameter checksum must be bit-identical to an uninterrupted run's. Replicated blocks
                 must be spread: every rank writes a file, the largest at most 1.5× the smallest.
  reshard        Saved under FSDP 4 at step 3, resumed under FSDP 2, DDP 2 and one process (the same global
                 batch: micro_batch_size × ranks = 8, the same data cursor): steps 4-6 lose what the
                 uninterrupted FSDP 4 run lost, within RESHARD_ATOL (only the reduction order differs).
  init_from      checkpoint.init_from: a trained checkpoint's weights at step 0 with fresh optimizer state,
                 from the checkpoint itself (one process) and from its `meshtrain export --format hf` →
                 `meshtrain import` copy (FSDP 2, resharded): the same first loss, far below a fresh model's;
                 a restart of that run resumes instead of re-initialising; user mistakes exit 2 with one line.

  offload        optimizer.offload: cpu against the on-device optimizer under FSDP 2 (each unit's reduced shard
                 gradient streamed during the backward; the host master is the master, the device holds the shards
                 in param_dtype), in a single process (gradients streamed from the backward) and with accumulation
                 2 (held: summed on the device, then taken down in chunks at the step): every step's loss within
                 OFFLOAD_ATOL; a checkpoint saved with offload resumes without it and one saved without
                 resumes with it (the format is the same), steps 4-6 within OFFLOAD_ATOL of the uninterrupted run;
                 the step log and metrics.jsonl report the host update time and the bytes moved each way.

  lora           LoRA from checkpoint.init_from (a plain Llama trained here): checkpoints hold only the adapters and
                 their optimizer state, and name the base (its size against the base's printed). `exact` under
                 DDP 2 and FSDP 2: the resumed run's losses and parameters bit-identical; DDP 2's checkpoint resumed
                 under FSDP 2 within RESHARD_ATOL; merged export from the recorded base = with --base, PEFT export
                 without the base; a missing base, an unset init_from, another base: exit 2, one line.

  gpu_shared     (label gpu; exit 77 without a GPU) exact, FSDP 2 with both ranks on one GPU (the CPU backend
                 stages the GPU's tensors through host memory), fp32: the resumed run continues exactly.
  offload_delay  optimizer.offload_delay: 1 (one process, streamed and with accumulation 2): step 1's loss equals
                 the undelayed run's and step 2's differs (it runs on the initial parameters); `exact` holds: a run
                 killed after its step-3 checkpoint resumes with bit-identical losses and final parameters.
  offload_delay_gpu (label gpu; exit 77 without a GPU) offload_delay: 1 on one GPU, fp32, accumulation 1
                 (streamed) and 4 (downloaded): from the CPU run's step-3 checkpoint, steps 4-6 within GPU_ATOL
                 of the CPU run; a CUDA run resumed from its own step-3 checkpoint within GPU_ATOL of itself.
  offload_gpu    (label gpu; exit 77 without a GPU) optimizer.offload: cpu on one GPU (pinned buffers, copy
                 streams; at accumulation 1 gradients streamed during the backward, at 4 held on the device and
                 taken down in chunks; bf16 parameters on the device either way)
                 against the on-device optimizer, fp32 and bf16, accumulation 1 and 4, and FSDP over one rank with
                 bf16 parameters (streamed: bf16 shards, each unit's reduced gradient to the host): losses within
                 GPU_ATOL / BF16_ATOL; the bf16 runs' peak device memory below the on-device optimizer's.
  gpu            (label gpu; exit 77 without 2 GPUs) the same save/resume over NCCL on 2 GPUs, fp32: saved
                 under FSDP 2 at step 3, resumed under DDP 2 and under FSDP 2; steps 4-6 within GPU_ATOL of
                 the uninterrupted run (CUDA's atomic-add reductions are not bit-reproducible).

Usage: trainer_resume_test.py BIN_DIR SOURCE_DIR MODE [LAYOUT]
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

from ckpt_e2e import kjv_setup  # noqa: E402  (this file's folder)

bin_dir, src, mode = sys.argv[1], sys.argv[2], sys.argv[3]
meshrun, meshtrain, config, work, prefix = kjv_setup(bin_dir, src, f"trainer_ckpt_{mode}")
STEPS, SAVE_AT = 6, 3
GPU_ATOL = 1e-3
OFFLOAD_ATOL = 1e-4  # the same math in another order: fp32 rounding, as RESHARD_ATOL
BF16_ATOL = 2e-2
RESHARD_ATOL = 1e-4  # fp32 losses ≈ 5: different reduction orders move them by ~1e-6 in 3 steps
LAYOUTS = {  # name → (processes, --set overrides); micro_batch_size × data-parallel ranks = 8 everywhere
    "ddp2": (2, ["parallel.fsdp=1"]),
    "fsdp2": (2, ["parallel.fsdp=2"]),
    "zero2": (2, ["parallel.zero_stage=2"]),
    "fsdp4": (4, ["parallel.fsdp=4"]),
    "tp2": (2, ["parallel.tp=2"]),
    "fsdp2tp2": (4, ["parallel.fsdp=2", "parallel.tp=2"]),
    "single": (1, []),
}


def data_parallel_ranks(layout):
    nproc, lsets = LAYOUTS[layout]
    tp = next((int(s.split("=")[1]) for s in lsets if s.startswith("parallel.tp=")), 1)
    return nproc // tp


def train(out, layout, *sets, env=None, restarts=0, check=True):
    nproc, lsets = LAYOUTS[layout]
    e = dict(os.environ)
    e.pop("MESHTRAIN_CKPT_CRASH_AT", None)
    e.update(env or {})
    sets = [f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=2", "model.d_model=64",
            "data.seq_len=64", f"train.micro_batch_size={8 // data_parallel_ranks(layout)}", f"train.threads={max(1, 2 // nproc)}",
            "logging.every=1", "train.eval_every=0", "train.sample_tokens=0", f"train.steps={STEPS}",
            f"checkpoint.every={SAVE_AT}", "schedule.warmup_steps=2", f"train.out_dir={out}",
            "checkpoint.memory_every=0",  # the disk checkpoints' resume (in-memory ones: docs/resilience.md)
            "logging.all_ranks=true", *lsets, *sets]
    cmd = [meshrun, "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", str(restarts), config,
           *[f"--set={s}" for s in sets]]
    r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if check and r.returncode != 0:
        print(r.stdout[-6000:])
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}")
    return r.returncode, r.stdout


def losses(out):
    """step → loss, the last record of each step (a resumed run appends the steps it redoes)."""
    got = {}
    for line in open(os.path.join(out, "metrics.jsonl")):
        rec = json.loads(line)
        if "loss" in rec:
            got[rec["step"]] = rec["loss"]
    return got


def checksums(log):
    return sorted(set(re.findall(r"\[rank (\d+)\].*parameter checksum ([0-9a-f]{8}) after step (\d+)", log)))


def expect(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def exact(layout, *extra, tag=""):
    """Returns the uninterrupted run's out_dir."""
    ref_out = os.path.join(work, tag + "ref")
    _, ref_log = train(ref_out, layout, *extra)
    ref, ref_sums = losses(ref_out), checksums(ref_log)
    expect(sorted(ref) == list(range(1, STEPS + 1)) and len(ref_sums) == LAYOUTS[layout][0], (ref, ref_sums))
    # Spread of replicated blocks: every rank wrote a file of similar size.
    sizes = [os.path.getsize(f) for f in sorted(glob.glob(os.path.join(ref_out, "checkpoints", "step_00000006", "rank_*")))]
    expect(len(sizes) == LAYOUTS[layout][0] and max(sizes) <= 1.5 * min(sizes), f"rank files {sizes}: not spread")

    run_out = os.path.join(work, tag + "run")
    rc, log = train(run_out, layout, *extra, "checkpoint.resume=auto", env={"MESHTRAIN_CKPT_CRASH_AT": f"committed:0:{SAVE_AT}"},
                    restarts=1)
    expect("killing itself at stage 'committed' of step 3" in log, "the crash point did not fire")
    expect(f"resumed from {run_out}/checkpoints/step_00000003 at step 3" in log, "did not resume from step 3")
    got, got_sums = losses(run_out), checksums(log.split("resumed from")[-1])
    for s in range(1, STEPS + 1):
        expect(got.get(s) == ref[s], f"{layout}: step {s} loss {got.get(s)!r} after resume, {ref[s]!r} uninterrupted")
    expect(got_sums == ref_sums, f"{layout}: final parameters {got_sums} differ from the uninterrupted {ref_sums}")
    print(f"exact resume {layout}: losses of steps 1-{STEPS} and parameters {ref_sums} bit-identical "
          f"(rank files {sizes} bytes): ok")
    return ref_out


def reshard():
    ref_out = os.path.join(work, "fsdp4")
    train(ref_out, "fsdp4")
    ref = losses(ref_out)
    saved = os.path.join(ref_out, "checkpoints", f"step_{SAVE_AT:08d}")
    for layout in ("fsdp2", "ddp2", "single", "tp2", "fsdp2tp2"):
        out = os.path.join(work, layout)
        _, log = train(out, layout, f"checkpoint.resume={saved}")
        expect(f"resumed from {saved} at step {SAVE_AT} (saved by 4 rank(s)" in log, f"{layout}: no resume line")
        got = losses(out)
        expect(sorted(got) == list(range(SAVE_AT + 1, STEPS + 1)), f"{layout}: steps {sorted(got)}")
        diff = max(abs(got[s] - ref[s]) for s in got)
        expect(diff <= RESHARD_ATOL, f"{layout}: losses {got} vs FSDP 4's {ref}: max diff {diff:.3g} > {RESHARD_ATOL}")
        print(f"reshard fsdp4 → {layout}: steps {SAVE_AT + 1}-{STEPS} max |loss diff| {diff:.2e} ≤ {RESHARD_ATOL}: ok")


def first_loss(out):
    got = losses(out)
    expect(min(got) == 1, f"{out}: the run did not start at step 0 ({sorted(got)})")
    return got[1]


def init_from():
    src_out = os.path.join(work, "pretrained")
    train(src_out, "single", "train.steps=12", "schedule.warmup_steps=2", "optimizer.lr=3e-3")
    ckpt = os.path.join(src_out, "checkpoints")
    hf, imported = os.path.join(work, "hf"), os.path.join(work, "imported")
    subprocess.run([meshtrain, "export", ckpt, "--format", "hf", hf], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([meshtrain, "import", hf, imported], check=True, stdout=subprocess.DEVNULL)

    a_out = os.path.join(work, "tune_a")
    _, log = train(a_out, "single", f"checkpoint.init_from={ckpt}", "train.steps=2", "checkpoint.resume=auto")
    expect("initialised the model from" in log, "no init line")
    tuned = first_loss(a_out)
    b_out = os.path.join(work, "tune_b")
    train(b_out, "fsdp2", f"checkpoint.init_from={imported}", "train.steps=2")
    via_hf = first_loss(b_out)
    c_out = os.path.join(work, "fresh")
    train(c_out, "single", "train.steps=1")
    fresh = first_loss(c_out)
    expect(abs(tuned - via_hf) <= RESHARD_ATOL, f"first loss {tuned} from the checkpoint, {via_hf} from its HF copy")
    expect(tuned < fresh - 0.3, f"first loss {tuned} from the trained weights is not below a fresh model's {fresh}")

    # A restart of the fine-tuning run continues from its own checkpoint, not from init_from again.
    _, log = train(a_out, "single", f"checkpoint.init_from={ckpt}", "train.steps=3", "checkpoint.resume=auto")
    expect("resumed from" in log and "initialised the model from" not in log, "restart re-initialised")

    rc, log = train(os.path.join(work, "bad"), "single", f"checkpoint.init_from={work}/missing", check=False)
    expect(rc != 0 and "missing" in log, f"missing init_from: rc {rc}\n{log[-2000:]}")
    rc, log = train(os.path.join(work, "bad2"), "single", f"checkpoint.init_from={ckpt}",
                    f"checkpoint.resume={ckpt}", check=False)
    expect(rc != 0 and "checkpoint.init_from: given" in log, f"init_from + resume path: rc {rc}\n{log[-2000:]}")
    print(f"init_from: first loss {tuned:.5f} (checkpoint, 1 process) = {via_hf:.5f} (HF import, FSDP 2) "
          f"< {fresh:.5f} (fresh): ok")


def max_diff(got, ref, steps):
    expect(sorted(got) == list(steps), f"steps {sorted(got)}, expected {list(steps)}")
    return max(abs(got[s] - ref[s]) for s in steps)


def offload_costs(out):
    """The offloaded optimizer's figures of the last step in metrics.jsonl."""
    last = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if "loss" in line][-1]
    return {k: v for k, v in last.items() if k.startswith("optimizer_")}


OFFLOAD_CASES = {  # case → (layout, extra settings, streamed): FSDP streams its shard gradients at any
    # accumulation; a single process streams without accumulation, with it the gradients are held: they sum on
    # the device and go down in chunks at the step (core/gradient_streaming.h)
    "fsdp2": ("fsdp2", [], True),
    "single": ("single", [], True),
    "single_accum2": ("single", ["train.micro_batch_size=4", "train.grad_accum=2"], False),
}


def offload():
    # DDP 2 (and FSDP 2 with accumulation) against the on-device optimizer: parallel_*_offload.
    for case, (layout, extra, streamed) in OFFLOAD_CASES.items():
        ref_out, off_out = os.path.join(work, f"{case}_device"), os.path.join(work, f"{case}_offload")
        train(ref_out, layout, *extra)
        _, log = train(off_out, layout, *extra, "optimizer.offload=cpu", "optimizer.offload_threads=2")
        streams = "gradients leave the device as the backward produces them" in log
        expect(streams == streamed, f"{case}: streaming {streams} (the log says whether)")
        held = "the gradients stay on the device" in log
        expect(held == (layout == "single" and not streamed), f"{case}: held {held} (the log says whether)")
        ref, got = losses(ref_out), losses(off_out)
        diff = max_diff(got, ref, range(1, STEPS + 1))
        expect(diff <= OFFLOAD_ATOL, f"{case}: offloaded losses {got} vs on-device {ref}: max diff {diff:.3g}")
        expect(re.search(r"host update ms [0-9.e+-]+ \| D2H MB [0-9.e+-]+ \| H2D MB [0-9.e+-]+", log), "no offload figures in the step log")
        costs = offload_costs(off_out)
        expect(costs.get("optimizer_D2H_MB", 0) > 0 and costs.get("optimizer_H2D_MB", 0) > 0, f"metrics: {costs}")
        print(f"offload {case}: steps 1-{STEPS} max |loss diff| {diff:.2e} ≤ {OFFLOAD_ATOL}; last step {costs}: ok")
        # Each checkpoint resumes under the other optimizer: the state's names and shapes are the same.
        for saved_by, resume_sets in ((off_out, []), (ref_out, ["optimizer.offload=cpu"])):
            saved = os.path.join(saved_by, "checkpoints", f"step_{SAVE_AT:08d}")
            out = os.path.join(work, f"{case}_from_{os.path.basename(saved_by)}")
            _, log = train(out, layout, *extra, f"checkpoint.resume={saved}", *resume_sets)
            expect(f"resumed from {saved} at step {SAVE_AT}" in log, f"{case}: no resume line")
            diff = max_diff(losses(out), ref, range(SAVE_AT + 1, STEPS + 1))
            expect(diff <= OFFLOAD_ATOL, f"{case}: resumed from {saved} ({resume_sets}): max diff {diff:.3g}")
            print(f"offload {case}: saved by {os.path.basename(saved_by)}, resumed "
                  f"{'with' if resume_sets else 'without'} offload: steps {SAVE_AT + 1}-{STEPS} max |loss diff| {diff:.2e}: ok")


def offload_delay():
    # Streamed (one process, accumulation 1) and downloaded after the backward (accumulation 2).
    for case in ("single", "single_accum2"):
        layout, extra, streamed = OFFLOAD_CASES[case]
        off = [*extra, "optimizer.offload=cpu", "optimizer.offload_threads=2"]
        plain_out = os.path.join(work, f"{case}_undelayed")
        train(plain_out, layout, *off)
        ref_out = exact(layout, *off, "optimizer.offload_delay=1", tag=f"{case}_delayed_")
        plain, delayed = losses(plain_out), losses(ref_out)
        # Step 1 runs on the initial parameters either way; delayed, so does step 2 (update 1 still on the host).
        expect(delayed[1] == plain[1] and delayed[2] != plain[2],
               f"{case}: delayed losses {delayed} vs undelayed {plain}: the update was not delayed")
        print(f"offload_delay {case}: step 1 loss equal, step 2 {delayed[2]:.6f} (delayed) vs {plain[2]:.6f}, "
              f"step {STEPS} {delayed[STEPS]:.6f} vs {plain[STEPS]:.6f}: ok")


def offload_delay_gpu():
    skip_below(1)
    # The copy streams' ordering under the delay (uploads after the backward, downloads beside them, each
    # master kept until its upload read it): a race would show as a loss off the CPU run's, the same math.
    # A model initialised on the GPU draws other numbers than one on the CPU, so the CUDA run starts from the
    # CPU run's step-3 checkpoint (parameters, moments and data cursor) and steps 4-6 are compared; then a
    # CUDA run of its own is resumed from its step-3 checkpoint and compared with itself.
    for accum in (1, 4):  # streamed during the backward; downloaded after it
        fp32 = ["train.dtype=fp32", f"train.micro_batch_size={8 // accum}", f"train.grad_accum={accum}",
                "optimizer.offload=cpu", "optimizer.offload_delay=1"]
        cuda = [*fp32, "train.device=cuda"]
        run = lambda name: os.path.join(work, f"delay_accum{accum}_{name}")
        step3 = lambda out: os.path.join(out, "checkpoints", f"step_{SAVE_AT:08d}")
        after = range(SAVE_AT + 1, STEPS + 1)
        train(run("cpu"), "single", *fp32)
        train(run("from_cpu"), "single", *cuda, f"checkpoint.resume={step3(run('cpu'))}")
        ref, got = losses(run("cpu")), losses(run("from_cpu"))
        diff = max_diff(got, ref, after)
        expect(diff <= GPU_ATOL, f"delayed offload, accumulation {accum}: CUDA from the CPU run's step {SAVE_AT}: "
                                 f"max diff {diff:.3g} (CPU {[round(ref[s], 5) for s in after]}, "
                                 f"CUDA {[round(got[s], 5) for s in after]})")
        train(run("gpu"), "single", *cuda)
        train(run("resumed"), "single", *cuda, f"checkpoint.resume={step3(run('gpu'))}")
        rdiff = max_diff(losses(run("resumed")), losses(run("gpu")), after)
        expect(rdiff <= GPU_ATOL, f"delayed offload, accumulation {accum}: resumed on CUDA: max diff {rdiff:.3g}")
        print(f"offload_delay on CUDA, accumulation {accum}: steps {SAVE_AT + 1}-{STEPS} from the CPU run's "
              f"checkpoint within {diff:.2e} of it, a CUDA run resumed within {rdiff:.2e} of itself: ok")


def peak_memory(out):
    return max(json.loads(line).get("peak_memory_bytes", 0) for line in open(os.path.join(out, "metrics.jsonl")))


def offload_gpu():
    skip_below(1)
    # BF16_ATOL: the device computes with the bf16 cast of the master either way (autocast casts the fp32
    # weights for the matmuls), but with streaming the norms' and embedding's weights are bf16 too.
    # The last case: FSDP over one rank with bf16 parameters (not aliased to the module), whose streamed path
    # keeps bf16 shards and hands each unit's reduced gradient over (a whole model per process: accumulation 1).
    fsdp1 = ["parallel.zero_stage=3", "parallel.param_dtype=bf16"]
    for dtype, atol, accum, extra in (("fp32", GPU_ATOL, 1, []), ("bf16", BF16_ATOL, 1, []), ("bf16", BF16_ATOL, 4, []),
                                      ("bf16", BF16_ATOL, 1, fsdp1)):
        cuda = ["train.device=cuda", f"train.dtype={dtype}", f"train.micro_batch_size={8 // accum}",
                f"train.grad_accum={accum}", *extra]
        name = f"gpu_{dtype}_accum{accum}" + ("_fsdp1" if extra else "")
        ref_out, off_out = os.path.join(work, f"{name}_device"), os.path.join(work, f"{name}_offload")
        train(ref_out, "single", *cuda)
        _, log = train(off_out, "single", *cuda, "optimizer.offload=cpu")
        streams = "gradients leave the device as the backward produces them" in log
        expect(streams == (accum == 1), f"{name}: streaming {streams}, expected only without accumulation")
        held = "the gradients stay on the device" in log
        expect(held == (accum > 1), f"{name}: held {held}, expected with accumulation")
        expect(not extra or "fsdp over 1 shard" in log, f"{name}: not the FSDP layout")
        diff = max_diff(losses(off_out), losses(ref_out), range(1, STEPS + 1))
        expect(diff <= atol, f"{name}: offloaded vs on-device losses: max diff {diff:.3g} > {atol}")
        ref_peak, off_peak = peak_memory(ref_out), peak_memory(off_out)
        if dtype == "bf16":  # no moments on the device (streamed or held: no fp32 master or gradient either)
            expect(off_peak < ref_peak, f"{name}: peak device memory {off_peak} with offload, {ref_peak} without")
        print(f"offload on CUDA, {name}: steps 1-{STEPS} max |loss diff| {diff:.2e} ≤ {atol}; peak {off_peak / 2**20:.1f} "
              f"MiB (on-device optimizer {ref_peak / 2**20:.1f} MiB); last step {offload_costs(off_out)}: ok")


def skip_below(gpus):
    try:
        import torch
        n = torch.cuda.device_count()
    except ImportError:
        n = 0
    if n < gpus:
        print(f"skipped: {n} CUDA device(s), {gpus} needed")
        shutil.rmtree(work)
        sys.exit(77)


def gpu_shared():
    skip_below(1)
    exact("fsdp2", "train.device=cuda", "parallel.backend=cpu", "train.dtype=fp32")


def gpu_single():
    """One process on one GPU: the trainer keeps a step in flight (each step's log line and non-finite check
    run while the device computes the next), and still resumes bit-exactly around the step-3 checkpoint."""
    skip_below(1)
    exact("single", "train.device=cuda", "train.dtype=fp32")


def gpu():
    skip_below(2)
    cuda = ["train.device=cuda", "parallel.backend=nccl", "train.dtype=fp32"]
    ref_out = os.path.join(work, "gpu_fsdp2")
    train(ref_out, "fsdp2", *cuda)
    ref = losses(ref_out)
    saved = os.path.join(ref_out, "checkpoints", f"step_{SAVE_AT:08d}")
    for layout in ("ddp2", "fsdp2"):
        out = os.path.join(work, f"gpu_{layout}")
        _, log = train(out, layout, *cuda, f"checkpoint.resume={saved}")
        expect(f"resumed from {saved} at step {SAVE_AT}" in log, f"gpu {layout}: no resume line")
        got = losses(out)
        diff = max(abs(got[s] - ref[s]) for s in got)
        expect(diff <= GPU_ATOL, f"gpu {layout}: losses {got} vs {ref}: max diff {diff:.3g} > {GPU_ATOL}")
        print(f"gpu: fsdp2 → {layout} over NCCL: steps {SAVE_AT + 1}-{STEPS} max |loss diff| {diff:.2e}: ok")


LORA_MODEL = ["model.family=llama", "model.n_kv_head=2", "model.tie_embeddings=false"]
LORA = ["model.lora_rank=4", "model.lora_alpha=8"]


def step_dir(out, step):
    return os.path.join(out, "checkpoints", f"step_{step:08d}")


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def model_bytes(d):
    """The bytes of the model.* tensors a checkpoint's meta.json records."""
    with open(os.path.join(d, "meta.json")) as f:
        tensors = json.load(f)["tensors"]
    return sum(sh["byte_range"][1] - sh["byte_range"][0] for n, t in tensors.items() if n.startswith("model.") for sh in t["shards"])


def one_line_error(cmd, needle):
    """Runs a meshtrain command expected to fail as a user's mistake: exit 2, one stderr line holding `needle`."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    lines = [line for line in p.stderr.splitlines() if needle in line]
    expect(p.returncode == 2 and len(lines) == 1, f"{' '.join(cmd)}: exit {p.returncode}, {needle!r} in\n{p.stderr[-3000:]}")
    print(f"exit 2: {lines[0]}")
    return lines[0]


def lora():
    base_out = os.path.join(work, "base")
    train(base_out, "single", *LORA_MODEL)  # a plain Llama: its step 3 is the base the adapters adapt, step 6 another
    base, other = step_dir(base_out, SAVE_AT), step_dir(base_out, STEPS)
    sets = [*LORA_MODEL, *LORA, f"checkpoint.init_from={base}"]
    refs = {layout: exact(layout, *sets, tag=layout) for layout in ("ddp2", "fsdp2")}

    # The checkpoint holds the adapters and their optimizer state, nothing of the base; meta.json names the base.
    saved = step_dir(refs["ddp2"], SAVE_AT)
    with open(os.path.join(saved, "meta.json")) as f:
        meta = json.load(f)
    models = [n for n in meta["tensors"] if n.startswith("model.")]
    expect(models and all(n.endswith((".lora_A", ".lora_B")) for n in models), f"model tensors saved: {models}")
    rec = meta["state"]["lora"]
    expect(rec["adapters_only"] and rec["base"] == base and rec["id"].startswith("crc32c:"), f"lora record {rec}")
    ours, with_base = dir_bytes(saved), dir_bytes(saved) + model_bytes(base)
    expect(ours * 3 < with_base, f"checkpoint {ours} bytes, not far below {with_base} with the base")
    meta_json = os.path.getsize(os.path.join(saved, "meta.json"))
    print(f"lora checkpoint size: {ours} bytes (rank files: adapters, their optimizer state, RNG states; meta.json "
          f"{meta_json}) against {with_base} with the base's weights (as before): {with_base / ours:.1f}x smaller")

    # Resharding: DDP 2's checkpoint resumed under FSDP 2 (an explicit resume path: init_from is the base).
    out = os.path.join(work, "lora_reshard")
    train(out, "fsdp2", *sets, f"checkpoint.resume={saved}")
    ref, got = losses(refs["ddp2"]), losses(out)
    diff = max_diff(got, ref, range(SAVE_AT + 1, STEPS + 1))
    expect(diff <= RESHARD_ATOL, f"lora ddp2 → fsdp2: losses {got} vs {ref}: max diff {diff:.3g}")
    print(f"lora reshard ddp2 → fsdp2: steps {SAVE_AT + 1}-{STEPS} max |loss diff| {diff:.2e}: ok")

    # Exports: the merged model needs the base (the recorded path, or --base), the PEFT adapters do not.
    merged, via_flag, peft = (os.path.join(work, n) for n in ("merged", "merged_base_flag", "peft"))
    subprocess.run([meshtrain, "export", saved, "--format", "hf", merged], check=True, stdout=subprocess.DEVNULL)
    moved = base + ".moved"
    os.rename(base, moved)
    cfg_sets = [f"--set={s}" for s in (f"data.train={prefix}_train.bin", "data.val=", "model.n_layer=2",
                                        "model.d_model=64", "data.seq_len=64", "train.sample_tokens=0", *LORA_MODEL,
                                        *LORA, f"train.out_dir={out}_err", f"checkpoint.resume={saved}")]
    line = one_line_error([meshtrain, "export", saved, "--format", "hf", via_flag], "is neither a checkpoint")
    expect("--base DIR" in line, f"the missing base's line names --base: {line}")
    line = one_line_error([meshtrain, "train", config, *cfg_sets, f"--set=checkpoint.init_from={base}"],
                          "is neither a checkpoint")
    expect("checkpoint.init_from" in line, f"the missing base's line names checkpoint.init_from: {line}")
    one_line_error([meshtrain, "train", config, *cfg_sets], "checkpoint.init_from is not set")
    one_line_error([meshtrain, "export", saved, "--format", "hf", "--base", other, via_flag],
                   "belong to the base")
    subprocess.run([meshtrain, "export", saved, "--format", "hf", "--base", moved, via_flag], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([meshtrain, "export", saved, "--format", "hf", "--adapters", peft], check=True,
                   stdout=subprocess.DEVNULL)
    for name in os.listdir(merged):
        with open(os.path.join(merged, name), "rb") as a, open(os.path.join(via_flag, name), "rb") as b:
            expect(a.read() == b.read(), f"merged export {name}: the recorded base and --base differ")
    expect(sorted(os.listdir(peft)) == ["adapter_config.json", "adapter_model.safetensors"], os.listdir(peft))
    print("lora export: merged from the recorded base = merged with --base; PEFT without the base; a missing or "
          "other base is one line, exit 2: ok")


if mode == "exact":
    exact(sys.argv[4])
elif mode == "lora":
    lora()
elif mode == "reshard":
    reshard()
elif mode == "init_from":
    init_from()
elif mode == "offload":
    offload()
elif mode == "offload_delay":
    offload_delay()
elif mode == "offload_delay_gpu":
    offload_delay_gpu()
elif mode == "offload_gpu":
    offload_gpu()
elif mode == "gpu":
    gpu()
elif mode == "gpu_single":
    gpu_single()
elif mode == "gpu_shared":
    gpu_shared()
else:
    sys.exit(f"unknown mode {mode}")
shutil.rmtree(work)
