#!/usr/bin/env python3
"""`meshtrain topo` through the real binary: fixtures print the matrix, cliques and placement; a tp that cannot
sit inside an NVLink clique is one line on stderr naming tp and the largest clique, exit 2, unless
--allow-slow-tp; --json parses; on this machine (GPUs or not) it exits 0 and says what it found.
Usage: topo_cli_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import subprocess
import sys

bin_dir, src = sys.argv[1], sys.argv[2]
meshtrain = os.path.join(bin_dir, "meshtrain")
fixtures = os.path.join(src, "tests", "fixtures", "topology")
failures = []


def run(*args):
    p = subprocess.run([meshtrain, "topo", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def expect(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        print(detail)


def fx(name):
    return os.path.join(fixtures, name + ".json")


rc, out, err = run("--fixture", fx("dgx_a100"), "--tp", "4")
expect("dgx_a100 tp 4 places", rc == 0 and "NV12" in out and "NVLink cliques: {0,1,2,3,4,5,6,7}" in out
       and "local rank 5 → GPU 5" in out and "48-63,176-191" in out, out + err)

rc, out, err = run("--fixture", fx("pcie_nvlink_bridge_pairs"), "--tp", "4")
lines = [l for l in err.splitlines() if l.strip()]
expect("bridge pairs tp 4 is one clear error", rc == 2 and len(lines) == 1 and "parallel.tp = 4" in err
       and "largest NVLink clique has 2 GPU(s)" in err and "allow_slow_tp" in err and "NV4" in out, out + err)

rc, out, err = run("--fixture", fx("pcie_nvlink_bridge_pairs"), "--tp", "4", "--allow-slow-tp")
expect("--allow-slow-tp proceeds", rc == 0 and "proceeding over PCIe" in out, out + err)

rc, out, err = run("--fixture", fx("hgx_h100"), "--tp", "2", "--json")
try:
    j = json.loads(out)
    ok = j["placement"]["gpu_of_local_rank"] == list(range(8)) and j["placement"]["tp_on_nvlink"] \
        and j["topology"]["nvlink"][0][1] == 18
except Exception as e:  # noqa: BLE001 - any parse failure is the failure reported
    ok = False
    err += repr(e)
expect("--json parses", rc == 0 and ok, out + err)

rc, out, err = run(os.path.join(src, "configs", "quickstart.yaml"), "--fixture", fx("pcie_only_2socket"),
                   "--set", "parallel.tp=2")
expect("config's tp on a PCIe-only board fails", rc == 2 and "parallel.tp = 2" in err
       and "largest NVLink clique has 1 GPU(s)" in err, out + err)

rc, out, err = run("--fixture", fx("dgx_a100"), "--tp", "3")
expect("bad mesh arithmetic", rc == 2 and "world size 8 is not divisible by pp(1) × fsdp(1) × tp(3) = 3" in err,
       out + err)

rc, out, err = run()
expect("this machine", rc == 0 and ("No NVIDIA GPU" in out or "NVLink cliques" in out), out + err)

rc, out, err = run("--help")
expect("--help", rc == 0 and "--fixture" in out and "--allow-slow-tp" in out, out + err)

sys.exit(1 if failures else 0)
