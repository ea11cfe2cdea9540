# The rendezvous store against bounded, seeded garbage (docs/launcher.md "The rendezvous store"): a real
# meshrun-store serving a store on loopback and its relay, then one connection per kind of bad peer. Asserts
# that each bad peer gets exactly one line naming its address on the store's console and its connection
# closed, that nothing else is printed (no stack trace, no c10::Error, no frames), and that well-behaved
# clients -- a launcher speaking the protocol, PyTorch's own TCPStore through the relay -- are served after.
# usage: store_fuzz_test.py MESHRUN_STORE [SEED]
import atexit
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

STORE_EXE = sys.argv[1]
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
TOKEN = "fuzz-test-token-0123456789abcdef"
IDLE_SOCKETS = 200   # many idle connections, each closed after the HELLO timeout
HELLO_TIMEOUT_MS = 1500
rng = random.Random(SEED)

HELLO, VALIDATE, SET, GET, ADD, WAIT, MULTI_SET, PING = 0xA5, 0, 1, 3, 4, 6, 11, 13
MAGIC = 0x3C85F7CE


def s(b):
    return struct.pack("=Q", len(b)) + b


def hello(token=TOKEN, role=1, node=0):
    return struct.pack("=B", HELLO) + s(token.encode()) + struct.pack("=Bi", role, node)


def validate(magic=MAGIC):
    return struct.pack("=BI", VALIDATE, magic)


def authed(role=1, node=0):
    return hello(role=role, node=node) + validate()


def check(cond, msg, log=""):
    if not cond:
        print("--- store console\n" + log)
        raise AssertionError(msg)


