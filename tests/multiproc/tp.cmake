# Tensor parallelism vs the single-process model (tests/multiproc/tp/tp_worker.cpp): real processes through
# meshrun on the CPU backend, TP 2 and 4, both families (gpt2: tied embeddings + biases; llama: GQA + untied
# head), with and without sequence parallelism, once under activation checkpointing; and a tensor-parallel size that does not divide the key/value
# heads failing with one clear line.
add_executable(tp_worker ${CMAKE_CURRENT_LIST_DIR}/tp/tp_worker.cpp)
target_link_libraries(tp_worker PRIVATE meshtrain_parallel meshtrain_train)
meshtrain_warnings(tp_worker)
meshtrain_use_torch(tp_worker)
target_include_directories(tp_worker PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)  # support/tiny_model.h

foreach(family gpt2 llama)
  foreach(n 2 4)
    meshtrain_add_test(multiproc parallel tp_${family}_np${n}
      COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node ${n} --no-python ${MESHTRAIN_BIN}/tp_worker
              --family ${family}
      PROPERTIES TIMEOUT 300)
    meshtrain_add_test(multiproc parallel tp_${family}_np${n}_sp
      COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node ${n} --no-python ${MESHTRAIN_BIN}/tp_worker
              --family ${family} --sp
      PROPERTIES TIMEOUT 300)
  endforeach()
endforeach()

# TP then activation checkpointing (parallelize()'s order), with sequence parallelism: collectives re-run in
# the recomputation inside backward.
meshtrain_add_test(multiproc parallel tp_llama_np2_sp_ac
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 2 --no-python ${MESHTRAIN_BIN}/tp_worker
          --family llama --sp --ac
  PROPERTIES TIMEOUT 300)

meshtrain_add_test(multiproc parallel tp_bad_kv_heads
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 4 --no-python ${MESHTRAIN_BIN}/tp_worker
          --family llama --n-kv-head 2
  PROPERTIES TIMEOUT 120
             PASS_REGULAR_EXPRESSION "parallel\\.tp: given 4. valid a divisor of model\\.n_kv_head \\(2\\): 2 % 4 = 2")
