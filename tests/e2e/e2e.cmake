# Tier 4: the quickstart under meshrun (two CPU workers), against the single-process run and a baseline.
add_test(NAME e2e.quickstart
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/quickstart_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.quickstart PROPERTIES LABELS e2e TIMEOUT 900 RUN_SERIAL TRUE)
add_test(NAME e2e.cli_errors
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cli_errors_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.cli_errors PROPERTIES LABELS e2e TIMEOUT 300)
# meshtrain eval against the trainer's validation loss: one process, meshrun 2 ranks, FSDP-sharded eval.
add_test(NAME e2e.eval
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/eval_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.eval PROPERTIES LABELS e2e TIMEOUT 600)
add_test(NAME e2e.preempt
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/preempt_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.preempt PROPERTIES LABELS e2e TIMEOUT 600)
add_test(NAME e2e.tp_train
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tp_train_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.tp_train PROPERTIES LABELS e2e TIMEOUT 600)
# LoRA under TP 2 (+ sequence parallelism) against one process: losses, checkpoints resumed across tp 1 ↔ 2,
# merged and PEFT exports of either run alike (docs/lora.md).
add_test(NAME e2e.lora_tp
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/lora_tp_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.lora_tp PROPERTIES LABELS e2e TIMEOUT 600 SKIP_RETURN_CODE 77)
# On a machine with ≥ 2 GPUs: TP 2 over NCCL against one GPU (fp32), and bf16; skipped (77) otherwise.
add_test(NAME e2e.tp_gpu
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tp_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.tp_gpu PROPERTIES LABELS "e2e;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# train.cuda_graph: the captured step against the eager step (GPT-2 bf16, Llama fp32); skipped (77) without a GPU.
add_test(NAME e2e.cuda_graph_gpu
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cuda_graph_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.cuda_graph_gpu PROPERTIES LABELS "e2e;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# bench train --profile: trace and phase table on CPU; the same with CUDA kernels on a GPU machine.
add_test(NAME e2e.profile
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/profile_test.py ${MESHTRAIN_BIN})
set_tests_properties(e2e.profile PROPERTIES LABELS e2e TIMEOUT 300)
add_test(NAME e2e.profile_gpu
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/profile_test.py ${MESHTRAIN_BIN} --device cuda)
set_tests_properties(e2e.profile_gpu PROPERTIES LABELS "e2e;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)

# `meshtrain plan`: the table, --json, --search and its flag errors (tests/e2e/plan_cli_test.py).
add_test(NAME e2e.plan_cli
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/plan_cli_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.plan_cli PROPERTIES LABELS e2e TIMEOUT 120)
# Watching a run: TensorBoard events read back by the tensorboard package, no GPU readings without a GPU, a
# slowed rank named as the straggler (two CPU ranks under meshrun). Skipped (77) without tensorboard.
add_test(NAME e2e.observe
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/observe_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.observe PROPERTIES LABELS e2e TIMEOUT 300 SKIP_RETURN_CODE 77)
# meshtrain doctor against the GPU-health fixtures and on this machine; meshrun --preflight stopping a launch.
add_test(NAME e2e.doctor
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/doctor_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.doctor PROPERTIES LABELS e2e TIMEOUT 300)
# On a GPU machine: NVML telemetry in the trainer's metrics and `meshtrain doctor` on real readings.
add_test(NAME e2e.observe_gpu
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/observe_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.observe_gpu PROPERTIES LABELS "e2e;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain generate through a model's tokenizer.json and chat template against transformers' greedy generate.
add_test(NAME e2e.generate_tokenizer
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/generate_tokenizer_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.generate_tokenizer PROPERTIES LABELS "e2e;text" TIMEOUT 600 SKIP_RETURN_CODE 77)
