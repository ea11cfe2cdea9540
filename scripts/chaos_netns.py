#!/usr/bin/env python3
"""A seeded, randomised fault campaign against a two-node training job, each node in its own network namespace
(the harness of tests/multiproc/launch/netns_cluster.py and netns_job.py; docs/resilience.md). Needs root and
iproute2 (`ip netns`); CI runs only the short fault tests (`ctest -R '^multiproc\\.launch\\.netns_'`).

Each round starts the job afresh (16 steps, a checkpoint every 2, `--max-restarts 3`), waits for a random step,
and injects one random fault after a random delay:
  worker     SIGKILL of a random worker
  node       SIGKILL of every process of node 1, whose meshrun is then started again (the node replaced)
  partition  node 1's switch port down for a random 0.5 .. parallel.timeout_s + 4 s, then up
  freeze     SIGSTOP of every process of node 1 for a random 0.5 .. parallel.timeout_s + 4 s, then SIGCONT
  store      SIGKILL of every process of node 0 (the rendezvous store's host), whose meshrun is then started again:
             node 1 rejoins the new store and the job starts again from the newest checkpoint
A killed worker is started again alone and the other ranks regroup with it in their processes (meshrun's
--in-place-restart auto); --in-place-restart off makes every recovery a restart of the whole job.
With --memory-every N the rounds take in-memory checkpoints every N steps (checkpoint.memory_every; a node's memory
is lost with the node) and a restart resumes from them where every rank reaches one.
A round passes when the job ends bit-identical to an uninterrupted run (the per-rank checksums); never exit 0 with
other parameters, never past the time limit,
and nothing left running. Every round prints its fault, the recovery time (fault to the first step completed
after it) and the steps lost; the end prints the medians per fault. A failure prints the seed and round.

    sudo scripts/chaos_netns.py BUILD_DIR/bin [--seed N] [--rounds K] [--faults worker,node,...]
        [--memory-every N] [--keep]
"""
import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "multiproc", "launch"))
from netns_cluster import NetnsCluster, NetnsUnavailable  # noqa: E402
from netns_job import Job, STEPS  # noqa: E402

