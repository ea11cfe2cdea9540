"""A small training job of `meshtrain train` over the nodes of a NetnsCluster (netns_cluster.py): one meshrun per
node namespace, 2 CPU workers each, the quickstart's config made tiny (`--set`) on synthetic tokens, a
checkpoint every 2 steps,
`checkpoint.resume: auto`, every rank's progress line. What a fault test reads back from it: the step lines with
the time each arrived, the step a restart resumed from, the per-rank parameter checksums at the end, and what
was left behind (processes, /dev/shm entries, temporary directories, unfinished checkpoint directories).

Rank 0 sleeps STEP_MS at every step (MESHTRAIN_SLOW_RANK, a pacing knob that changes no number), so a run of
STEPS steps lasts a few seconds and a fault lands mid-run. Used by netns_faults_test.py and scripts/chaos_netns.py.
"""
import glob
import os
import re
import shutil
import socket
import time

STEPS, EVERY, STEP_MS, NPROC = 16, 2, 150, 2
TOKEN = "netns-test-token-0123456789abcdef"
STEP_LINE = re.compile(r"\[rank (\d+)\]: .*\bstep +(\d+)/(\d+) \|")
RESUMED = re.compile(r"resumed from \S+ at step (\d+)")
# The quickstart's config made tiny: a one-layer byte-level GPT-2 on synthetic tokens, every rank's progress line.
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "configs", "quickstart.yaml")
# In-memory checkpoints off: the cases test the restart from disk unless they set checkpoint.memory_every (a later
# --set wins).
TINY = ["model.n_layer=1", "model.n_head=2", "model.d_model=32", "model.max_seq_len=16", "data.train=synthetic",
        "data.val=", "train.micro_batch_size=2", "train.eval_every=0", "train.sample_tokens=0", "train.threads=1",
        "schedule.warmup_steps=2", "checkpoint.keep=3", "checkpoint.resume=auto", "checkpoint.memory_every=0",
        "logging.every=1", "logging.all_ranks=true"]
CHECKSUM = re.compile(r"\[rank (\d+)\].*parameter checksum ([0-9a-f]{8}) after step (\d+)")


def shm_entries():
    """The names in /dev/shm (a leak check compares them before and after), less meshrun's memory directories
    (meshrun-*): this job's launchers make theirs in their node's own directory (Job.memdir, checked apart), so
    those in /dev/shm belong to other meshrun jobs running beside the test."""
    try:
        return {e for e in os.listdir("/dev/shm") if not e.startswith("meshrun-")}
    except FileNotFoundError:
        return set()


