# `meshtrain topo` on the topology fixtures (no GPU needed): matrix, cliques, placement, errors, JSON.
meshtrain_add_test(e2e hw topo_cli
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/topo_cli_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS comm PROPERTIES TIMEOUT 300)
# On a GPU machine: the NVML path (dlopen), checked against nvidia-smi; skipped (77) without a GPU.
meshtrain_add_test(e2e hw topo_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/topo_gpu_test.py ${MESHTRAIN_BIN}
  LABELS gpu comm PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
