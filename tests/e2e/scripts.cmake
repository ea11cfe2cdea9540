# Tier 4: the Python tools scripts/plot_metrics.py and scripts/prepare_data.py (no binaries needed). Skipped
# (exit code 77) where the venv lacks matplotlib or tokenizers (scripts/setup.sh installs them when it can).
meshtrain_add_test(e2e data scripts
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/scripts_test.py ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# scripts/setup.sh when the venv cannot be made: a disk too small (the required bytes overridden through
# MESHTRAIN_SETUP_NEED_BYTES) and pip failing (an index nothing listens on): one line each, what was needed or
# pip's own error (tests/e2e/setup_test.py; no network, nothing large written).
meshtrain_add_test(e2e core setup_errors
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/setup_test.py ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# scripts/bench/kernel_kinds.py (GPU time a step by kind of kernel, traces side by side) on a hand-made trace.
meshtrain_add_test(e2e train kernel_kinds
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/kernel_kinds_test.py ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 120)
# scripts/slurm/*.sbatch against a fake srun and scontrol on PATH that record their arguments: srun gets
# --cpus-per-task and meshrun by absolute path; SIGTERM/SIGUSR1 to preemptible.sbatch reaches srun and ends in
# `scontrol requeue <job id>` and exit 0, a failed requeue in a non-zero exit (tests/e2e/slurm_test.py).
meshtrain_add_test(e2e launch slurm_scripts
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/slurm_test.py ${CMAKE_SOURCE_DIR} ${MESHTRAIN_BIN}
  PROPERTIES TIMEOUT 300)