def wait_for(pred, timeout=90):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def closed_by_server(sock, timeout=30):
    """True once the server closed the connection (EOF or reset); reads and drops any answer bytes."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# The store on 127.0.0.1 (a 2-node job) and node 0's relay, as meshrun starts them.
listener, relay = socket.socket(), socket.socket()
for sk in (listener, relay):
    sk.bind(("127.0.0.1", 0))
    sk.listen(4096)
port, relay_port = listener.getsockname()[1], relay.getsockname()[1]
# The store writes its console through its own O_APPEND descriptor and the test reads it through another: one
# shared descriptor would share its offset, and a line the store writes between the test's seek and read
# would overwrite the start of the console.
workdir = tempfile.TemporaryDirectory()
console_path = os.path.join(workdir.name, "store.log")
console = open(console_path, "ab")
store = subprocess.Popen([STORE_EXE, "--store-fd", str(listener.fileno()), "--nnodes", "2", "--relay-fd",
                          str(relay.fileno()), "--upstream", "127.0.0.1", "--port", str(port), "--node", "0",
                          "--hello-timeout-ms", str(HELLO_TIMEOUT_MS), "--request-timeout-ms", "1500"],
                         pass_fds=[listener.fileno(), relay.fileno()], stdout=console, stderr=console,
                         env=dict(os.environ, MESHRUN_RDZV_TOKEN=TOKEN))
atexit.register(store.kill)  # a failed check exits early: the store must not outlive the test
listener.close()
relay.close()
console.close()


def read_console():
    with open(console_path, encoding="utf-8", errors="replace") as f:
        return f.read()


def connect():
    return socket.create_connection(("127.0.0.1", port), timeout=30)


# A launcher connection that stays open through the whole test.
launcher = connect()
launcher.sendall(hello(role=0, node=0))
check(launcher.recv(1) == b"\x5a", "the launcher's HELLO was not accepted", read_console())
launcher.sendall(validate() + struct.pack("=B", SET) + s(b"/meshrun/before") + s(b"1"))

# The kinds of garbage; each is the whole of what one bad peer sends. Sizes and bytes come from the seed.
garbage = {
    "unknown query type": bytes([rng.choice([q for q in range(19, 256) if q != HELLO])]),
    "random bytes": bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))),
    "stock client without token": validate() + struct.pack("=BI", PING, 7),
    "wrong token": hello(token="x" * len(TOKEN)),
    "token length 2^63": struct.pack("=BQ", HELLO, 1 << 63),
    "unknown role": struct.pack("=B", HELLO) + s(TOKEN.encode()) + struct.pack("=Bi", 9, 0),
    "node out of range": hello(node=7),
    "bad magic": hello() + validate(0xDEADBEEF),
    "request before VALIDATE": hello() + struct.pack("=B", GET) + s(b"k"),
    "key length 2^63": authed() + struct.pack("=BQ", SET, 1 << 63),
    "value length 2^62": authed() + struct.pack("=B", SET) + s(b"k") + struct.pack("=Q", 1 << 62),
    "key count 2^40 (WAIT)": authed() + struct.pack("=BQ", WAIT, 1 << 40),
    "key count 2^40 (MULTI_SET)": authed() + struct.pack("=BQ", MULTI_SET, 1 << 40),
    "non-numeric ADD": authed() + struct.pack("=B", SET) + s(b"/w/text") + s(b"abc") + struct.pack("=B", ADD) +
                       s(b"/w/text") + struct.pack("=q", 1),
    "worker writes a launcher key": authed() + struct.pack("=B", ADD) + s(b"/meshrun/fail/0") + struct.pack("=q", 1),
    "second HELLO": authed() + hello(),
}
bad = {}  # kind -> socket
for kind, payload in garbage.items():
    sk = connect()
    sk.sendall(payload)
    bad[kind] = sk

# Truncated: a request cut short, then the connection closed by the peer.
sk = connect()
sk.sendall(authed() + struct.pack("=B", SET) + s(b"/w/k")[: rng.randint(1, 8)])
truncated_port = sk.getsockname()[1]
time.sleep(0.2)
sk.close()

# Slow: an authenticated client that sends half a request and stalls past the request timeout; and one
# that dribbles its HELLO a byte at a time, slower than the HELLO timeout allows.
slow = connect()
slow.sendall(authed() + struct.pack("=B", SET) + s(b"/w/slow")[:5])
bad["slow request"] = slow
dribble = connect()
bad["slow HELLO"] = dribble
for b in hello()[:6]:
    try:
        dribble.sendall(bytes([b]))
    except (ConnectionResetError, BrokenPipeError):
        break  # a loaded machine ran past the HELLO timeout between two bytes: the store has closed it already
    time.sleep(0.3)

# Many idle sockets that never send a byte.
idle = [connect() for _ in range(IDLE_SOCKETS)]

ports = {kind: sk.getsockname()[1] for kind, sk in bad.items()}
for kind, sk in bad.items():
    check(closed_by_server(sk), f"{kind}: the store did not close the connection", read_console())
for sk in idle:
    check(closed_by_server(sk), "an idle connection was not closed", read_console())
idle_ports = [sk.getsockname()[1] for sk in idle]
n_bad = len(bad) + 1 + len(idle)
got_all = wait_for(lambda: len(read_console().strip().splitlines()) >= n_bad)
check(got_all, f"fewer than {n_bad} lines on the console (store exit status {store.poll()})", read_console())
time.sleep(0.5)  # nothing more may follow
log = read_console()
lines = log.strip().splitlines()

for bad_text in ("c10::Error", "frame #", "Exception raised", "Traceback", "terminate called"):
    check(bad_text not in log, f"{bad_text!r} on the store's console", log)
check(len(lines) == n_bad, f"{len(lines)} lines for {n_bad} bad peers", log)
for l in lines:
    check(l.startswith("meshrun-store: closed "), f"unexpected line: {l}", log)
for kind, p in ports.items():
    mine = [l for l in lines if f"127.0.0.1:{p})" in l or f"127.0.0.1:{p}:" in l]
    check(len(mine) == 1, f"{kind}: {len(mine)} lines name its peer 127.0.0.1:{p}", log)
    print(f"  {kind}: {mine[0]}")
check(sum(f"127.0.0.1:{truncated_port}" in l for l in lines) == 1, "truncated: not one line", log)
check(sum("no HELLO within" in l for l in lines) == IDLE_SOCKETS + 1, "idle sockets: not one line each", log)
check(store.poll() is None, "the store exited", log)

# Well-behaved clients are still served: the long-lived launcher connection, a new one, and PyTorch's client
# through the relay.
launcher.sendall(struct.pack("=B", ADD) + s(b"/meshrun/n") + struct.pack("=q", 2))
check(struct.unpack("=q", launcher.recv(8))[0] == 2, "the launcher's ADD", log)
fresh = connect()
fresh.sendall(authed(role=0, node=1) + struct.pack("=B", WAIT) + struct.pack("=Q", 1) + s(b"/meshrun/before"))
check(fresh.recv(2) == b"\x5a\x00", "a new launcher connection's HELLO and WAIT", read_console())
import torch.distributed as dist  # noqa: E402 -- only the last step needs PyTorch

t = dist.TCPStore("127.0.0.1", relay_port, is_master=False, timeout=timedelta(seconds=30), wait_for_workers=False)
t.set("after", "fuzz")
check(t.get("after") == b"fuzz" and t.add("cnt", 5) == 5, "PyTorch's client through the relay", read_console())
check(len(read_console().strip().splitlines()) == n_bad, "good clients caused lines", read_console())

# The relay takes only the job's user: a connection from another uid is refused in one line (needs root to
# connect as another user; skipped otherwise).
if os.getuid() == 0:
    # Only the lines written from here on: an earlier fuzz connection may have had the same ephemeral port.
    seen = len(read_console())
    other = subprocess.run([sys.executable, "-c", f"""
import encodings.idna, os, socket  # before dropping to uid 65534, which may not read the interpreter's modules
os.setgid(65534); os.setuid(65534)
c = socket.create_connection(("127.0.0.1", {relay_port}), timeout=30)
print(c.getsockname()[1], flush=True)
try:
    got = c.recv(1)
except ConnectionResetError:  # the relay closed it before the peer's FIN reached us: a reset, closed all the same
    got = b""
print("closed" if got == b"" else "open")
"""], capture_output=True, text=True, timeout=60)
    other_port, verdict = other.stdout.split()
    check(verdict == "closed", f"the relay served uid 65534: {other.stdout} {other.stderr}", read_console())
    wait_for(lambda: f"127.0.0.1:{other_port}: refused" in read_console()[seen:])
    line = [l for l in read_console()[seen:].splitlines() if f"127.0.0.1:{other_port}" in l]
    check(line == [f"meshrun-store: relay: 127.0.0.1:{other_port}: refused: its socket belongs to uid 65534, not to "
                   f"the job's uid 0"], f"relay refusal line: {line}", read_console())
    print(f"  another user at the relay: {line[0]}")
store.kill()
store.wait()
print(f"ok: {n_bad} bad peers (seed {SEED}), one line each, no trace; the store still serves launchers and "
      f"PyTorch's client")
