#!/usr/bin/env python3
"""Faults of a two-node job, each node in its own network namespace (netns_cluster.py), one meshrun per node as
on a cluster, against today's meshrun (a worker killed by a signal is started again alone and the others regroup
with it in their processes; other failures restart the whole job from the newest checkpoint). Each case
makes a reference run first (same job, no fault) and then one run with the fault, and asserts what meshrun must
do: finish with every rank's parameters bit-identical to the reference's (the checksums the trainer logs at the
end), or, where recovery is impossible today, exit non-zero with a line naming the cause; never exit 0 after a
failure, never hang (every wait bounded), and leave no process, /dev/shm entry or temporary directory behind
(beyond what a SIGKILLed launcher cannot remove: its scratch directory, swept by the next meshrun on that node).
Each case prints the recovery time (fault to the first step completed after it) and the steps lost.

  worker_kill     SIGKILL of one worker (rank 3, node 1): node 1's launcher starts it again alone, the other
                  three ranks regroup with it in place (no restart of the job)
  worker_kill_group  the same under --in-place-restart off: the whole job restarts
  node_kill       SIGKILL of every process of node 1; its meshrun started again (the node replaced): it rejoins the
                  running round and its workers regroup with node 0's, which kept their processes
  node_lost       SIGKILL of every process of node 1, never replaced
  partition       node 1's switch port down for 2 s (< parallel.timeout_s) and up again
  long_partition  node 1's switch port down for parallel.timeout_s + 3 s, then up: every rank's collective times
                  out and the ranks regroup in place, or (when node 1's ranks reach the store after node 0's
                  waited parallel.timeout_s at the regroup: TCP's retransmission backoff decides) the job restarts
  freeze          SIGSTOP of every process of node 1 until node 0's workers name its ranks; then SIGCONT (regroup in
                  place or restart, as long_partition)
  store_lost      SIGKILL of every process of node 0, which hosts the rendezvous store, never replaced: node 1 waits
                  --rdzv-timeout for a new store, then exits non-zero naming the lost one
  store_replaced  the same with in-memory checkpoints, node 0 started again: node 1 rejoins the new store, the job
                  starts again from round 0 and node 0's ranks resume from the replicas on node 1
  disk_full       the checkpoint directory a 900 KiB tmpfs: a save runs out of space
  memory_worker_kill  worker_kill with in-memory checkpoints every step (checkpoint.memory_every 1, a disk
                  checkpoint every 8): the regroup resumes from memory, at most 1 step lost beyond the step in flight
  memory_node_kill    node_kill with in-memory checkpoints: node 1's memory is lost with it, its ranks resume from the
                  replicas node 0 holds (in place, as node_kill)
  elastic_shrink  three nodes under --nnodes 2:3; every process of node 2 killed, never replaced: nodes 0 and 1 go on
                  as a two-node job from the last disk checkpoint (accumulation raised to keep the global batch),
                  and end with the parameters of a two-node run resumed from that same checkpoint
  elastic_join    --nnodes 2:3 started on two nodes (the third is late: round 0 runs without it); the third node's
                  meshrun started mid-run: the job restarts to admit it and ends with the parameters of a three-node
                  run resumed from the same checkpoint

Exit 77 (skipped) where network namespaces cannot be made (no root, no `ip`).
Usage: netns_faults_test.py BIN_DIR CASE
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_cluster import NetnsCluster, NetnsUnavailable  # noqa: E402
from netns_job import Job, STEPS  # noqa: E402

BIN, CASE = sys.argv[1], sys.argv[2]
TIMEOUT_S = 6.0     # parallel.timeout_s: how long a collective waits for a silent peer
RDZV_TIMEOUT = 20.0  # --rdzv-timeout: how long a launcher waits for the other nodes at a round's start and end
FAULT_STEP = 5      # faults land once a rank has logged this step (the step-4 checkpoint is being written or done)
RUN_LIMIT = 150     # seconds any run may take, fault included


def check(cond, what, job=None):
    if not cond:
        if job is not None:
            print(job.text()[-12000:])
        print(f"FAIL ({CASE}): {what}")
        sys.exit(1)
    print(f"ok   {what}", flush=True)


def wait_until(pred, what, job, limit=RUN_LIMIT):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > limit:
            check(False, f"{what} within {limit} s", job)
        time.sleep(0.02)
    return time.monotonic()


def reference(cluster, work):
    """The uninterrupted run's per-rank checksums."""
    job = Job(cluster, BIN, work, "reference").start()
    rcs = job.wait(RUN_LIMIT)
    want = job.checksums()
    check(rcs == [0, 0] and len(want) == 4 and len({c for _, c, _ in want}) == 1 and want[0][2] == STEPS,
          f"the reference run finishes on both nodes, every rank with the same parameters ({want})", job)
    return want


