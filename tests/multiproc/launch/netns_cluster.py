"""Several "nodes" on one machine, each with its own network stack: the harness of the multi-node fault tests
(netns_faults_test.py) and of the randomised campaign (scripts/chaos_netns.py). docs/resilience.md describes it.

    hub namespace  <prefix>h : a bridge br0, one port p<i> per node
    node namespace <prefix>n<i> : lo up, eth0 = 10.213.<x>.<i+1>/24, a veth whose other end is the hub's p<i>

meshrun runs once per node namespace (`ip netns exec NS meshrun --nnodes N --node-rank i --master-addr <node 0's
address> ...`), exactly as on a cluster: the nodes reach each other only over their eth0, through the bridge.
The file system, /dev/shm and the process table stay shared (the checkpoint directory is the cluster's shared
file system); what a namespace holds is its network stack, so `ip netns pids` names every process of a node.

Names carry the creating process's pid (`mtn<pid>`), so concurrent runs never collide; the addresses live only
inside the namespaces. `NetnsCluster` is a context manager: it removes every namespace it made however the test
ends, and on entry removes the leftovers of earlier runs whose creating process is gone (a SIGKILLed test).

Faults it can inject, each as on a real cluster:
  kill(node, pids)        SIGKILL some processes (a worker) or every process of a node (`node_pids`)
  freeze(node)/thaw(node) SIGSTOP / SIGCONT every process of a node (a hang: swapping, a stuck driver)
  link(node, up)          the node's switch port (the hub's end of its cable) down or up: a partition
"""
import os
import re
import shutil
import signal
import subprocess
import threading
import time

PREFIX = "mtn"  # + pid; interface names stay within 15 characters


class NetnsUnavailable(Exception):
    """Network namespaces cannot be made here (no root, no `ip`): the test reports skipped."""


def _ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def namespace_pids(ns):
    """Every live process whose network namespace is `ns`."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if _alive(int(p))]


def _remove_namespace(ns):
    for _ in range(50):  # kill what still runs in it (only our own test's processes live there), then the name
        pids = namespace_pids(ns)
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGCONT)
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    _ip("netns", "del", ns, check=False)


def sweep_leftovers():
    """Removes the namespaces of earlier harness runs whose creating process is gone; returns their names."""
    swept = []
    for line in _ip("netns", "list", check=False).splitlines():
        m = re.match(rf"({PREFIX}(\d+)[hn]\d*)\b", line)
        if m and not _alive(int(m.group(2))):
            _remove_namespace(m.group(1))
            swept.append(m.group(1))
    return swept


def check_available():
    """Raises NetnsUnavailable, saying why, where namespaces cannot be made."""
    if shutil.which("ip") is None:
        raise NetnsUnavailable("no `ip` command (iproute2) on PATH")
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root (`ip netns add`); run as root")
    probe = f"{PREFIX}{os.getpid()}probe"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        raise NetnsUnavailable(f"`ip netns add` failed: {p.stderr.strip()}")
    _ip("netns", "del", probe, check=False)


class Node:
    """One node: its namespace, its address, and the launcher run in it (`start`), whose output lines are kept
    with the time each arrived (`lines`: (monotonic seconds, text))."""

    def __init__(self, cluster, index):
        self.cluster, self.index = cluster, index
        self.ns = f"{cluster.prefix}n{index}"
        self.addr = f"{cluster.subnet}.{index + 1}"
        self.proc, self.lines, self._readers = None, [], []
        self._lock = threading.Lock()

    def start(self, argv, env, log_path):
        """Runs `argv` inside the node's namespace (`ip netns exec` execs it: the pid is the program's)."""
        self.lines = []
        self.log = open(log_path, "a")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self._readers = [threading.Thread(target=self._read, args=(s,), daemon=True)
                         for s in (self.proc.stdout, self.proc.stderr)]
        for r in self._readers:
            r.start()
        return self

    def _read(self, stream):
        for line in stream:
            with self._lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.log.write(line)
                self.log.flush()

    def wait(self, timeout):
        """The launcher's exit code; None if it is still running after `timeout` seconds."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for r in self._readers:
            r.join(timeout=5)
        self.log.close()
        return rc

    def text(self):
        with self._lock:
            return "\n".join(t for _, t in self.lines)

    def snapshot(self):
        with self._lock:
            return list(self.lines)

    def pids(self):
        """Every process of this node: its launcher, the store helper, the workers."""
        return namespace_pids(self.ns)

    def worker_pid(self, rank):
        """The pid of the worker with global rank `rank` on this node, or None."""
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    exe = os.path.basename(f.read().split(b"\0")[0])
            except OSError:
                continue
            if exe == b"meshtrain" and f"RANK={rank}".encode() in env:
                return pid
        return None

    def kill(self, pids=None):
        """SIGKILL `pids`, or every process of the node; returns what was killed."""
        return self._signal(self.pids() if pids is None else pids, signal.SIGKILL)

    def freeze(self):
        """SIGSTOP every process of the node; returns them."""
        return self._signal(self.pids(), signal.SIGSTOP)

    def thaw(self):
        return self._signal(self.pids(), signal.SIGCONT)

    @staticmethod
    def _signal(pids, sig):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:  # exited meanwhile
                pass
        return pids

    def link(self, up):
        """The node's switch port (the hub's end of its cable) up or down."""
        _ip("-n", self.cluster.hub, "link", "set", f"p{self.index}", "up" if up else "down")


class NetnsCluster:
    """`nodes` namespaces joined by a bridge in a hub namespace; a context manager that removes them all."""

    def __init__(self, nodes):
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.hub = f"{self.prefix}h"
        self.subnet = f"10.213.{os.getpid() % 250 + 1}"
        self.nodes = [Node(self, i) for i in range(nodes)]
        self.swept = []

    def __enter__(self):
        check_available()
        self.swept = sweep_leftovers()
        try:
            self._create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def _create(self):
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for n in self.nodes:
            _ip("netns", "add", n.ns)
            _ip("link", "add", "eth0", "netns", n.ns, "type", "veth", "peer", "name", f"p{n.index}", "netns",
                self.hub)
            _ip("-n", self.hub, "link", "set", f"p{n.index}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"p{n.index}", "up")
            _ip("-n", n.ns, "addr", "add", f"{n.addr}/24", "dev", "eth0")
            _ip("-n", n.ns, "link", "set", "eth0", "up")
            _ip("-n", n.ns, "link", "set", "lo", "up")

    def namespaces(self):
        return [self.hub] + [n.ns for n in self.nodes]

    def remove(self):
        """Kills whatever still runs in the nodes and deletes every namespace of this cluster."""
        for n in self.nodes:
            _remove_namespace(n.ns)
        _ip("netns", "del", self.hub, check=False)

    def leftovers(self):
        """The namespaces of this cluster that still exist (after `remove`: none)."""
        names = _ip("netns", "list", check=False)
        return [ns for ns in self.namespaces() if re.search(rf"^{ns}\b", names, re.M)]
