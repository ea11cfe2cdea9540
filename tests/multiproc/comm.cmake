# Multi-process tests of the CPU communicator (tests/multiproc/comm/): real processes started by meshrun with
# --nproc-per-node 2, 3 and 4, plus by hand (run_local.sh: rank 0 hosts the store, no launcher) and a single
# process with no environment at all.
add_executable(comm_worker ${CMAKE_CURRENT_LIST_DIR}/comm/comm_worker.cpp)
target_link_libraries(comm_worker PRIVATE meshtrain_comm)
meshtrain_warnings(comm_worker)
meshtrain_use_torch(comm_worker)

foreach(n 2 3 4)
  meshtrain_add_test(multiproc comm meshrun_np${n}
    COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node ${n} --no-python ${MESHTRAIN_BIN}/comm_worker
    PROPERTIES TIMEOUT 300)
endforeach()
meshtrain_add_test(multiproc comm meshrun_timeout
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 3 --no-python ${MESHTRAIN_BIN}/comm_worker
          --timeout-test
  PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "timed out after 2000 ms waiting for rank\\(s\\) 2")

# By hand over TCP only (MESHTRAIN_CPU_COMM_UNIX=0), so the TCP path stays covered where everything else on one
# host takes Unix sockets.
meshtrain_add_test(multiproc comm byhand_np3
  COMMAND ${CMAKE_COMMAND} -E env MESHTRAIN_CPU_COMM_UNIX=0
          ${CMAKE_CURRENT_LIST_DIR}/comm/run_local.sh 3 ${MESHTRAIN_BIN}/comm_worker
  PROPERTIES TIMEOUT 300)
meshtrain_add_test(multiproc comm byhand_timeout
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/comm/run_local.sh 3 ${MESHTRAIN_BIN}/comm_worker --timeout-test
  PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "timed out after 2000 ms waiting for rank\\(s\\) 2")
meshtrain_add_test(multiproc comm single_process COMMAND ${MESHTRAIN_BIN}/comm_worker PROPERTIES TIMEOUT 120)

# `meshtrain bench comm` end to end (small sizes): the table and JSON come out of a real 2-rank run.
meshtrain_add_test(multiproc comm bench_smoke
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 2 --no-python ${MESHTRAIN_BIN}/meshtrain
          bench comm --max-bytes 64K --min-seconds 0.01 --json ${CMAKE_CURRENT_BINARY_DIR}/bench_smoke.json
  PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "all_reduce.*65536")

# The same checks with desync detection on (an extra handshake before every op).
meshtrain_add_test(multiproc comm meshrun_np3_checked
  COMMAND ${CMAKE_COMMAND} -E env MESHTRAIN_CPU_COMM_CHECK=1
          ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 3 --no-python ${MESHTRAIN_BIN}/comm_worker
  PROPERTIES TIMEOUT 300)
