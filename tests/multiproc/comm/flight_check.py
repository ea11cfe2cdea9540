"""The flight-recorder path end to end: 3 ranks under meshrun (CPU backend), the last one skips a collective.
The other two must fail within the timeout, and every rank's dump must be in meshrun's log folder and show the
mismatch: ranks 0 and 1 timed out in all_reduce seq S naming rank 2, while rank 2's ring ends before seq S.

usage: flight_check.py MESHRUN COMM_WORKER WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys
import time


def main():
    meshrun, worker, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ)
    env.pop("MESHTRAIN_FLIGHT_DIR", None)  # the default place: meshrun's per-rank folder
    t0 = time.monotonic()
    p = subprocess.run([meshrun, "--standalone", "--nproc-per-node", "3", "--run-id", "flight", "--log-dir", work,
                        "--tee", "3", "--no-python", worker, "--timeout-test"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    print(p.stdout)
    assert p.returncode != 0, "the run must fail: two ranks timed out"
    assert "expected timeout" in p.stdout, "no rank reported the timeout"
    # 2 s timeout + 2.5 s linger + start-up: a hang would run into the skipping rank's 8 s sleep and beyond.
    assert elapsed < 60, f"took {elapsed:.1f} s"

    dumps = {}
    for rank in range(3):
        path = os.path.join(work, "flight", "attempt_0", str(rank), f"comm_flight_rank{rank}.json")
        assert os.path.exists(path), f"missing dump {path}; folder has {os.listdir(os.path.dirname(path))}"
        with open(path) as f:
            dumps[rank] = json.load(f)
        assert dumps[rank]["rank"] == rank

    def world_ops(d):
        return [e for e in d["entries"] if e["group"] == "world" and e["peer"] == -1]

    timed_out = []
    for rank in (0, 1):
        last = world_ops(dumps[rank])[-1]
        assert last["op"] == "all_reduce(sum)" and last["state"] == "timed_out", last
        assert last["dtype"] == "Float" and last["numel"] == 16 and last["bytes"] == 64, last
        assert last["ended_us"] >= last["started_us"] > 0, last
        assert "rank(s) 2" in dumps[rank]["reason"], dumps[rank]["reason"]
        timed_out.append(last["seq"])
    assert timed_out[0] == timed_out[1], timed_out
    seq = timed_out[0]
    skipper = world_ops(dumps[2])
    assert "requested by another rank" in dumps[2]["reason"], dumps[2]["reason"]
    assert max(e["seq"] for e in skipper) == seq - 1, (seq, skipper[-1])
    assert skipper[-1]["op"] == "barrier" and skipper[-1]["state"] == "completed", skipper[-1]
    print(f"flight_check: ok: ranks 0, 1 timed out in all_reduce seq {seq}; rank 2 stopped at "
          f"{skipper[-1]['op']} seq {seq - 1}; run took {elapsed:.1f} s")


if __name__ == "__main__":
    main()
