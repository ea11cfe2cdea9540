#!/usr/bin/env python3
"""scripts/slurm/*.sbatch run as sbatch runs them, against a fake `srun` and `scontrol` that record their arguments.

The fakes live on PATH in a temp dir; the job's SLURM_* variables are set as sbatch sets them, and the scripts run
from another directory than the repository (relative binary paths would not be found there).
(a) every script passes srun --cpus-per-task (SLURM_CPUS_PER_TASK, else SLURM_CPUS_ON_NODE: since Slurm 22.05
    srun does not inherit it) and meshrun by absolute path ($MESHTRAIN_BIN, or build/bin of the submit
    directory when the script runs as sbatch's spool copy); a MESHTRAIN_BIN without meshrun is one line, exit 2.
(b) preemptible.sbatch: SIGTERM or SIGUSR1 to the batch script reaches srun, then `scontrol requeue <job id>`
    and exit 0; a failed requeue exits non-zero; a run that ends on its own is not requeued.
Usage: slurm_test.py SOURCE_DIR BIN_DIR (BIN_DIR holds meshrun and meshtrain)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

src, bin_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SLURM = os.path.join(src, "scripts", "slurm")
MESHRUN = os.path.realpath(os.path.join(bin_dir, "meshrun"))
PIPELINE_CONFIG = os.path.join(src, "configs", "node8", "llama3.1-70b-pp2-tp8-2node.yaml")
failures = []

FAKE_SRUN = """#!/bin/bash
# Records its arguments; with FAKE_SRUN_WAIT it stays up until a signal and exits 128 + its number.
trap 'echo USR1 > "$FAKE_LOG/srun.signal"; exit 138' USR1
trap 'echo TERM > "$FAKE_LOG/srun.signal"; exit 143' TERM
printf '%s\\n' "$@" > "$FAKE_LOG/srun.args"
echo $$ >> "$FAKE_LOG/srun.pids"
[ -n "${FAKE_SRUN_WAIT:-}" ] || exit 0
touch "$FAKE_LOG/srun.started"
for _ in $(seq 1200); do sleep 0.05; done
exit 99
"""
FAKE_SCONTROL = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/scontrol.args"
exit "${FAKE_SCONTROL_RC:-0}"
"""


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def read_lines(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().splitlines()


class Job:
    """One sbatch job's world: a fresh temp dir (fake bin, logs, submit dir), its env, the recorded calls."""

    def __init__(self, root, name, **slurm):
        self.dir = os.path.join(root, name)
        self.log = os.path.join(self.dir, "log")
        fake_bin = os.path.join(self.dir, "fakebin")
        os.makedirs(self.log)
        os.makedirs(fake_bin)
        write_exe(os.path.join(fake_bin, "srun"), FAKE_SRUN)
        write_exe(os.path.join(fake_bin, "scontrol"), FAKE_SCONTROL)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MESHTRAIN_", "PET_"))}
        self.env.update(PATH=fake_bin + os.pathsep + os.environ["PATH"], FAKE_LOG=self.log, MESHTRAIN_BIN=bin_dir,
                        SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_JOB_NODELIST="node[01-02]",
                        SLURM_SUBMIT_DIR=self.dir, SLURM_CPUS_PER_TASK="12", SLURM_CPUS_ON_NODE="32")
        for k, v in slurm.items():
            if v is None:
                self.env.pop(k, None)
            else:
                self.env[k] = v

    def popen(self, script, *args):
        return subprocess.Popen(["bash", script, *args], cwd=self.dir, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, script, *args):
        p = self.popen(script, *args)
        out, err = p.communicate(timeout=120)
        return p.returncode, out, err

    def srun_args(self):
        return read_lines(os.path.join(self.log, "srun.args"))

    def scontrol_args(self):
        return read_lines(os.path.join(self.log, "scontrol.args"))


def check_srun(job, name, cpus, what):
    args = job.srun_args()
    check(args is not None, f"{what}: srun was called")
    if args is None:
        return
    check(f"--cpus-per-task={cpus}" in args, f"{what}: srun --cpus-per-task={cpus} (got {args})")
    runs = [a for a in args if os.path.basename(a) == "meshrun"]
    check(len(runs) == 1 and runs[0] == MESHRUN, f"{what}: srun starts {MESHRUN} by absolute path (got {runs})")


def scripts_pass_cpus_and_absolute_paths(root):
    for script in ("single_node", "multi_node", "preemptible", "pipeline"):
        path = os.path.join(SLURM, script + ".sbatch")
        config = PIPELINE_CONFIG if script == "pipeline" else "cfg.yaml"
        job = Job(root, script)
        rc, out, err = job.run(path, config, "--set", "data.train=synthetic")
        check(rc == 0, f"{script}: exit 0 (got {rc}, stderr={err.strip()!r})")
        check_srun(job, script, 12, f"{script} with SLURM_CPUS_PER_TASK=12")
    job = Job(root, "node_cpus", SLURM_CPUS_PER_TASK=None)
    job.run(os.path.join(SLURM, "single_node.sbatch"), "cfg.yaml")
    check_srun(job, "single_node", 32, "single_node without SLURM_CPUS_PER_TASK: the node's CPUs")
    # sbatch runs a copy of the script from its spool dir: meshrun is found under the submit directory.
    job = Job(root, "spool", MESHTRAIN_BIN=None)
    os.makedirs(os.path.join(job.dir, "build"))
    os.symlink(bin_dir, os.path.join(job.dir, "build", "bin"))
    spool = os.path.join(job.dir, "spool")
    os.makedirs(spool)
    shutil.copy(os.path.join(SLURM, "multi_node.sbatch"), os.path.join(spool, "slurm_script"))
    job.run(os.path.join(spool, "slurm_script"), "cfg.yaml")
    check_srun(job, "multi_node", 12, "spool copy: meshrun from the submit directory")
    job = Job(root, "no_bin", MESHTRAIN_BIN=os.path.join(root, "nowhere"))
    rc, out, err = job.run(os.path.join(SLURM, "single_node.sbatch"), "cfg.yaml")
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 1 and "MESHTRAIN_BIN" in lines[0] and job.srun_args() is None,
          f"MESHTRAIN_BIN without meshrun: one line, exit 2, no srun (got rc={rc}, stderr={err.strip()!r})")