FAULTS = ["worker", "node", "partition", "freeze", "store"]
TIMEOUT_S, LIMIT = 6.0, 240


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("bin_dir", help="the folder holding meshrun and meshtrain (BUILD_DIR/bin)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"which to draw from (default: {','.join(FAULTS)})")
    p.add_argument("--memory-every", type=int, default=0,
                   help="checkpoint.memory_every of the rounds (default 0: restarts resume from disk)")
    p.add_argument("--in-place-restart", default="auto", choices=("auto", "off"),
                   help="meshrun's --in-place-restart (default auto)")
    p.add_argument("--keep", action="store_true", help="keep every round's logs (default: only a failed one's)")
    a = p.parse_args()
    a.faults = a.faults.split(",")
    bad = [f for f in a.faults if f not in FAULTS]
    if bad or a.rounds < 1:
        p.error(f"--faults {','.join(bad)}: valid are {','.join(FAULTS)}" if bad else "--rounds must be >= 1")
    return a


class Campaign:
    def __init__(self, args, cluster, work):
        self.args, self.cluster, self.work = args, cluster, work
        self.rng = random.Random(args.seed)
        self.figures = {}  # fault -> [(seconds, steps lost)]

    def fail(self, job, what):
        print(job.text()[-8000:])
        print(f"FAIL (seed {self.args.seed}, round {job.name}): {what}; logs in {job.dir}\n"
              f"replay: scripts/chaos_netns.py {self.args.bin_dir} --seed {self.args.seed} --rounds {self.args.rounds}")
        sys.exit(1)

    def run_round(self, i, want):
        fault = self.rng.choice(self.args.faults)
        step, delay = self.rng.randrange(3, STEPS - 3), self.rng.uniform(0, 0.3)
        hold = self.rng.uniform(0.5, TIMEOUT_S + 4)
        rank = self.rng.randrange(4)
        job = Job(self.cluster, self.args.bin_dir, self.work, f"round{i}", restarts=3, timeout_s=TIMEOUT_S,
                  sets=(f"checkpoint.memory_every={self.args.memory_every}",),
                  flags=("--in-place-restart", self.args.in_place_restart)).start()
        t0 = time.monotonic()
        while job.last_step() < step:
            if time.monotonic() - t0 > LIMIT:
                self.fail(job, f"the run never reached step {step}")
            time.sleep(0.02)
        time.sleep(delay)
        what, fault_at = self.inject(job, fault, rank, hold)
        rcs = job.wait(LIMIT)
        if None in rcs:
            self.fail(job, f"{what}: a launcher still runs after {LIMIT} s")
        if rcs != [0, 0] or job.checksums() != want:
            self.fail(job, f"{what}: exit codes {rcs}, parameters {job.checksums()} (want {want})")
        lost, seconds, _ = job.recovery(fault_at)
        self.figures.setdefault(fault, []).append((seconds, lost))
        text = job.text()
        how = ("restart" if "restarting the worker group" in text else "a new store" if "hosts a new store" in text
               else "in place" if "ranks regrouped" in text else "no restart")
        outcome = f"bit-identical ({how}); recovery {seconds:.2f} s, steps lost {lost}"
        time.sleep(0.5)
        # A SIGKILLed launcher's scratch and memory directories: swept by the next meshrun on that node.
        left = [l for l in job.leftovers() if fault not in ("node", "store") or ("TMPDIR" not in l and "memory" not in l)]
        if fault == "store":
            left = [l for l in left if not l.startswith("unfinished checkpoint")]
        if left:
            self.fail(job, f"{what}: left behind: {'; '.join(left)}")
        print(f"round {i}: {what} at step {step}: {outcome}", flush=True)
        if not self.args.keep:
            job.remove()

    def inject(self, job, fault, rank, hold):
        nodes = self.cluster.nodes
        t = time.monotonic()
        if fault == "worker":
            node = nodes[rank // 2]
            pid = node.worker_pid(rank)
            node.kill([pid] if pid else [])
            return f"SIGKILL of rank {rank}", t
        if fault == "node":
            job.kill_and_replace(1, memory_lost=True)  # a new machine: the lost node's memory is gone with it
            return "SIGKILL of node 1, replaced", t
        if fault == "store":
            job.kill_and_replace(0, memory_lost=True)
            return "SIGKILL of node 0 (the store's host), replaced", t
        if fault == "partition":
            nodes[1].link(False)
            time.sleep(hold)
            nodes[1].link(True)
            return f"node 1 partitioned for {hold:.1f} s", t
        nodes[1].freeze()
        time.sleep(hold)
        nodes[1].thaw()
        return f"node 1 frozen for {hold:.1f} s", t

    def summary(self):
        for fault, figs in sorted(self.figures.items()):
            secs = [s for s, _ in figs if s is not None]
            lost = [n for _, n in figs if n is not None]
            print(f"{fault:10s} {len(figs):3d} round(s): recovery median {statistics.median(secs):.2f} s "
                  f"(max {max(secs):.2f}), steps lost median {statistics.median(lost)} (max {max(lost)})")


def main():
    args = parse()
    work = tempfile.mkdtemp(prefix="meshtrain_chaos_netns_")
    try:
        with NetnsCluster(2) as cluster:
            ref = Job(cluster, args.bin_dir, work, "reference", timeout_s=TIMEOUT_S).start()
            if ref.wait(LIMIT) != [0, 0]:
                print(ref.text()[-8000:])
                sys.exit("the uninterrupted reference run failed")
            want = ref.checksums()
            print(f"seed {args.seed}, {args.rounds} round(s), faults {','.join(args.faults)}, checkpoint.memory_every "
                  f"{args.memory_every}; reference {want[0][1]}")
            c = Campaign(args, cluster, work)
            t0 = time.time()
            for i in range(args.rounds):
                c.run_round(i, want)
            c.summary()
            print(f"chaos campaign (seed {args.seed}): {args.rounds} round(s) ok in {time.time() - t0:.0f} s")
    except NetnsUnavailable as e:
        sys.exit(f"chaos_netns: {e}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


main()
