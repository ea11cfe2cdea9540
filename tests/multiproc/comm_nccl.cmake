# NCCL backend on the GPU machine (label gpu; exit 77 = skipped where there is no NCCL build or too few GPUs):
# every op × dtype × size (0, 1, odd, 1000003) with closed-form results, split and concurrent groups, through
# meshrun with one process per GPU; the timeout path (watchdog abort, error naming the missing rank, dumps);
# and `meshtrain bench comm --backend nccl`.
foreach(n 1 2 4 8)
  meshtrain_add_test(multiproc comm nccl_np${n}
    COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node ${n} --no-python ${MESHTRAIN_BIN}/comm_worker
            --backend nccl
    LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()
meshtrain_add_test(multiproc comm nccl_timeout_np2
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 2 --no-python ${MESHTRAIN_BIN}/comm_worker
          --backend nccl --timeout-test
  LABELS gpu
  PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
             PASS_REGULAR_EXPRESSION "expected timeout.*timed out.*ranks that had not arrived: 1"
             SKIP_REGULAR_EXPRESSION "comm_worker: SKIP")
meshtrain_add_test(multiproc comm nccl_bench
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/comm/gpu_bench.sh ${MESHTRAIN_BIN} ${CMAKE_CURRENT_BINARY_DIR}/bench_nccl.json
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
