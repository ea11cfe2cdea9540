# Multi-process tests of meshrun: real launcher, real worker processes (worker.py), one case per ctest.
# usage: launch_test.py MESHRUN PYTHON CASE
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

MESHRUN, PYTHON, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
OUT = tempfile.mkdtemp(prefix="meshrun-test-")
ENV = dict(os.environ, PYTHON=PYTHON)
ENV.pop("OMP_NUM_THREADS", None)
# Several nodes need the job's store token on every launcher (docs/launcher.md "The store's token").
NODES_ENV = dict(ENV, MESHRUN_RDZV_TOKEN="launch-test-token-0123456789abcdef")


def run(*flags, mode="env", args=(), timeout=120, env=None):
    cmd = [MESHRUN, "--standalone", *flags, WORKER, mode, OUT, *map(str, args)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or ENV)
    p.elapsed = time.time() - t0
    return p


def start(*flags, mode="hang", args=()):
    cmd = [MESHRUN, "--standalone", *flags, WORKER, mode, OUT, *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def records(name):
    out = {}
    for f in os.listdir(OUT):
        parts = f.split(".")
        if parts[0] == name:
            with open(os.path.join(OUT, f)) as fh:
                txt = fh.read()
            out[(int(parts[1]), int(parts[2]))] = json.loads(txt) if txt else ""
    return out


def wait_for(pred, timeout=60, what="condition"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def check(cond, msg, p=None):
    if not cond:
        if p is not None:
            print("--- stdout\n" + (p.stdout or "") + "\n--- stderr\n" + (p.stderr or ""))
        raise AssertionError(msg)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def case_env(n):
    p = run("--nproc-per-node", str(n), mode="store")
    check(p.returncode == 0, f"rc {p.returncode}", p)
    env, store = records("env"), records("store")
    check(sorted(r for r, _ in env) == list(range(n)), f"ranks {sorted(env)}", p)
    ports = {e["MASTER_PORT"] for e in env.values()}
    check(len(ports) == 1, f"one MASTER_PORT expected: {ports}")
    for (r, a), e in env.items():
        want = {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(r), "ROLE_WORLD_SIZE": str(n),
                "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                "OMP_NUM_THREADS": "1" if n > 1 else None}
        for k, v in want.items():
            check(e[k] == v, f"rank {r}: {k}={e[k]!r}, expected {v!r}")
        check(e["pgid"] == e["pid"], f"rank {r} not in its own process group")
        check(e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{r}/error.json"), e["TORCHELASTIC_ERROR_FILE"])
    check(len(store) == n, f"store records {len(store)}")
    pids = {str(r): str(e["pid"]) for (r, _), e in env.items()}
    for s in store.values():
        check(s == pids, f"store view {s} != {pids}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("[rank ")]
    print(f"ok: {n} workers, distinct ranks, one store reached by all ({p.elapsed:.2f}s)")


def case_exit_code():
    p = run("--nproc-per-node", "2", mode="fail", args=(1, 7, 99))
    check(p.returncode == 7, f"rc {p.returncode}, expected 7", p)
    for s in ["root cause", "rank       : 1", "exit code 7", "boom: rank 1 failing with 7", "meshrun exits with 7"]:
        check(s in p.stderr, f"summary lacks {s!r}", p)
    check(p.elapsed < 20, f"teardown took {p.elapsed:.1f}s", p)
    print(p.stderr)


def case_signal_death():
    p = run("--nproc-per-node", "2", mode="die", args=(1, 11))
    check(p.returncode == 128 + 11, f"rc {p.returncode}", p)
    check("signal SIGSEGV (11)" in p.stderr, "summary lacks the signal name", p)
    print("ok: rc 139, SIGSEGV named")


def case_error_file():
    p = run("--nproc-per-node", "2", mode="errorfile")
    check(p.returncode == 3, f"rc {p.returncode}", p)
    check("loss is nan at step 7" in p.stderr and "train.py line 42" in p.stderr, "error file not shown", p)
    print(p.stderr)


def case_restart_recovers():
    p = run("--nproc-per-node", "2", "--max-restarts", "2", mode="fail", args=(1, 5, 2))
    check(p.returncode == 0, f"rc {p.returncode}", p)
    env = records("env")
    check(sorted(env) == [(r, a) for r in range(2) for a in range(3)], f"attempts {sorted(env)}", p)
    for (r, a), e in env.items():
        check(e["TORCHELASTIC_RESTART_COUNT"] == str(a) and e["TORCHELASTIC_MAX_RESTARTS"] == "2", str(e))
    check(p.stderr.count("restarting the worker group") == 2, "two restarts expected", p)
    print("ok: failed twice, restarted twice, third attempt succeeded")


def case_invalid_input_no_restart():
    # Every worker exits 2 with argparse's usage error: restarting cannot help, so none; rc 2, one line saying why.
    p = run("--nproc-per-node", "2", "--max-restarts", "3", mode="usage", args=("--no-such-flag",))
    check(p.returncode == 2, f"rc {p.returncode}, expected 2", p)
    check(sorted({a for _, a in records("env")}) == [0], f"attempts {sorted(records('env'))}", p)
    check("unrecognized arguments: --no-such-flag" in p.stderr, "argparse's line not shown", p)
    why = [l for l in p.stderr.splitlines() if "no restart" in l]
    check(len(why) == 1 and "meshrun: no restart (3 left): the root cause exited with code 2, invalid input" in why[0],
          f"why no restart: {why}", p)
    check("restarting" not in p.stderr, "restarted", p)
    subprocess.run(["rm", "-rf", *[os.path.join(OUT, f) for f in os.listdir(OUT)]])
    # One rank exits 2, the other is stopped by meshrun: the same decision, whatever the other was doing.
    p = run("--nproc-per-node", "2", "--max-restarts", "3", mode="fail", args=(0, 2, 99))
    check(p.returncode == 2 and sorted({a for _, a in records("env")}) == [0], f"rc {p.returncode}", p)
    check(p.stderr.count("no restart (3 left)") == 1, "no line", p)
    print("ok: exit 2 (argparse, or one rank): one attempt, one line why, rc 2")


def case_invalid_input_meshtrain():
    # A meshtrain worker's UserError (exit 2), one that only the worker finds (checkpoint.resume naming no
    # checkpoint): no restart either.
    meshtrain = os.path.join(os.path.dirname(MESHRUN), "meshtrain")
    config = os.path.join(HERE, "..", "..", "..", "configs", "quickstart.yaml")
    with open(os.path.join(OUT, "text.txt"), "w") as f:
        f.write("In the beginning God created the heaven and the earth.\n" * 400)
    subprocess.run([meshtrain, "prepare", os.path.join(OUT, "text.txt"), "--out", os.path.join(OUT, "t")],
                   check=True, stdout=subprocess.DEVNULL)
    sets = [f"data.train={OUT}/t_train.bin", "data.val=", "model.n_layer=1", "model.d_model=64", "model.n_head=2",
            "data.seq_len=32", "train.eval_every=0", "train.sample_tokens=0", f"train.out_dir={OUT}/run",
            f"checkpoint.resume={OUT}/no-such-checkpoint"]
    p = subprocess.run([MESHRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", config,
                        *[f"--set={s}" for s in sets]], capture_output=True, text=True, timeout=120, env=ENV)
    check(p.returncode == 2, f"rc {p.returncode}, expected 2", p)
    check("no-such-checkpoint/meta.json: no such checkpoint metadata" in p.stderr, "the worker's line not shown", p)
    check(p.stderr.count("no restart (3 left): the root cause exited with code 2") == 1, "no line why not", p)
    check("restarting" not in p.stderr, "restarted", p)
    print("ok: a meshtrain worker's UserError: one attempt, one line why, rc 2")


def case_restart_exhausted():
    p = run("--nproc-per-node", "2", "--max-restarts", "2", mode="fail", args=(0, 5, 99))
    check(p.returncode == 5, f"rc {p.returncode}", p)
    check("FAILED after 3 attempts" in p.stderr, "summary lacks attempt count", p)
    check(sorted({a for _, a in records("env")}) == [0, 1, 2], "three attempts expected", p)
    print("ok: 3 attempts, rc 5")


def case_sigterm_forwarded():
    m = start("--nproc-per-node", "2", "--max-restarts", "3")
    wait_for(lambda: len(records("ready")) == 2, what="workers ready")
    m.send_signal(signal.SIGUSR1)
    wait_for(lambda: len(records("sig10")) == 2, what="SIGUSR1 at both workers")
    check(m.poll() is None, "launcher exited on SIGUSR1")
    m.send_signal(signal.SIGTERM)
    out, err = m.communicate(timeout=30)
    check(m.returncode == 128 + 15, f"rc {m.returncode}\n{err}")
    check(len(records("sig15")) == 2, f"SIGTERM reached {len(records('sig15'))} workers\n{err}")
    check(len(records("env")) == 2, "restarted after a forwarded signal")
    print("ok: SIGUSR1 forwarded (workers kept running), SIGTERM forwarded, rc 143, no restart")


def case_preemption_notice():
    # Workers that exit after a forwarded SIGUSR1 (Slurm's preemption warning) are not restarted.
    m = start("--nproc-per-node", "2", "--max-restarts", "3", mode="preempt")
    wait_for(lambda: len(records("ready")) == 2, what="workers ready")
    m.send_signal(signal.SIGUSR1)
    out, err = m.communicate(timeout=60)
    check(m.returncode == 128 + 10, f"rc {m.returncode}\n{err}")
    check(len(records("sig10")) == 2 and len(records("env")) == 2, f"restarted after the notice\n{err}")
    check("no restart" in err, f"no word on the notice\n{err}")
    # A requested stop is not a failure: no "failed with exit code 138", the stop is named as such.
    check("failed with" not in err and "stopped at the requested SIGUSR1" in err, f"reported as a failure\n{err}")
    print("ok: SIGUSR1 forwarded, workers exited 138, no restart, meshrun exits 138")


def case_sigterm_ignored():
    m = start("--nproc-per-node", "2", "--shutdown-timeout", "1", args=("ignore",))
    wait_for(lambda: len(records("ready")) == 2, what="workers ready")
    pids = [e["pid"] for e in records("env").values()]
    t0 = time.time()
    m.send_signal(signal.SIGTERM)
    m.communicate(timeout=30)
    dt = time.time() - t0
    check(m.returncode == 143, f"rc {m.returncode}")
    check(0.9 < dt < 5, f"stop took {dt:.2f}s with --shutdown-timeout 1")
    check(not any(alive(p) for p in pids), "workers survived")
    print(f"ok: SIGTERM-ignoring workers SIGKILLed after {dt:.2f}s")


def case_no_orphans():
    m = start("--nproc-per-node", "4")
    wait_for(lambda: len(records("ready")) == 4, what="workers ready")
    pids = [e["pid"] for e in records("env").values()]
    check(all(alive(p) for p in pids), "workers not running")
    with open(f"/proc/{m.pid}/task/{m.pid}/children") as f:  # the workers and the store helper
        children = [int(c) for c in f.read().split()]
    helper = [c for c in children if c not in pids]
    check(len(helper) == 1, f"expected one store helper among meshrun's children {children}")
    m.kill()  # SIGKILL: the launcher gets no chance to clean up; PDEATHSIG must do it
    m.wait()
    wait_for(lambda: not any(alive(p) for p in pids + helper), timeout=10,
             what="workers and the store helper to die after kill -9 of meshrun")
    print(f"ok: {len(pids)} workers and the store helper gone after kill -9 of meshrun")


def case_gloo_allreduce():
    cmd = [MESHRUN, "--standalone", "--nproc-per-node", "2", os.path.join(HERE, "allreduce_gloo.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
    check(p.returncode == 0, f"rc {p.returncode}", p)
    for r in range(2):
        check(f"[rank {r}]: allreduce ok rank={r} world=2 sum=1" in p.stdout, f"rank {r} line missing", p)
    print(p.stdout)


def case_bad_input():
    p = subprocess.run([MESHRUN, "--nproc-per-node", "x", "--no-python", "true"], capture_output=True, text=True)
    check(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--nproc-per-node" in p.stderr,
          "bad value", p)
    p = subprocess.run([MESHRUN, "--frobnicate", "true"], capture_output=True, text=True)
    check(p.returncode == 2 and "unknown flag '--frobnicate'" in p.stderr, "unknown flag", p)
    p = subprocess.run([MESHRUN, "--standalone", "--no-python", "/nonexistent/prog"], capture_output=True, text=True)
    check(p.returncode == 2 and "program not found" in p.stderr, "missing program", p)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    p = subprocess.run([MESHRUN, "--master-port", str(port), "--no-python", "true"], capture_output=True, text=True)
    check(p.returncode == 2 and f"--master-port {port} is already in use" in p.stderr, "port in use", p)
    # A program (not a config) with more workers than GPUs: it may be a gloo job, so a warning, not a refusal.
    p = subprocess.run([MESHRUN, "--standalone", "--nproc-per-node", "2", "--no-python", "true"], capture_output=True,
                       text=True, env=dict(ENV, CUDA_VISIBLE_DEVICES="0"))
    check(p.returncode == 0 and "2 workers but 1 GPU(s) on this node" in p.stderr, "more workers than GPUs", p)
    p = subprocess.run([MESHRUN, "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "Rendezvous:" in p.stdout and "[default: 29500]" in p.stdout, "help", p)
    print("ok: bad value, unknown flag, missing program, port in use, --help")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def two_nodes(program, *flags, timeout=150, env=None):
    """Two launchers of one job on loopback (--nnodes 2), node 1 started first so it must wait for node 0's
    store. Returns the two finished processes, node 0's first."""
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--run-id", "two-nodes", *flags]
    procs = {}
    for n in (1, 0):
        procs[n] = subprocess.Popen([MESHRUN, *common, "--node-rank", str(n), *program], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env or NODES_ENV)
        time.sleep(0.3)
    out = {}
    for n in (0, 1):
        o, e = procs[n].communicate(timeout=timeout)
        procs[n].stdout, procs[n].stderr = o, e
        out[n] = procs[n]
    return out[0], out[1]


def case_multinode_restart():
    # Rank 3 (node 1, local rank 1) fails in round 0: both nodes stop, restart together, round 1 succeeds.
    n0, n1 = two_nodes([WORKER, "fail", OUT, "3", "5", "1"], "--max-restarts", "1")
    check(n0.returncode == 0, f"node 0 rc {n0.returncode}", n0)
    check(n1.returncode == 0, f"node 1 rc {n1.returncode}", n1)
    env = records("env")
    check(sorted(env) == [(r, a) for r in range(4) for a in range(2)], f"ranks/attempts {sorted(env)}", n0)
    for (r, a), e in env.items():
        check(e["WORLD_SIZE"] == "4" and e["GROUP_RANK"] == str(r // 2) and e["LOCAL_RANK"] == str(r % 2) and
              e["TORCHELASTIC_RESTART_COUNT"] == str(a), f"rank {r} attempt {a}: {e}")
    for p in (n0, n1):
        check("restarting the worker group on every node (restart 1 of 1) after: rank 3 on node 1" in p.stderr,
              "restart not coordinated", p)
    print("ok: a failure on node 1 restarted both nodes; round 1 succeeded on both")


def case_multinode_fail():
    n0, n1 = two_nodes([WORKER, "fail", OUT, "3", "5", "99"])
    check(n1.returncode == 5 and "rank       : 3" in n1.stderr, f"node 1 rc {n1.returncode}", n1)
    check(n0.returncode == 5, f"node 0 rc {n0.returncode}", n0)
    check("job FAILED after 1 attempt(s): rank 3 on node 1" in n0.stderr, "node 0 does not name the cause", n0)
    print("ok: no restarts left: both nodes exit 5, node 0 names rank 3 on node 1")


def case_multinode_invalid_input():
    # Rank 3 (node 1) exits 2, invalid input: no node restarts although restarts remain; both exit 2.
    n0, n1 = two_nodes([WORKER, "fail", OUT, "3", "2", "99"], "--max-restarts", "2")
    for n, p in ((0, n0), (1, n1)):
        check(p.returncode == 2, f"node {n} rc {p.returncode}, expected 2", p)
        check(p.stderr.count("no restart (2 left): the root cause exited with code 2") == 1, f"node {n}: no line", p)
        check("restarting" not in p.stderr, f"node {n} restarted", p)
    check(sorted({a for _, a in records("env")}) == [0], f"attempts {sorted(records('env'))}", n0)
    print("ok: exit 2 on node 1: one attempt, both nodes say why there is no restart and exit 2")


def store_stranger(port, record):
    """Plays a peer that holds the job's token (a launcher gone wrong, or a stolen token): writes `record` as round
    0's failure cause and counts a failure, the way a launcher reports one (node_coordinator.h), over the store's
    wire protocol (launch/store_protocol.h): HELLO as node 1's launcher, then c10d's SET and ADD."""
    import struct

    def string(b):
        return struct.pack("=Q", len(b)) + b

    token = NODES_ENV["MESHRUN_RDZV_TOKEN"].encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(struct.pack("=B", 0xA5) + string(token) + struct.pack("=Bi", 0, 1))  # HELLO, launcher, node 1
        check(sock.recv(1) == b"\x5a", "the store did not accept the token's HELLO")
        sock.sendall(struct.pack("=BI", 0, 0x3C85F7CE))                                    # VALIDATE
        sock.sendall(struct.pack("=B", 1) + string(b"/meshrun/cause/0") + string(record.encode()))  # SET
        sock.sendall(struct.pack("=B", 4) + string(b"/meshrun/fail/0") + struct.pack("=q", 1))      # ADD
        got = b""
        while len(got) < 8:
            chunk = sock.recv(8 - len(got))
            check(chunk != b"", "the store closed the connection before answering ADD")
            got += chunk


def two_nodes_with_stranger(record):
    """Two launchers of one job on loopback with hanging workers; once all 4 run, a peer holding the token writes
    `record` as the failure cause. Returns the two finished processes, node 0's first."""
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    procs = [subprocess.Popen([MESHRUN, *common, "--node-rank", str(n), WORKER, "hang", OUT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=NODES_ENV) for n in (0, 1)]
    wait_for(lambda: len(records("ready")) == 4, what="4 workers ready")
    store_stranger(port, record)
    for p in procs:
        p.stdout, p.stderr = p.communicate(timeout=120)
    subprocess.run(["rm", "-rf", *[os.path.join(OUT, f) for f in os.listdir(OUT)]])
    return procs


def case_multinode_stranger_exit0():
    # A cause record saying exit code 0: the job failed (its workers were stopped), so it exits non-zero.
    for n, p in enumerate(two_nodes_with_stranger("0\t0\tall is well, says a stranger")):
        check(p.returncode == 1, f"node {n} rc {p.returncode}, expected 1", p)
        check("exiting with 0" not in p.stderr, f"node {n} says it exits 0", p)
        check("job FAILED after 1 attempt(s): meshrun/cause/0 at the store gives exit code 0 for 'all is well, says "
              "a stranger', which is not a failure's exit code (1..255); exiting with 1" in p.stderr,
              f"node {n}: no line naming the record", p)
    print("ok: a cause record with exit code 0 from a token holder: both nodes exit 1, naming the record")


def case_multinode_stranger_malformed():
    # Malformed cause records: one line naming the key on each node, no stoi, the job ends failed with 1.
    for record in ("abc\t0\tnot a number", "99999999999\t0\ttoo big", "no tabs at all"):
        for n, p in enumerate(two_nodes_with_stranger(record)):
            check(p.returncode == 1, f"{record!r}: node {n} rc {p.returncode}, expected 1", p)
            check("stoi" not in p.stderr and "meshrun: error" not in p.stderr,
                  f"{record!r}: node {n} leaks an exception", p)
            lines = [l for l in p.stderr.splitlines() if "meshrun/cause/0" in l]
            check(len(lines) == 1 and "job FAILED after 1 attempt(s): meshrun/cause/0 at the store" in lines[0] and
                  lines[0].endswith("; exiting with 1"), f"{record!r}: node {n}: {lines}", p)
        print(f"ok: {record!r}: both nodes: {lines[0]}")


def case_multinode_gloo():
    # PyTorch workers on both nodes reach node 0's store (served by meshrun-store) and all_reduce over 4 ranks.
    n0, n1 = two_nodes([os.path.join(HERE, "allreduce_gloo.py")])
    for n, p in ((0, n0), (1, n1)):
        check(p.returncode == 0, f"node {n} rc {p.returncode}", p)
        for r in (2 * n, 2 * n + 1):
            check(f"[rank {r}]: allreduce ok rank={r} world=4 sum=6" in p.stdout, f"rank {r} line missing", p)
    print("ok: gloo all_reduce over 2 launchers x 2 workers")


def case_multinode_stop():
    # SIGTERM to node 1's launcher stops the job on both nodes, with no restart.
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--max-restarts", "3"]
    procs = [subprocess.Popen([MESHRUN, *common, "--node-rank", str(n), WORKER, "hang", OUT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=NODES_ENV) for n in (0, 1)]
    wait_for(lambda: len(records("ready")) == 4, what="4 workers ready")
    procs[1].send_signal(signal.SIGTERM)
    outs = [p.communicate(timeout=60) for p in procs]
    for n, p in enumerate(procs):
        check(p.returncode == 143, f"node {n} rc {p.returncode}\n{outs[n][1]}")
    check("job stopped after 1 attempt(s): node 1's launcher got SIGTERM" in outs[0][1], f"node 0:\n{outs[0][1]}")
    check(len(records("env")) == 4 and len(records("sig15")) == 4, "restarted, or a worker missed SIGTERM")
    print("ok: SIGTERM to node 1 stopped both nodes (rc 143), no restart")


def case_multinode_forged_cause():
    # A worker (rank 1, node 0) tries to write the launchers' failure record of round 0 through its store
    # connection: the store refuses it in one line, and both nodes still finish round 0 cleanly.
    n0, n1 = two_nodes([WORKER, "forge", OUT])
    for n, p in ((0, n0), (1, n1)):
        check(p.returncode == 0, f"node {n} rc {p.returncode}", p)
        check("job FAILED" not in p.stderr and "restarting" not in p.stderr, f"node {n} saw a forged failure", p)
    check(all(e["MESHRUN_RDZV_TOKEN"] is None for e in records("env").values()), "the token reached a worker")
    forge = records("forge")
    check(forge == {(1, 0): ["fail: refused", "cause: refused"]}, f"forge records {forge}", n0)
    refusals = [l for l in n0.stderr.splitlines() if "may not touch the launchers' key" in l]
    check(len(refusals) == 2 and all(l.startswith("meshrun-store: closed a worker connection of node 0 (")
                                     for l in refusals), "not one line per refused connection", n0)
    # The refused worker's own client may print PyTorch's trace under "[rank 1]: "; meshrun and its store not.
    own = "\n".join(l for l in n0.stderr.splitlines() if not l.startswith("[rank "))
    for bad in ("c10::Error", "frame #", "Exception raised"):
        check(bad not in own, f"{bad!r} from meshrun or its store on node 0's console", n0)
    print("ok: a worker's forged failure record is refused in one line per connection; the job succeeds")


def case_multinode_bad_token():
    # Node 1 with a different token is refused by node 0's store: one line, exit 2.
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--rdzv-timeout", "60"]
    program = ["--no-python", "true"]
    n0 = subprocess.Popen([MESHRUN, *common, "--node-rank", "0", *program], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=NODES_ENV)
    try:
        p = subprocess.run([MESHRUN, *common, "--node-rank", "1", *program], capture_output=True, text=True,
                           timeout=90, env=dict(ENV, MESHRUN_RDZV_TOKEN="another-token-0123456789abcdef"))
    finally:
        n0.send_signal(signal.SIGTERM)
        _, err0 = n0.communicate(timeout=60)
    check(p.returncode == 2, f"node 1 rc {p.returncode}", p)
    check(f"the rendezvous store at 127.0.0.1:{port} refused this node's token" in p.stderr, "not named", p)
    check(len(p.stderr.strip().splitlines()) == 1, "more than one line", p)
    check("closed the launcher connection" not in err0 and "HELLO with a wrong token" in err0,
          f"node 0 does not say why:\n{err0}")
    # Without any token source, several nodes are refused before anything starts.
    p = subprocess.run([MESHRUN, *common, "--node-rank", "1", *program], capture_output=True, text=True, timeout=60,
                       env=ENV)
    check(p.returncode == 2 and "needs the rendezvous token on every node" in p.stderr, "no token: not refused", p)
    check(len(p.stderr.strip().splitlines()) == 1, "more than one line", p)
    print("ok: a node with the wrong token, or none, is refused in one line (exit 2)")


def listening_addresses(port):
    """The local addresses of the TCP sockets listening on `port`, from /proc/net/tcp{,6} (hex as printed)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                addr, hexport = cols[1].split(":")
                if int(hexport, 16) == port and cols[3] == "0A":  # 0A: LISTEN
                    found.append(addr)
    return found


def case_multinode_bind():
    # With several nodes node 0's store listens on the --master-addr interface only (127.0.0.2 here: a
    # loopback address that is not 127.0.0.1), not on every interface.
    port = free_port()
    n0 = subprocess.Popen([MESHRUN, "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", "--master-addr",
                           "127.0.0.2", "--master-port", str(port), "--rdzv-timeout", "60", "--no-python", "true"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=NODES_ENV)
    try:
        wait_for(lambda: listening_addresses(port), what=f"a listener on port {port}")
        addrs = listening_addresses(port)
        refused = False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        except ConnectionRefusedError:
            refused = True
    finally:
        n0.send_signal(signal.SIGTERM)
        n0.communicate(timeout=60)
    check(addrs == ["0200007F"], f"listening on {addrs}, expected 127.0.0.2 (0200007F) only")
    check(refused, f"127.0.0.1:{port} accepted a connection")
    print(f"ok: node 0's store listens on 127.0.0.2:{port} only")


def case_token_file():
    # --rdzv-conf token_file: node 0 creates it (mode 0600), node 1 reads it; the job runs. A token file that
    # group or others may read is refused in one line.
    path = os.path.join(OUT, "rdzv.token")
    n0, n1 = two_nodes([WORKER, "env", OUT], "--rdzv-conf", f"token_file={path}", env=ENV)
    for n, p in ((0, n0), (1, n1)):
        check(p.returncode == 0, f"node {n} rc {p.returncode}", p)
    check(os.stat(path).st_mode & 0o777 == 0o600, f"token file mode {oct(os.stat(path).st_mode)}")
    os.chmod(path, 0o640)
    p = subprocess.run([MESHRUN, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                        str(free_port()), "--rdzv-conf", f"token_file={path}", "--no-python", "true"],
                       capture_output=True, text=True, timeout=60, env=ENV)
    check(p.returncode == 2, f"rc {p.returncode}", p)
    check(f"token_file={path} has mode 640: group or others may read or write it" in p.stderr, "not named", p)
    check(len(p.stderr.strip().splitlines()) == 1, "more than one line", p)
    print("ok: token_file created 0600 by node 0 and used by node 1; a group-readable one is refused")


def case_store_lost():
    # The store helper dies mid-run: meshrun stops the workers and says so, rather than leaving them to hang.
    m = start("--nproc-per-node", "2", "--max-restarts", "3")
    wait_for(lambda: len(records("ready")) == 2, what="workers ready")
    pids = [e["pid"] for e in records("env").values()]
    with open(f"/proc/{m.pid}/task/{m.pid}/children") as f:
        helper = [int(c) for c in f.read().split() if int(c) not in pids]
    check(len(helper) == 1, f"no store helper among meshrun's children")
    os.kill(helper[0], signal.SIGKILL)
    out, err = m.communicate(timeout=60)
    check(m.returncode == 1, f"rc {m.returncode}\n{err}")
    check(f"the rendezvous store (meshrun-store, pid {helper[0]}) exited with signal SIGKILL" in err, err)
    check(not any(alive(p) for p in pids), "workers survived the store")
    print("ok: store helper killed: workers stopped, meshrun exits 1 naming it")


def case_unreachable_master():
    port = free_port()
    t0 = time.time()
    p = subprocess.run([MESHRUN, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                        str(port), "--rdzv-timeout", "1.5", "--no-python", "true"], capture_output=True, text=True,
                       timeout=60, env=NODES_ENV)
    dt = time.time() - t0
    check(p.returncode == 2, f"rc {p.returncode}", p)
    check(f"cannot reach the rendezvous store at 127.0.0.1:{port}" in p.stderr, "address not named", p)
    check(len(p.stderr.strip().splitlines()) == 1, "more than one line", p)
    check(1.4 < dt < 15, f"gave up after {dt:.1f}s with --rdzv-timeout 1.5", p)
    print(f"ok: unreachable master named after {dt:.1f}s: {p.stderr.strip()}")


def case_numa_binding():
    # A fixture /sys with 2 GPUs, each on its own NUMA node holding one of CPUs 0 and 1.
    if not {0, 1} <= os.sched_getaffinity(0):
        print("skip: needs CPUs 0 and 1")
        sys.exit(77)
    root = os.path.join(OUT, "fixture")
    def put(path, text):
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text + "\n")
    for g, bus in enumerate(["18", "9a"]):
        d = f"sys/bus/pci/devices/0000:{bus}:00.0/"
        put(d + "vendor", "0x10de"), put(d + "class", "0x030200"), put(d + "numa_node", str(g))
        put(f"sys/devices/system/node/node{g}/cpulist", str(g))
    env = dict(ENV, CUDA_VISIBLE_DEVICES="0,1", MESHRUN_SYSFS_ROOT=root)
    p = run("--nproc-per-node", "2", "--numa-binding", "node", env=env)
    check(p.returncode == 0, f"rc {p.returncode}", p)
    env_seen = records("env")
    check(env_seen[(0, 0)]["cpus"] == [0] and env_seen[(1, 0)]["cpus"] == [1], f"affinity {env_seen}", p)
    first = [l for l in p.stderr.splitlines() if l.startswith("[rank 1]:")][0]
    check(first == "[rank 1]: meshrun: local rank 1 → GPU 1 (0000:9a:00.0, NUMA node 1), CPUs 1 "
                   "(--numa-binding node)", f"first line of rank 1: {first!r}", p)
    subprocess.run(["rm", "-rf", *[os.path.join(OUT, f) for f in os.listdir(OUT) if f != "fixture"]])
    p = run("--nproc-per-node", "2", "--numa-binding", "none", env=env)
    allowed = sorted(os.sched_getaffinity(0))
    check(p.returncode == 0 and all(e["cpus"] == allowed for e in records("env").values()), "none pinned", p)
    # Binding asked for where it cannot be applied: one clear line, the run goes on unpinned.
    p = run("--nproc-per-node", "2", "--numa-binding", "socket", env=dict(ENV, MESHRUN_SYSFS_ROOT=OUT + "/empty"))
    check(p.returncode == 0 and "--numa-binding socket: no NVIDIA GPU in /sys/bus/pci/devices" in p.stderr,
          "no line for a binding that cannot be applied", p)
    print("ok: workers pinned near their GPUs, shown first in their logs; none = inherited; a clear line otherwise")


def cpulist(text):
    cpus = []
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def case_numa_binding_gpu():
    # The real /sys of a GPU node: each worker's affinity is its GPU's NUMA node (read here independently)
    # intersected with ours. Skips (77) without an NVIDIA GPU.
    pci = "/sys/bus/pci/devices"
    def read(path):
        with open(path) as f:
            return f.read().strip()
    gpus = sorted(d for d in os.listdir(pci) if read(f"{pci}/{d}/vendor") == "0x10de" and
                  read(f"{pci}/{d}/class").startswith("0x03"))
    if not gpus:
        print("skip: no NVIDIA GPU in /sys/bus/pci/devices")
        sys.exit(77)
    env = dict(ENV)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    n = min(len(gpus), 2)
    p = run("--nproc-per-node", str(n), env=env)
    check(p.returncode == 0, f"rc {p.returncode}", p)
    allowed = set(os.sched_getaffinity(0))
    for r in range(n):
        node = int(read(f"{pci}/{gpus[r]}/numa_node"))
        near = cpulist(read(f"/sys/devices/system/node/node{node}/cpulist")) if node >= 0 else \
            cpulist(read(f"{pci}/{gpus[r]}/local_cpulist"))
        want = sorted(allowed & set(near)) or sorted(allowed)
        got = records("env")[(r, 0)]["cpus"]
        check(got == want, f"rank {r} (GPU {gpus[r]}, node {node}): cpus {got}, expected {want}", p)
        first = [l for l in p.stderr.splitlines() if l.startswith(f"[rank {r}]:")][0]
        check(f"GPU {r} ({gpus[r]}" in first and "(--numa-binding node)" in first, f"first line {first!r}", p)
    print(f"ok: {n} worker(s) pinned to their GPU's NUMA node by default: " +
          "; ".join(l for l in p.stderr.splitlines() if "--numa-binding node" in l))


def case_logs():
    logdir = os.path.join(OUT, "logs")
    p = run("--nproc-per-node", "2", "--log-dir", logdir, "--run-id", "job1", "--local-ranks-filter", "1",
            mode="fail", args=(1, 4, 1), env=dict(ENV, PET_MAX_RESTARTS="1"))
    check(p.returncode == 0, f"rc {p.returncode}", p)
    for a in range(2):
        for r in range(2):
            with open(f"{logdir}/job1/attempt_{a}/{r}/stdout.log") as f:
                check(f.read() == f"worker {r} attempt {a}\n", f"stdout.log of rank {r} attempt {a}")
    with open(f"{logdir}/job1/attempt_0/1/stderr.log") as f:
        check("boom" in f.read(), "stderr.log")
    check("[rank 0]:" not in p.stdout and "[rank 1]: worker 1 attempt 1" in p.stdout, "filter", p)
    print("ok: per-rank per-attempt log files, PET_MAX_RESTARTS honoured, --local-ranks-filter")


def one_line_error(p, what):
    check(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and what in p.stderr, what, p)


def case_bad_endpoint():
    def launch(*flags, env=None):
        return subprocess.run([MESHRUN, *flags, "--no-python", "true"], capture_output=True, text=True,
                              env=env or ENV, timeout=60)
    one_line_error(launch("--rdzv-endpoint", "127.0.0.1:99999"), "'99999' is not a TCP port (0..65535")
    one_line_error(launch("--rdzv-endpoint", ":::::"), "--rdzv-endpoint ':::::' is not valid")
    one_line_error(launch("--master-port", "65536"), "--master-port '65536' is not a TCP port")
    one_line_error(launch(env=dict(ENV, PET_MASTER_PORT="99999")), "PET_MASTER_PORT '99999' is not a TCP port")
    one_line_error(launch("--nproc-per-node", "2", "--local-ranks-filter", "5"),
                   "local rank 5 does not exist; with 2 worker(s) per node the local ranks are 0..1")
    print("ok: bad ports, bad endpoint and a filter naming no worker are one line and exit 2")


def case_root_cause_first_in_time():
    # Rank 1 fails (exit 2) but is slow to exit; rank 0 dies of the broken pipe (exit 1) and is reaped first.
    p = run("--nproc-per-node", "2", "--shutdown-timeout", "5", mode="cascade")
    check(p.returncode == 2, f"rc {p.returncode}, expected rank 1's 2", p)
    for s in ["rank       : 1", "rng_state.1: truncated", "rank 0 also failed (exit code 1): a consequence, its peer "
              "vanished", "meshrun exits with 2"]:
        check(s in p.stderr, f"summary lacks {s!r}", p)
    print(p.stderr)


def case_tee_over_redirect():
    logdir = os.path.join(OUT, "logs")
    p = run("--nproc-per-node", "2", "--redirects", "3", "--tee", "3", "--log-dir", logdir, "--run-id", "t",
            mode="fail", args=(9, 1, 0))
    check(p.returncode == 0, f"rc {p.returncode}", p)
    for r in range(2):
        check(f"[rank {r}]: worker {r} attempt 0" in p.stdout, f"rank {r} not on the console", p)
        with open(f"{logdir}/t/attempt_0/{r}/stdout.log") as f:
            check(f.read() == f"worker {r} attempt 0\n", f"stdout.log of rank {r}")
    p = run("--nproc-per-node", "2", "--redirects", "3", "--log-dir", logdir, "--run-id", "r", mode="fail",
            args=(9, 1, 0))
    check(p.returncode == 0 and "[rank" not in p.stdout, "redirect alone still shows the console", p)
    print("ok: --tee wins over --redirects: console and files")


def scratch_dirs(tmp):
    return sorted(d for d in os.listdir(tmp) if d.startswith("meshrun-")) if os.path.isdir(tmp) else []


def case_scratch_swept():
    # A SIGKILLed meshrun strands its scratch directory; the next meshrun removes it.
    tmp = os.path.join(OUT, "tmp")
    os.makedirs(tmp)
    env = dict(ENV, TMPDIR=tmp)
    m = subprocess.Popen([MESHRUN, "--standalone", "--nproc-per-node", "1", WORKER, "hang", OUT],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: len(records("ready")) == 1, what="worker ready")
    pid = records("env")[(0, 0)]["pid"]
    stranded = scratch_dirs(tmp)
    check(len(stranded) == 1, f"scratch dirs {stranded}")
    m.kill()
    m.wait()
    wait_for(lambda: not alive(pid), timeout=10, what="worker to die with meshrun")
    check(scratch_dirs(tmp) == stranded, "nothing stranded: the test proves nothing")
    p = run("--nproc-per-node", "1", env=env)
    check(p.returncode == 0, f"rc {p.returncode}", p)
    check(scratch_dirs(tmp) == [], f"left behind: {scratch_dirs(tmp)}", p)
    check("removed 1 scratch directory" in p.stderr, "no word on the sweep", p)
    print("ok: the scratch directory of a SIGKILLed meshrun is removed by the next one")


def case_error_file_kept():
    # Without --log-dir the error file the summary names lives in the scratch directory: it must outlive meshrun.
    tmp = os.path.join(OUT, "tmp")
    os.makedirs(tmp)
    p = run("--nproc-per-node", "2", mode="errorfile", env=dict(ENV, TMPDIR=tmp))
    check(p.returncode == 3, f"rc {p.returncode}", p)
    path = [l.split(":", 1)[1].strip() for l in p.stderr.splitlines() if l.strip().startswith("error file :")]
    check(len(path) == 1 and os.path.isfile(path[0]), f"error file {path} gone", p)
    root = os.path.dirname(os.path.dirname(os.path.dirname(path[0])))
    check(os.listdir(root) == ["attempt_0"] and os.listdir(os.path.join(root, "attempt_0")) == ["0"],
          f"more than the error file kept: {list(os.walk(root))}", p)
    print(f"ok: {path[0]} kept, the rest of the scratch removed")


def case_torchrun_flags():
    p = run("--nproc-per-node", "2", "--start-method", "fork", "--logs-specs", "custom", "--rdzv-conf",
            "join_timeout=30,read_timeout=5", "--local-addr", "127.0.0.1", "--log-line-prefix-template",
            "<${rank}|${local_rank}> ", "--virtual-local-rank", "--run-path", "--no-python", mode="fail",
            args=(9, 1, 0), env=dict(ENV, CUDA_VISIBLE_DEVICES="3,5"))
    check(p.returncode == 0, f"rc {p.returncode}", p)
    for r in range(2):
        check(f"<{r}|{r}> worker {r} attempt 0" in p.stdout, f"prefix template for rank {r}", p)
        e = records("env")[(r, 0)]
        check(e["LOCAL_RANK"] == "0" and e["CUDA_VISIBLE_DEVICES"] == ["3", "5"][r], f"virtual local rank {e}", p)
    for s in ["--start-method fork ignored", "--logs-specs custom ignored", "--rdzv-conf read_timeout ignored",
              "--run-path wins over --no-python"]:
        check(s in p.stderr, f"no line {s!r}", p)
    h = subprocess.run([MESHRUN, "--help"], capture_output=True, text=True)
    for flag in ["--run-path", "--start-method", "--rdzv-conf", "--log-line-prefix-template", "--local-addr",
                 "--logs-specs", "--virtual-local-rank"]:
        check(flag in h.stdout, f"--help lacks {flag}", h)
    print("ok: torchrun's flags accepted, honoured or named as ignored, and in --help")


CASES = {
    "env_1": lambda: case_env(1), "env_2": lambda: case_env(2), "env_4": lambda: case_env(4),
    "exit_code": case_exit_code, "signal_death": case_signal_death, "error_file": case_error_file,
    "restart_recovers": case_restart_recovers, "restart_exhausted": case_restart_exhausted,
    "sigterm_forwarded": case_sigterm_forwarded, "sigterm_ignored": case_sigterm_ignored,
    "no_orphans": case_no_orphans, "gloo_allreduce": case_gloo_allreduce, "bad_input": case_bad_input,
    "logs": case_logs, "multinode_restart": case_multinode_restart, "multinode_fail": case_multinode_fail,
    "multinode_gloo": case_multinode_gloo, "multinode_invalid_input": case_multinode_invalid_input,
    "multinode_stranger_exit0": case_multinode_stranger_exit0,
    "multinode_stranger_malformed": case_multinode_stranger_malformed,
    "invalid_input_no_restart": case_invalid_input_no_restart, "invalid_input_meshtrain": case_invalid_input_meshtrain,
    "unreachable_master": case_unreachable_master,
    "numa_binding": case_numa_binding, "numa_binding_gpu": case_numa_binding_gpu,
    "multinode_stop": case_multinode_stop, "multinode_forged_cause": case_multinode_forged_cause,
    "multinode_bad_token": case_multinode_bad_token, "multinode_bind": case_multinode_bind,
    "token_file": case_token_file, "store_lost": case_store_lost, "preemption_notice": case_preemption_notice,
    "bad_endpoint": case_bad_endpoint, "root_cause_first_in_time": case_root_cause_first_in_time,
    "tee_over_redirect": case_tee_over_redirect, "scratch_swept": case_scratch_swept,
    "error_file_kept": case_error_file_kept, "torchrun_flags": case_torchrun_flags,
}

if __name__ == "__main__":
    try:
        CASES[CASE]()
    finally:
        subprocess.run(["rm", "-rf", OUT])
