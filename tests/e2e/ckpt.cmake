# Checkpoint end-to-end tests: Hugging Face export/import against transformers (logits on the same tokens),
# both families; a trainer killed during a checkpoint save resumes from the previous one.
add_executable(ckpt_logits_driver ${CMAKE_CURRENT_LIST_DIR}/ckpt/logits_driver.cpp)
target_link_libraries(ckpt_logits_driver PRIVATE meshtrain_model meshtrain_ckpt)
meshtrain_warnings(ckpt_logits_driver)
meshtrain_use_torch(ckpt_logits_driver)

add_test(NAME e2e.hf_roundtrip
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/hf_roundtrip_test.py ${MESHTRAIN_BIN}
                 $<TARGET_FILE:ckpt_logits_driver>)
set_tests_properties(e2e.hf_roundtrip PROPERTIES LABELS "e2e;ckpt" TIMEOUT 600 SKIP_RETURN_CODE 77)
# Progress lines of import and of a checkpoint load (thresholds lowered through the environment), and the
# parallel reader's bytes end to end (tests/e2e/ckpt/load_progress_test.py).
add_test(NAME e2e.load_progress
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/load_progress_test.py ${MESHTRAIN_BIN})
set_tests_properties(e2e.load_progress PROPERTIES LABELS "e2e;ckpt" TIMEOUT 120 SKIP_RETURN_CODE 77)
add_test(NAME e2e.ckpt_kill_resume
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/kill_resume_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e.ckpt_kill_resume PROPERTIES LABELS "e2e;ckpt" TIMEOUT 900)

# The trainer's own checkpoints (tests/e2e/ckpt/trainer_resume_test.py): exact resume per layout after a
# worker is killed, resharding between layouts, fine-tuning from checkpoint.init_from, LoRA's adapters-only
# checkpoints (lora).
foreach(layout ddp2 fsdp2 zero2 tp2)
  add_test(NAME e2e.trainer_resume_exact_${layout}
           COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                   ${CMAKE_SOURCE_DIR} exact ${layout})
  set_tests_properties(e2e.trainer_resume_exact_${layout} PROPERTIES LABELS "e2e;ckpt" TIMEOUT 600)
endforeach()
foreach(mode reshard init_from lora)
  add_test(NAME e2e.trainer_resume_${mode}
           COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                   ${CMAKE_SOURCE_DIR} ${mode})
  set_tests_properties(e2e.trainer_resume_${mode} PROPERTIES LABELS "e2e;ckpt" TIMEOUT 900)
endforeach()
# optimizer.offload: cpu against the on-device optimizer (FSDP 2), checkpoints across the two; on a GPU too.
add_test(NAME e2e.trainer_offload
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} offload)
set_tests_properties(e2e.trainer_offload PROPERTIES LABELS "e2e;ckpt;train" TIMEOUT 900)
# optimizer.offload_delay: 1, the delayed update: stale by one step, exact across a checkpoint and resume.
add_test(NAME e2e.trainer_offload_delay
         COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} offload_delay)
set_tests_properties(e2e.trainer_offload_delay PROPERTIES LABELS "e2e;ckpt;train" TIMEOUT 900)
add_test(NAME e2e.trainer_offload_delay_gpu
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} offload_delay_gpu)
set_tests_properties(e2e.trainer_offload_delay_gpu PROPERTIES LABELS "e2e;ckpt;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME e2e.trainer_offload_gpu
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} offload_gpu)
set_tests_properties(e2e.trainer_offload_gpu PROPERTIES LABELS "e2e;ckpt;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME e2e.trainer_resume_gpu
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} gpu)
set_tests_properties(e2e.trainer_resume_gpu PROPERTIES LABELS "e2e;ckpt;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# One process on one GPU, a step in flight while the host logs the previous one: a resume continues exactly.
add_test(NAME e2e.trainer_resume_gpu_single
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} gpu_single)
set_tests_properties(e2e.trainer_resume_gpu_single PROPERTIES LABELS "e2e;ckpt;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# Both ranks of FSDP 2 on one GPU (CPU backend staging through host memory): a resume continues exactly.
add_test(NAME e2e.trainer_resume_gpu_shared
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
                 ${CMAKE_SOURCE_DIR} gpu_shared)
set_tests_properties(e2e.trainer_resume_gpu_shared PROPERTIES LABELS "e2e;ckpt;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)

# Nothing lost (tests/e2e/ckpt/{resume_auto,nonfinite,random_kill}_test.py): `resume: auto` over damaged checkpoint
# directories, non-finite steps skipped and never saved, workers killed at random steps resuming bit-exactly.
foreach(name resume_auto nonfinite random_kill)
  add_test(NAME e2e.ckpt_${name}
           COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/${name}_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e.ckpt_${name} PROPERTIES LABELS "e2e;ckpt" TIMEOUT 300)
endforeach()

# Pipeline checkpoints (tests/e2e/ckpt/pipeline_resume_test.py): saved under pp 2 × fsdp 2, resumed under one
# process, pp 4 and fsdp 4; an exact resume after a kill.
foreach(mode reshard exact)
  add_test(NAME e2e.pipeline_resume_${mode}
           COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/pipeline_resume_test.py ${MESHTRAIN_BIN}
                   ${CMAKE_SOURCE_DIR} ${mode})
  set_tests_properties(e2e.pipeline_resume_${mode} PROPERTIES LABELS "e2e;ckpt" TIMEOUT 900)
endforeach()
