#!/usr/bin/env python3
"""`meshtrain topo --json` on a GPU machine: NVML is found through dlopen, every GPU that nvidia-smi lists is
there with a PCI bus id and CPU affinity, the matrix is consistent and the placement uses each GPU once.
Exit 77 (skipped) where there is no NVIDIA GPU. Usage: topo_gpu_test.py BIN_DIR
"""
import json
import os
import shutil
import subprocess
import sys

meshtrain = os.path.join(sys.argv[1], "meshtrain")
if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
    print("no NVIDIA GPU here: skipped")
    sys.exit(77)
listed = [l for l in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
          if l.startswith("GPU ")]
p = subprocess.run([meshtrain, "topo", "--json"], capture_output=True, text=True, timeout=120)
print(p.stdout[:4000], p.stderr)
assert p.returncode == 0, p.returncode
j = json.loads(p.stdout)
t = j["topology"]
n = len(t["gpus"])
assert t["source"] == "nvml", t["source"]
assert n == len(listed), f"topo found {n} GPUs, nvidia-smi lists {len(listed)}"
for i, g in enumerate(t["gpus"]):
    assert g["pci_bus_id"], f"GPU {i} has no PCI bus id"
    assert g["cpus"], f"GPU {i} has no CPU affinity"
    assert t["nvlink"][i][i] == 0 and t["pcie"][i][i] == "X"
    for k in range(n):
        assert t["nvlink"][i][k] == t["nvlink"][k][i] and t["pcie"][i][k] == t["pcie"][k][i]
placed = j["placement"]["gpu_of_local_rank"]
assert sorted(placed) == sorted(set(placed)) and all(0 <= g < n for g in placed), placed
human = subprocess.run([meshtrain, "topo"], capture_output=True, text=True, timeout=120)
assert human.returncode == 0 and "NVLink cliques" in human.stdout, human.stdout + human.stderr
print(human.stdout)
print("ok")
