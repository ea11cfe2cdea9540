# meshrun's multi-process tests: the real launcher running real worker processes (tests/multiproc/launch/
# worker.py, a PyTorch gloo script); each case of launch_test.py is one ctest.
set(_mt_launch_cases env_1 env_2 env_4 exit_code signal_death error_file restart_recovers restart_exhausted
    sigterm_forwarded sigterm_ignored no_orphans gloo_allreduce bad_input logs multinode_restart multinode_fail
    multinode_gloo multinode_stop unreachable_master store_lost numa_binding preemption_notice bad_endpoint
    root_cause_first_in_time tee_over_redirect scratch_swept error_file_kept torchrun_flags
    invalid_input_no_restart invalid_input_meshtrain multinode_invalid_input multinode_stranger_exit0
    multinode_stranger_malformed multinode_forged_cause multinode_bad_token multinode_bind token_file)
foreach(case IN LISTS _mt_launch_cases)
  meshtrain_add_test(multiproc launch ${case}
    COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/launch_test.py
            $<TARGET_FILE:meshrun> ${MESHTRAIN_TEST_PYTHON} ${case}
    PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()

# Default NUMA binding on a real GPU node's /sys (skips with 77 elsewhere).
meshtrain_add_test(multiproc launch numa_binding_gpu
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/launch_test.py
          $<TARGET_FILE:meshrun> ${MESHTRAIN_TEST_PYTHON} numa_binding_gpu
  LABELS gpu PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# The other direction of the contract: our worker under torchrun (from the venv's PyTorch wheel), CPU backend.
meshtrain_add_test(multiproc launch meshtrain_under_torchrun
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/torchrun_meshtrain_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR} ${MESHTRAIN_TEST_PYTHON}
  PROPERTIES TIMEOUT 600)

# The store against seeded garbage: one line per bad peer, no stack trace, still serving (store_fuzz_test.py).
meshtrain_add_test(multiproc launch store_fuzz
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/store_fuzz_test.py
          $<TARGET_FILE:meshrun-store> 1234
  PROPERTIES TIMEOUT 180)

# Faults of a two-node `meshtrain train` job, each node in its own network namespace joined by veth pairs and a
# bridge (tests/multiproc/launch/netns_cluster.py, netns_faults_test.py; docs/resilience.md): one ctest per fault,
# each against a reference run made in the same test. Skipped (77) where namespaces cannot be made (no root, no
# `ip`). scripts/chaos_netns.py draws random faults at random steps over the same harness (not in CI).
foreach(case worker_kill worker_kill_group node_kill node_lost partition long_partition freeze store_lost store_replaced disk_full memory_worker_kill
             memory_node_kill elastic_shrink elastic_join)
  meshtrain_add_test(multiproc launch netns_${case}
    COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/netns_faults_test.py
            ${MESHTRAIN_BIN} ${case}
    PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# The harness's reading of a run (Job.recovery) over recorded lines, a step line racing the fault among them.
meshtrain_add_test(multiproc launch netns_recovery_reading
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launch/netns_job_test.py
  PROPERTIES TIMEOUT 60)