class Job:
    """One run of the job on `cluster`, its files under `work`/`name`. `start()` launches every node's meshrun
    (node 0 last: the others wait for its store, as on a cluster where nodes start in any order)."""

    def __init__(self, cluster, bin_dir, work, name, restarts=2, timeout_s=6.0, rdzv_timeout=20.0, sets=(),
                 nnodes=None, nodes=None, flags=()):
        """`nnodes`: meshrun's --nnodes (default: every node of the cluster); `nodes`: how many of the cluster's
        nodes run it (the first ones); `flags`: more meshrun flags."""
        self.flags = list(flags)
        self.cluster, self.bin_dir, self.name = cluster, bin_dir, name
        self.nodes = nodes or len(cluster.nodes)
        self.nnodes = nnodes or str(self.nodes)
        self.dir = os.path.join(work, name)
        self.out = os.path.join(self.dir, "run")
        self.ckpt = os.path.join(self.out, "checkpoints")
        os.makedirs(self.dir, exist_ok=True)
        self.restarts, self.rdzv_timeout = restarts, rdzv_timeout
        self.sets = [*TINY, f"train.steps={STEPS}", f"checkpoint.every={EVERY}", f"train.out_dir={self.out}",
                     f"parallel.timeout_s={timeout_s}", *sets]
        self.port = _free_port()
        self.config = CONFIG
        self.shm_before = shm_entries()

    def tmpdir(self, node):
        return os.path.join(self.dir, f"tmp{node}")

    def memdir(self, node):
        """The node's memory file system for in-memory checkpoints (MESHRUN_HOST_MEMORY_DIR): the namespaces
        share /dev/shm, so each node gets its own directory, and a node's loss takes it (forget_memory)."""
        return os.path.join(self.dir, f"mem{node}")

    def forget_memory(self, node):
        """A lost node's memory is gone with it: what a replacement machine finds."""
        shutil.rmtree(self.memdir(node), ignore_errors=True)
        os.makedirs(self.memdir(node))

    def argv(self, node):
        meshrun = os.path.join(self.bin_dir, "meshrun")
        return [meshrun, "--nnodes", self.nnodes, "--nproc-per-node", str(NPROC), "--node-rank",
                str(node), "--master-addr", self.cluster.nodes[0].addr, "--master-port", str(self.port),
                "--max-restarts", str(self.restarts), "--rdzv-timeout", str(self.rdzv_timeout),
                "--shutdown-timeout", "5", "--run-id", self.name, *self.flags, self.config, *[f"--set={s}" for s in self.sets]]

    def env(self, node):
        os.makedirs(self.tmpdir(node), exist_ok=True)
        os.makedirs(self.memdir(node), exist_ok=True)
        env = dict(os.environ, MESHRUN_RDZV_TOKEN=TOKEN, MESHTRAIN_SLOW_RANK=f"0:{STEP_MS}", TMPDIR=self.tmpdir(node),
                   MESHRUN_HOST_MEMORY_DIR=self.memdir(node))
        env.pop("OMP_NUM_THREADS", None)
        return env

    def start_node(self, node):
        n = self.cluster.nodes[node]
        return n.start(self.argv(node), self.env(node), os.path.join(self.dir, f"node{node}.log"))

    def kill_and_replace(self, node, memory_lost, limit=150):
        """SIGKILL of every process of `node`, then its meshrun started again with the same command, as a scheduler
        (or an operator) starts it on a new machine; `memory_lost`: the new machine's memory holds none of the old
        one's. Returns the pids killed."""
        n = self.cluster.nodes[node]
        killed = n.kill()
        deadline = time.monotonic() + limit
        while n.pids():
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node}'s processes still there {limit} s after SIGKILL")
            time.sleep(0.02)
        n.wait(10)
        if memory_lost:
            self.forget_memory(node)
        self.start_node(node)
        return killed

    def start(self):
        for i in reversed(range(self.nodes)):
            self.start_node(i)
        return self

    def wait(self, timeout):
        """Every launcher's exit code (None for one still running after `timeout` seconds in all)."""
        deadline = time.monotonic() + timeout
        return [n.wait(max(0.1, deadline - time.monotonic())) for n in self.cluster.nodes[:self.nodes]]

    def lines(self):
        """Every node's output lines as (time, node, text), in order of arrival."""
        return sorted((t, i, s) for i, n in enumerate(self.cluster.nodes[:self.nodes]) for t, s in n.snapshot())

    def text(self):
        return "\n".join(f"--- node {i}\n" + n.text() for i, n in enumerate(self.cluster.nodes[:self.nodes]))

    def last_step(self, before=None):
        """The highest step any rank has completed (that arrived before time `before`)."""
        steps = [int(m.group(2)) for t, _, s in self.lines() if (before is None or t <= before)
                 for m in [STEP_LINE.search(s)] if m]
        return max(steps, default=0)

    def checksums(self):
        """Sorted (rank, checksum, step) of the run's last attempt, every node's ranks together."""
        out = {}
        for _, _, s in self.lines():
            m = CHECKSUM.search(s)
            if m:
                out[int(m.group(1))] = (int(m.group(1)), m.group(2), int(m.group(3)))
        return sorted(out.values())

    def recovery(self, fault_at):
        """(steps lost, seconds from the fault to the first step completed after it, resumed step or None): a
        restart loses the steps since the checkpoint it resumed from; without one nothing is lost.
        A step line can arrive just after the fault was injected, from a rank that finished that step as the fault
        landed; where the job restarts after the fault, such a line is a step done before it (counted among the
        steps the restart loses), not the recovery, which is the first step after the resume."""
        after = [(t, s) for t, _, s in self.lines() if t > fault_at]
        resume_at = next((t for t, s in after if RESUMED.search(s)), None)
        if resume_at is None:
            before = self.last_step(fault_at)
            for t, s in after:
                m = STEP_LINE.search(s)
                if m and int(m.group(2)) > before:
                    return 0, t - fault_at, None
            return None, None, None
        before = self.last_step(resume_at)  # the steps done before the restart, one racing the fault included
        resumed = None
        for t, s in after:
            if t < resume_at:
                continue
            m = RESUMED.search(s)
            if m:
                resumed = int(m.group(1))
            elif STEP_LINE.search(s):
                return before - resumed, t - fault_at, resumed
        return None, None, resumed

    def leftovers(self):
        """What the job left behind, as lines: processes in the node namespaces, new /dev/shm entries, files in
        the launchers' temporary directories, unfinished checkpoint directories."""
        out = []
        for n in self.cluster.nodes:
            for p in n.pids():
                out.append(f"process {p} still runs in {n.ns}: {_cmdline(p)}")
        for e in sorted(shm_entries() - self.shm_before):
            out.append(f"/dev/shm/{e} appeared")
        for i in range(self.nodes):
            for what, top in ((f"node {i}'s TMPDIR", self.tmpdir(i)), (f"node {i}'s memory", self.memdir(i))):
                for root, dirs, files in os.walk(top):
                    out += [f"left in {what}: {os.path.join(root, x)}" for x in files]
                    if not files and not dirs and root != top:
                        out.append(f"left in {what}: {root}/")
        out += [f"unfinished checkpoint directory {d}" for d in glob.glob(os.path.join(self.ckpt, "*.tmp"))]
        return out

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # any free number: the port is bound inside node 0's namespace, where all are free
    port = s.getsockname()[1]
    s.close()
    return port
