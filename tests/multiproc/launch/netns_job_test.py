"""Job.recovery (netns_job.py) over recorded output lines, the way the fault tests read a run: the steps a restart
lost, the time from the fault to the first step after it, the step it resumed from. A step line can arrive just
after the fault was injected, from a rank that finished that step as the fault landed; the run's recovery is then
still the first step after the resume (a memory_node_kill run once reported no restart at all from such a line).
No namespaces: the lines are given, as a node's snapshot() returns them."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_job import Job  # noqa: E402


class Node:
    def __init__(self, lines):
        self.lines = lines

    def snapshot(self):
        return list(self.lines)


class Cluster:
    def __init__(self, *nodes):
        self.nodes = list(nodes)


def step(rank, k):
    return f"[rank {rank}]: [05:40:00.470] [info] step {k:6d}/16 | loss 5.5613 | lr 1.90e-03 | 833 tok/s"


def resumed(rank, k):
    return (f"[rank {rank}]: [05:40:00.312] [info] resumed from /mem/rank_0000{rank}/step_{k:08d} at step {k} "
            f"(in-memory checkpoint; 2 rank(s) from their peer's replica; the newest on disk: none)")


def recovery(node0, node1, fault_at):
    with tempfile.TemporaryDirectory() as work:
        got = Job(Cluster(Node(node0), Node(node1)), "bin", work, "job").recovery(fault_at)
    return got[0], None if got[1] is None else round(got[1], 6), got[2]


def main():
    before = [(float(k), step(0, k)) for k in range(1, 7)]  # steps 1..6, the fault at 6.5
    cases = {
        "a step finished as the fault landed, then the restart": (
            before + [(6.51, step(0, 7))], [(7.0, resumed(2, 6)), (7.2, step(2, 7))], (1, 0.7, 6)),
        "the restart alone": (before, [(7.0, resumed(2, 4)), (7.3, step(2, 5))], (2, 0.8, 4)),
        "no restart, the run goes on": (before + [(7.0, step(0, 7))], [], (0, 0.5, None)),
        "nothing after the fault": (before, [], (None, None, None)),
    }
    failed = 0
    for name, (node0, node1, want) in cases.items():
        got = recovery(node0, node1, 6.5)
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: (lost, seconds, resumed) = {got}" + ("" if ok else f", want {want}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
