# Test worker for meshrun's multi-process tests: one behaviour per mode, chosen by argv[1]. Writes what it
# saw into OUT (argv[2]) so the driver (launch_test.py) can assert on it. Only `store` imports torch.
import json
import os
import signal
import sys
import time

mode, out = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "CUDA_VISIBLE_DEVICES", "MESHRUN_RDZV_TOKEN"]


def record(name, payload):
    with open(os.path.join(out, f"{name}.{rank}.{attempt}"), "w") as f:
        f.write(payload if isinstance(payload, str) else json.dumps(payload))


record("env", {k: os.environ.get(k) for k in KEYS} | {"pid": os.getpid(), "pgid": os.getpgrp(),
                                                     "cpus": sorted(os.sched_getaffinity(0))})

if mode == "env":
    pass
elif mode == "store":
    # Every worker reaches the launcher's store, publishes itself and waits for all the others.
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          int(os.environ["WORLD_SIZE"]), is_master=False, timeout=timedelta(seconds=60))
    store.set(f"worker/{rank}", str(os.getpid()))
    ws = int(os.environ["WORLD_SIZE"])
    store.wait([f"worker/{r}" for r in range(ws)])
    record("store", {str(r): store.get(f"worker/{r}").decode() for r in range(ws)})
elif mode == "fail":  # fail RANK CODE UNTIL_ATTEMPT: rank RANK exits CODE in attempts < UNTIL_ATTEMPT
    fail_rank, code, until = int(args[0]), int(args[1]), int(args[2])
    print(f"worker {rank} attempt {attempt}", flush=True)
    record("printed", "")
    if rank == fail_rank and attempt < until:
        # Fail only once every worker of this attempt has printed: otherwise a fast failure stops a peer
        # before its line exists, and the driver's per-attempt assertions race with process start-up.
        ws = int(os.environ["WORLD_SIZE"])
        deadline = time.time() + 20
        while time.time() < deadline and not all(
                os.path.exists(os.path.join(out, f"printed.{r}.{attempt}")) for r in range(ws)):
            time.sleep(0.01)
        print(f"boom: rank {rank} failing with {code}", file=sys.stderr, flush=True)
        sys.exit(code)
    if rank != fail_rank and attempt < until:
        time.sleep(60)  # the launcher must stop us
elif mode == "usage":  # a configuration error as a PyTorch script meets it: argparse's usage error, exit 2
    import argparse

    argparse.ArgumentParser(prog="train.py").parse_args(args)
    time.sleep(60)  # not reached: the arguments given are always wrong
elif mode == "die":  # die RANK SIGNAL
    if rank == int(args[0]):
        os.kill(os.getpid(), int(args[1]))
    time.sleep(60)
elif mode == "errorfile":  # rank 0 writes a torchrun-style error file, then exits 3
    if rank == 0:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": "ValueError: loss is nan at step 7",
                                   "extraInfo": {"py_callstack": "Traceback: train.py line 42",
                                                 "timestamp": str(int(time.time()))}}}, f)
        sys.exit(3)
    time.sleep(60)
elif mode == "cascade":  # rank 1 fails (slow to exit), rank 0 dies of the broken pipe and exits first
    marker = os.path.join(out, f"broke.{attempt}")
    if rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # still cleaning up when the launcher stops the group
        print("rng_state.1: truncated (12 of 5008 bytes)", file=sys.stderr, flush=True)
        open(marker, "w").close()
        time.sleep(1.0)
        sys.exit(2)
    if rank == 0:
        while not os.path.exists(marker):
            time.sleep(0.01)
        print("BrokenPipeError: [Errno 32] Broken pipe", file=sys.stderr, flush=True)
        sys.exit(1)
elif mode == "hang":  # record signals received; `hang ignore` ignores SIGTERM
    def on(sig, _):
        record(f"sig{sig}", "")
        if sig != signal.SIGUSR1:
            sys.exit(0)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, on)
    if args and args[0] == "ignore":
        signal.signal(signal.SIGTERM, lambda *_: record("sig15", ""))
    record("ready", "")
    while True:
        time.sleep(0.05)
elif mode == "preempt":  # like the trainer on Slurm's warning: checkpoint (here: a record), exit 128+SIGUSR1
    def on_usr1(sig, _):
        record("sig10", "")
        sys.exit(128 + sig)
    signal.signal(signal.SIGUSR1, on_usr1)
    record("ready", "")
    while True:
        time.sleep(0.05)
elif mode == "forge":  # a worker tries to forge the launchers' failure record of round 0 (it must be refused)
    from datetime import timedelta

    import torch.distributed as dist

    def try_forge(what, op):
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timedelta(seconds=30), wait_for_workers=False)
        try:
            op(store)
            store.get(f"probe/{rank}")  # the refused request closed the connection: this one fails
            return f"{what}: accepted"
        except Exception:  # noqa: BLE001 -- any failure means the store refused
            return f"{what}: refused"

    if rank == 1:
        dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      wait_for_workers=False).set("probe/1", "x")
        record("forge", [try_forge("fail", lambda s: s.add("meshrun/fail/0", 1)),
                         try_forge("cause", lambda s: s.set("meshrun/cause/0", "0\t1\tforged by a worker"))])
else:
    sys.exit(f"unknown mode {mode}")
