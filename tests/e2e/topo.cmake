# `meshtrain topo` on the topology fixtures (no GPU needed): matrix, cliques, placement, errors, JSON.
add_test(NAME e2e.topo_cli
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/topo_cli_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.topo_cli PROPERTIES LABELS "e2e;comm" TIMEOUT 300)
# On a GPU machine: the NVML path (dlopen), checked against nvidia-smi; skipped (77) without a GPU.
add_test(NAME e2e.topo_gpu
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/topo_gpu_test.py ${MESHTRAIN_BIN})
set_tests_properties(e2e.topo_gpu PROPERTIES LABELS "e2e;comm;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