def preempt(root, name, sig, scontrol_rc="0"):
    """Starts preemptible.sbatch, waits until srun runs, sends `sig`; returns (job, exit code, stderr)."""
    job = Job(root, name, FAKE_SRUN_WAIT="1", FAKE_SCONTROL_RC=scontrol_rc)
    p = job.popen(os.path.join(SLURM, "preemptible.sbatch"), "cfg.yaml")
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(job.log, "srun.started")) and time.monotonic() < deadline:
        time.sleep(0.02)
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return job, p.returncode, err


def preemption_requeues(root):
    for sig, name in ((signal.SIGTERM, "TERM"), (signal.SIGUSR1, "USR1")):
        job, rc, err = preempt(root, "preempt_" + name, sig)
        got = read_lines(os.path.join(job.log, "srun.signal"))
        check(got == [name], f"SIG{name} to the batch script reaches srun (got {got})")
        check(job.scontrol_args() == ["requeue", "4242"],
              f"SIG{name}: scontrol requeue 4242 (got {job.scontrol_args()})")
        check(rc == 0, f"SIG{name}: exit 0 once requeued (got {rc}, stderr={err.strip()!r})")
    job, rc, err = preempt(root, "requeue_fails", signal.SIGTERM, scontrol_rc="1")
    check(rc != 0 and "requeue 4242 failed" in err, f"a failed requeue exits non-zero (got {rc}, {err.strip()!r})")
    job = Job(root, "no_signal")
    rc, out, err = job.run(os.path.join(SLURM, "preemptible.sbatch"), "cfg.yaml")
    check(rc == 0 and job.scontrol_args() is None, f"a run that ends on its own: exit 0, no requeue (got {rc})")


root = tempfile.mkdtemp(prefix="meshtrain_slurm_")
try:
    scripts_pass_cpus_and_absolute_paths(root)
    preemption_requeues(root)
finally:
    # A script that dies of the signal (instead of passing it on) leaves its fake srun behind: end it.
    for pid_file in (os.path.join(d, "log", "srun.pids") for d in os.listdir(root)):
        for pid in read_lines(os.path.join(root, pid_file)) or []:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    ours = b"fakebin/srun" in f.read()
                if ours:
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
    shutil.rmtree(root, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