def at_fault_step(job):
    """Waits until the run reaches FAULT_STEP; returns the time (the fault lands right after)."""
    return wait_until(lambda: job.last_step() >= FAULT_STEP, f"the run reaching step {FAULT_STEP}", job)


GROUP = "restarting the worker group on every node"
IN_PLACE = re.compile(r"in-place restart \d+: all 4 ranks regrouped")


def recovered_how(text):
    """'group' (the job restarted), 'in place' (the ranks regrouped in their processes) or 'none'."""
    return "group" if GROUP in text else "in place" if IN_PLACE.search(text) else "none"


def expect_recovered(job, want, fault_at, how=("group",)):
    """Both nodes exit 0 with the reference's parameters, recovered in one of the ways `how` names; prints the
    recovery figures; nothing left behind."""
    rcs = job.wait(RUN_LIMIT)
    check(rcs == [0, 0], f"both launchers exit 0 after the fault (exit codes {rcs})", job)
    got = job.checksums()
    check(got == want, f"parameters bit-identical to the uninterrupted run ({got[0][1] if got else None})", job)
    text = job.text()
    check(recovered_how(text) in how, f"recovered: {recovered_how(text)} (expected {' or '.join(how)})", job)
    lost, seconds, resumed = job.recovery(fault_at)
    check(seconds is not None, "a step completed after the fault", job)
    print(f"recovery: {seconds:.2f} s from the fault to the first step completed after it; steps lost {lost}"
          + (f" (resumed from the step-{resumed} checkpoint)" if resumed is not None else " (no restart)"))
    expect_clean(job)


def expect_clean(job, killed_nodes=()):
    """No process, /dev/shm entry, temporary file or unfinished checkpoint left; a SIGKILLed launcher's scratch
    directory (in its node's TMPDIR) and the save it interrupted are what nobody could remove, and are named."""
    time.sleep(0.5)  # a launcher's exit is seen before its last children are reaped by the kernel
    left = job.leftovers()
    allowed = [l for l in left if any(f"node {n}'s TMPDIR" in l or f"node {n}'s memory" in l for n in killed_nodes) or
               (killed_nodes and l.startswith("unfinished checkpoint directory"))]
    for l in allowed:
        print(f"left by a SIGKILLed launcher (swept by the next meshrun on that node): {l}")
    rest = [l for l in left if l not in allowed]
    check(not rest, "nothing left behind: " + ("; ".join(rest) if rest else "no process, /dev/shm entry, "
                                               "temporary directory or unfinished checkpoint"), job)


