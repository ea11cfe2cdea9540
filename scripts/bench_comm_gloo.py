#!/usr/bin/env python3
"""Compare meshtrain's CPU communicator with torch.distributed's Gloo on this machine (docs/architecture.md "CPU collectives").

Runs the same ops and sizes on both, one process per rank, one after the other (never at the same time), and
prints a side-by-side table of busbw (nccl-tests' bus factors) with the ratio meshtrain / Gloo, plus JSON.

  .venv/bin/python scripts/bench_comm_gloo.py --nproc 2 --build build-comm --json bench_comm.json

The C++ side is `meshtrain bench comm` started by `meshrun --standalone`; the Gloo
side is this script re-launched per rank with the torchrun env contract (rank 0 hosts the store).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

OPS = ["all_reduce", "all_gather", "reduce_scatter"]


def bus_factor(op, n):
    return {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0}[op]


def sizes(min_bytes, max_bytes):
    b = min_bytes
    while b <= max_bytes:
        yield b
        b *= 2


def gloo_worker(args):
    """One rank of the Gloo benchmark (same method as bench.cpp: calibrate, agree on a count, time, max)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for op in args.ops.split(","):
        for nbytes in sizes(args.min_bytes, args.max_bytes):
            per_rank = nbytes // 4 // n
            if per_rank == 0:
                continue
            full = torch.ones(per_rank * n, dtype=torch.float32)
            part = torch.ones(per_rank, dtype=torch.float32)

            def issue():
                if op == "all_reduce":
                    dist.all_reduce(full)
                elif op == "all_gather":
                    dist.all_gather_into_tensor(full, part)
                elif op == "reduce_scatter":
                    dist.reduce_scatter_tensor(part, full)
                else:
                    dist.broadcast(full, 0)

            for _ in range(2):
                issue()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(3):
                issue()
            per_op = (time.perf_counter() - t0) / 3
            it = torch.tensor([max(3, int(args.min_seconds / max(per_op, 1e-9)))], dtype=torch.int64)
            dist.broadcast(it, 0)
            target = min(int(it.item()), 100000)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(target):
                issue()
            secs = torch.tensor([(time.perf_counter() - t0) / target], dtype=torch.float64)
            dist.all_reduce(secs, op=dist.ReduceOp.MAX)
            secs = float(secs.item())
            b = per_rank * n * 4
            algbw = b / secs / 1e9
            rows.append({"op": op, "bytes": b, "iters": target, "time_us": secs * 1e6, "algbw_gbs": algbw,
                         "busbw_gbs": algbw * bus_factor(op, n)})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"backend": "gloo", "world_size": n, "torch": torch.__version__, "results": rows}, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gloo(args, out):
    port = free_port()
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        cmd = [sys.executable, __file__, "--gloo-worker", "--out", out, "--ops", args.ops, "--min-bytes",
               str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--min-seconds", str(args.min_seconds)]
        procs.append(subprocess.Popen(cmd, env=env))
    rcs = [p.wait() for p in procs]
    if any(rcs):
        sys.exit(f"gloo benchmark failed: exit codes {rcs}")
    with open(out) as f:
        return json.load(f)


def run_meshtrain(args, out):
    bin_dir = os.path.join(args.build, "bin")
    cmd = [os.path.join(bin_dir, "meshrun"), "--standalone", "--nproc-per-node", str(args.nproc), "--no-python",
           os.path.join(bin_dir, "meshtrain"), "bench", "comm", "--ops", args.ops, "--min-bytes", str(args.min_bytes),
           "--max-bytes", str(args.max_bytes), "--min-seconds", str(args.min_seconds), "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--build", default="build", help="build folder holding bin/meshrun and bin/meshtrain")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--min-bytes", type=int, default=1 << 10)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--min-seconds", type=float, default=0.3)
    ap.add_argument("--json", help="write both result sets and the ratios here")
    ap.add_argument("--gloo-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gloo_worker:
        return gloo_worker(args)

    with tempfile.TemporaryDirectory() as tmp:
        ours = run_meshtrain(args, os.path.join(tmp, "meshtrain.json"))
        gloo = run_gloo(args, os.path.join(tmp, "gloo.json"))
    g = {(r["op"], r["bytes"]): r for r in gloo["results"]}
    rows = []
    print(f"{'op':<16}{'bytes':>12}{'meshtrain us':>14}{'gloo us':>12}{'meshtrain busbw':>17}{'gloo busbw':>12}"
          f"{'ratio':>8}")
    for r in ours["results"]:
        o = g.get((r["op"], r["bytes"]))
        if o is None:
            continue
        ratio = r["busbw_gbs"] / o["busbw_gbs"] if o["busbw_gbs"] > 0 else float("nan")
        rows.append({"op": r["op"], "bytes": r["bytes"], "meshtrain_time_us": r["time_us"], "gloo_time_us": o["time_us"],
                     "meshtrain_busbw_gbs": r["busbw_gbs"], "gloo_busbw_gbs": o["busbw_gbs"], "ratio": ratio})
        print(f"{r['op']:<16}{r['bytes']:>12}{r['time_us']:>14.1f}{o['time_us']:>12.1f}{r['busbw_gbs']:>17.3f}"
              f"{o['busbw_gbs']:>12.3f}{ratio:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": args.nproc, "host": socket.gethostname(), "cpus": os.cpu_count(), "rows": rows,
                       "meshtrain": ours, "gloo": gloo}, f, indent=1)


if __name__ == "__main__":
    main()