def worker_killed(cluster, work, want, name, sets=(), flags=(), how="in place"):
    """SIGKILL of rank 3 (node 1) at FAULT_STEP; the job recovers. Returns the job and the fault's time."""
    job = Job(cluster, BIN, work, name, sets=sets, flags=flags).start()
    at_fault_step(job)
    pid = cluster.nodes[1].worker_pid(3)
    check(pid is not None, "rank 3 found among node 1's processes", job)
    survivors = {r: cluster.nodes[r // 2].worker_pid(r) for r in range(3)}
    t = time.monotonic()
    cluster.nodes[1].kill([pid])
    if how == "in place":
        # Checked as soon as they regrouped: the run then has about ten paced steps to go.
        wait_until(lambda: IN_PLACE.search(job.text()), "the ranks regrouping in place", job, limit=60)
        now = {r: cluster.nodes[r // 2].worker_pid(r) for r in range(3)}
        check(now == survivors, f"ranks 0-2 kept their processes (pids {survivors}, after the regroup {now})", job)
        check(f"meshrun: rank 3 (pid {pid}) was signal SIGKILL" in cluster.nodes[1].text() and
              "starting it again alone" in cluster.nodes[1].text(), "node 1's launcher started rank 3 again alone", job)
    expect_recovered(job, want, t, how=(how,))
    if how == "in place":
        check("starting it again alone" not in cluster.nodes[0].text(), "node 0's launcher started nothing", job)
    return job, t


def case_worker_kill(cluster, work, want):
    worker_killed(cluster, work, want, "worker_kill")


def case_worker_kill_group(cluster, work, want):
    worker_killed(cluster, work, want, "worker_kill_group", flags=("--in-place-restart", "off"), how="group")


# A replaced node's workers regroup with the survivors, who wait for them up to parallel.timeout_s: 30 s here, so
# that a slow start of the replacement on a loaded machine cannot turn the regroup into a restart (its peers' sockets
# close with the node, so nothing waits on the timeout to notice the loss).
REPLACED_NODE_TIMEOUT_S = 30.0


def expect_node_replaced_in_place(cluster, job):
    check("starting this node's workers in place of the lost ones" in cluster.nodes[1].text(),
          "node 1's new launcher started its workers in place of the lost ones", job)


def case_node_kill(cluster, work, want):
    job = Job(cluster, BIN, work, "node_kill", timeout_s=REPLACED_NODE_TIMEOUT_S).start()
    at_fault_step(job)
    t = time.monotonic()
    killed = job.kill_and_replace(1, memory_lost=False)
    check(len(killed) == 4, f"every process of node 1 killed: meshrun, meshrun-store, 2 workers ({killed})", job)
    expect_recovered(job, want, t, how=("in place",))
    expect_node_replaced_in_place(cluster, job)
    check("removed 1 scratch directory" in cluster.nodes[1].text(),
          "the replacement's meshrun swept the killed launcher's scratch directory", job)


def node_gone_for_good(cluster, work, name, killed):
    """Kills every process of node `killed` mid-run, never replaced; the other node's launcher must exit non-zero.
    Returns the job and the survivor's output."""
    survivor = 1 - killed
    job = Job(cluster, BIN, work, name).start()
    at_fault_step(job)
    cluster.nodes[killed].kill()
    rcs = job.wait(RUN_LIMIT)
    check(rcs[survivor] not in (0, None), f"node {survivor}'s launcher exits non-zero (exit code {rcs[survivor]})", job)
    return job, cluster.nodes[survivor].text()


def case_node_lost(cluster, work, want):
    job, text = node_gone_for_good(cluster, work, "node_lost", killed=1)
    check(re.search(r"node 1 did not finish round 0 within 20 s", text),
          "node 0 names node 1 as the node that did not come back", job)
    check("launchers left cleanly" not in text, "node 0 does not wait for a node it knows is gone before exiting",
          job)
    expect_clean(job, killed_nodes=(1,))


def partition(cluster, work, want, name, seconds, how):
    job = Job(cluster, BIN, work, name, sets=()).start()
    at_fault_step(job)
    t = time.monotonic()
    cluster.nodes[1].link(False)
    time.sleep(seconds)
    cluster.nodes[1].link(True)
    print(f"node 1's switch port was down for {seconds:.0f} s (parallel.timeout_s {TIMEOUT_S:.0f})")
    expect_recovered(job, want, t, how=how)
    return job


def case_partition(cluster, work, want):
    partition(cluster, work, want, "partition", 2.0, how=("none",))


def case_long_partition(cluster, work, want):
    job = partition(cluster, work, want, "long_partition", TIMEOUT_S + 3, how=("in place", "group"))
    check(re.search(r"timed out after 6000 ms waiting for rank\(s\)", job.text()),
          "a collective's timeout names the ranks it waited for", job)


def case_freeze(cluster, work, want):
    job = Job(cluster, BIN, work, "freeze").start()
    at_fault_step(job)
    t = time.monotonic()
    cluster.nodes[1].freeze()
    timeout_line = re.compile(r"timed out after 6000 ms waiting for rank\(s\) [23]\b")
    wait_until(lambda: timeout_line.search(cluster.nodes[0].text()), "node 0's workers naming a rank of node 1",
               job, limit=TIMEOUT_S + 30)
    print(f"node 1 frozen for {time.monotonic() - t:.1f} s, until node 0 named its ranks")
    cluster.nodes[1].thaw()
    expect_recovered(job, want, t, how=("in place", "group"))


def case_store_lost(cluster, work, want):
    job, text = node_gone_for_good(cluster, work, "store_lost", killed=0)
    check(f"meshrun: lost the rendezvous store at {cluster.nodes[0].addr}:{job.port}" in text,
          "node 1 names the lost store and its address", job)
    check("for node 0 to host the store again" in text, "node 1 waited --rdzv-timeout for a new store", job)
    expect_clean(job, killed_nodes=(0,))


def case_store_replaced(cluster, work, want):
    """Node 0 (the store's host) SIGKILLed with its memory and started again, the same command: node 1 waits for
    the new store, tells it from the lost one by its epoch, and both nodes start again from round 0; node 0's
    ranks resume from the replicas node 1 holds."""
    job = Job(cluster, BIN, work, "store_replaced", sets=MEMORY).start()
    at_fault_step(job)
    t = time.monotonic()
    job.kill_and_replace(0, memory_lost=True)
    expect_recovered(job, want, t, how=("none",))  # a new store: its rounds start again at 0, no "restart" line
    check("hosts a new store" in cluster.nodes[1].text(), "node 1 rejoined the new store node 0 hosts", job)
    expect_resumed_from_memory(job, t, replicas=2)


def case_disk_full(cluster, work, want):
    job = Job(cluster, BIN, work, "disk_full")
    job.restarts = 1
    os.makedirs(job.ckpt)
    # Two checkpoints of the tiny model fit (about 0.4 MB each); the third save runs out of space.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=900k", "netns-test-ckpt", job.ckpt], check=True)
    try:
        job.start()
        rcs = job.wait(RUN_LIMIT)
        check(all(rc not in (0, None) for rc in rcs), f"both launchers exit non-zero (exit codes {rcs})", job)
        check("No space left on device" in job.text(), "the out-of-space error reaches the log", job)
        with open(os.path.join(job.ckpt, "latest")) as f:
            latest = f.read().strip()
        check(os.path.isfile(os.path.join(job.ckpt, latest, "meta.json")),
              f"`latest` names a complete checkpoint ({latest})", job)
        cause = [l for l in job.text().splitlines() if "job FAILED" in l]
        print(f"root cause line: {cause[-1] if cause else None}")
        time.sleep(0.5)
        left = [l for l in job.leftovers() if not l.startswith("unfinished checkpoint directory")]
        check(not left, "no process, /dev/shm entry or temporary directory left: " + "; ".join(left), job)
    finally:
        subprocess.run(["umount", job.ckpt])


MEMORY = ("checkpoint.memory_every=1", "checkpoint.every=8")
RESUMED_FROM_MEMORY = re.compile(r"resumed from \S+ at step (\d+) \(in-memory checkpoint; (\d+) rank\(s\) from their "
                                 r"peer's replica")


def expect_resumed_from_memory(job, fault_at, replicas):
    """The restart resumed from memory, with `replicas` ranks from their peer's copy, losing at most 2 steps: the
    last logged step's snapshot may still be in its background write when the fault lands (the one before it is
    complete, since a snapshot waits for the previous one)."""
    m = RESUMED_FROM_MEMORY.search(job.text())
    check(m is not None, "the restart resumed from an in-memory checkpoint", job)
    check(int(m.group(2)) == replicas, f"{replicas} rank(s) took their peer's replica ({m.group(2)})", job)
    lost, seconds, resumed = job.recovery(fault_at)
    check(resumed is not None and lost <= 2,
          f"resumed at step {resumed}, newer than the last disk checkpoint; steps lost {lost} (≤ 2)", job)


def case_memory_worker_kill(cluster, work, want):
    job, t = worker_killed(cluster, work, want, "memory_worker_kill", sets=MEMORY)
    expect_resumed_from_memory(job, t, replicas=0)


def case_memory_node_kill(cluster, work, want):
    job = Job(cluster, BIN, work, "memory_node_kill", sets=MEMORY, timeout_s=REPLACED_NODE_TIMEOUT_S).start()
    at_fault_step(job)
    t = time.monotonic()
    job.kill_and_replace(1, memory_lost=True)
    expect_recovered(job, want, t, how=("in place",))
    expect_node_replaced_in_place(cluster, job)
    expect_resumed_from_memory(job, t, replicas=2)


# Elastic: 6 ranks of micro-batch 2 with accumulation 2 (a global batch of 24 sequences), 4 after the shrink
# (accumulation 3 keeps it); every checkpoint kept, so the one the shrunk job resumed from is there to compare with.
ELASTIC = ("train.grad_accum=2", "checkpoint.keep=0")
RESUMED_AT = re.compile(r"resumed from (\S+/step_(\d+)) at step")


def case_elastic_shrink(cluster, work, _want):
    job = Job(cluster, BIN, work, "elastic_shrink", sets=ELASTIC, nnodes="2:3", rdzv_timeout=6.0).start()
    at_fault_step(job)
    t = time.monotonic()
    cluster.nodes[2].kill()
    rcs = job.wait(RUN_LIMIT)
    check(rcs[:2] == [0, 0], f"nodes 0 and 1 exit 0 after node 2 is lost (exit codes {rcs})", job)
    text = job.text()
    check("the job goes on with the 2 node(s) left (--nnodes 2:3)" in text, "the lost node is left out", job)
    check(re.search(r"round 1 runs on 2 node\(s\) \(0, 1\), world size 4", text), "round 1 runs on 2 nodes", job)
    check("train.grad_accum 3" in text or "grad_accum 3" in text, "accumulation raised to 3 to keep the global batch", job)
    lost, seconds, _ = job.recovery(t)
    step = resumed_like_reference(cluster, job, ELASTIC, 2)
    print(f"recovery: {seconds:.2f} s from the node's loss to the first step of the two-node job; steps lost {lost} "
          f"(resumed from the step-{step} checkpoint)")
    expect_clean(job, killed_nodes=(2,))


def resumed_like_reference(cluster, job, sets, nodes):
    """The checkpoint the job's last round resumed from, resumed by a job started with `nodes` nodes: both must
    end with the same parameters."""
    m = RESUMED_AT.findall(job.text())
    check(m, "the job's last round resumed from a disk checkpoint", job)
    step_dir, step = m[-1][0], int(m[-1][1])
    got = job.checksums()
    check(len(got) == 2 * nodes and got[0][2] == STEPS, f"the {2 * nodes} ranks reach step {STEPS} ({got})", job)
    ref = Job(cluster, BIN, job.dir + "_ref", "reference", sets=(*sets, f"checkpoint.resume={step_dir}"),
              nodes=nodes).start()
    check(ref.wait(RUN_LIMIT) == [0] * nodes, f"the {nodes}-node reference run exits 0", ref)
    want = ref.checksums()
    check(got == want, f"parameters bit-identical to a {nodes}-node run resumed from step {step} ({want[0][1]})", job)
    return step


def case_elastic_join(cluster, work, _want):
    sets = ("train.grad_accum=3", "checkpoint.keep=0")  # 4 ranks × 2 × 3 = 24 sequences; 6 ranks: accumulation 2
    job = Job(cluster, BIN, work, "elastic_join", sets=sets, nnodes="2:3", rdzv_timeout=4.0, nodes=2).start()
    at_fault_step(job)
    job.start_node(2)
    job.nodes = 3
    rcs = job.wait(RUN_LIMIT)
    check(rcs == [0, 0, 0], f"the three launchers exit 0 (exit codes {rcs})", job)
    text = job.text()
    check("round 0 started without node 2" in text and "joined round 0 late: the job restarts to admit it" in text,
          "the late node asks for a restart", job)
    check(re.search(r"round 1 runs on 3 node\(s\) \(0, 1, 2\), world size 6", text), "round 1 runs on 3 nodes", job)
    step = resumed_like_reference(cluster, job, sets, 3)
    print(f"the third node was admitted at the restart; the job resumed from the step-{step} checkpoint")
    expect_clean(job)


def main():
    cases = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}
    if CASE not in cases:
        sys.exit(f"unknown case {CASE!r}; valid: {', '.join(cases)}")
    work = tempfile.mkdtemp(prefix=f"meshtrain_netns_{CASE}_")
    elastic = CASE.startswith("elastic")
    try:
        with NetnsCluster(3 if elastic else 2) as cluster:
            if cluster.swept:
                print(f"removed namespaces left by earlier runs: {' '.join(cluster.swept)}")
            want = None if elastic else reference(cluster, work)
            cases[CASE](cluster, work, want)
        check(not cluster.leftovers(), "every namespace of the test removed")
    except NetnsUnavailable as e:
        print(f"skipped: {e}")
        sys.exit(77)
    finally:
        subprocess.run(["rm", "-rf", work])
    print(f"ok: {CASE}")


main()
