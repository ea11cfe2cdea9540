# Checkpoint end-to-end tests: Hugging Face export/import against transformers (logits on the same tokens),
# both families; a trainer killed during a checkpoint save resumes from the previous one.
add_executable(ckpt_logits_driver ${CMAKE_CURRENT_LIST_DIR}/ckpt/logits_driver.cpp)
target_link_libraries(ckpt_logits_driver PRIVATE meshtrain_model meshtrain_ckpt)
meshtrain_warnings(ckpt_logits_driver)
meshtrain_use_torch(ckpt_logits_driver)

meshtrain_add_test(e2e ckpt hf_roundtrip
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/hf_roundtrip_test.py ${MESHTRAIN_BIN}
          $<TARGET_FILE:ckpt_logits_driver>
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# Progress lines of import and of a checkpoint load (thresholds lowered through the environment), and the
# parallel reader's bytes end to end (tests/e2e/ckpt/load_progress_test.py).
meshtrain_add_test(e2e ckpt load_progress
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/load_progress_test.py ${MESHTRAIN_BIN}
  PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
meshtrain_add_test(e2e ckpt kill_resume
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/kill_resume_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900)

# The trainer's own checkpoints (tests/e2e/ckpt/trainer_resume_test.py): exact resume per layout after a
# worker is killed, resharding between layouts, fine-tuning from checkpoint.init_from, LoRA's adapters-only
# checkpoints (lora).
foreach(layout ddp2 fsdp2 zero2 tp2)
  meshtrain_add_test(e2e ckpt trainer_resume_exact_${layout}
    COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
            ${CMAKE_SOURCE_DIR} exact ${layout}
    PROPERTIES TIMEOUT 600)
endforeach()
foreach(mode reshard init_from lora)
  meshtrain_add_test(e2e ckpt trainer_resume_${mode}
    COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
            ${CMAKE_SOURCE_DIR} ${mode}
    PROPERTIES TIMEOUT 900)
endforeach()
# optimizer.offload: cpu against the on-device optimizer (FSDP 2), checkpoints across the two; on a GPU too.
meshtrain_add_test(e2e ckpt trainer_offload
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} offload
  LABELS train PROPERTIES TIMEOUT 900)
# optimizer.offload_delay: 1, the delayed update: stale by one step, exact across a checkpoint and resume.
meshtrain_add_test(e2e ckpt trainer_offload_delay
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} offload_delay
  LABELS train PROPERTIES TIMEOUT 900)
meshtrain_add_test(e2e ckpt trainer_offload_delay_gpu
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} offload_delay_gpu
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
meshtrain_add_test(e2e ckpt trainer_offload_gpu
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} offload_gpu
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
meshtrain_add_test(e2e ckpt trainer_resume_gpu
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} gpu
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# One process on one GPU, a step in flight while the host logs the previous one: a resume continues exactly.
meshtrain_add_test(e2e ckpt trainer_resume_gpu_single
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} gpu_single
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# Both ranks of FSDP 2 on one GPU (CPU backend staging through host memory): a resume continues exactly.
meshtrain_add_test(e2e ckpt trainer_resume_gpu_shared
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/trainer_resume_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR} gpu_shared
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)

# Nothing lost (tests/e2e/ckpt/{resume_auto,nonfinite,random_kill,memory_checkpoints}_test.py): `resume: auto` over
# damaged checkpoint directories, non-finite steps skipped and never saved, workers killed at random steps resuming
# bit-exactly, from disk and from in-memory checkpoints.
foreach(name resume_auto nonfinite random_kill memory_checkpoints)
  meshtrain_add_test(e2e ckpt ${name}
    COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/${name}_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
    PROPERTIES TIMEOUT 300)
endforeach()

# Pipeline checkpoints (tests/e2e/ckpt/pipeline_resume_test.py): saved under pp 2 × fsdp 2, resumed under one
# process, pp 4 and fsdp 4; an exact resume after a kill; tied embeddings saved once under pp 2 and loaded into
# both copies.
foreach(mode reshard exact tied)
  meshtrain_add_test(e2e ckpt pipeline_resume_${mode}
    COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/pipeline_resume_test.py ${MESHTRAIN_BIN}
            ${CMAKE_SOURCE_DIR} ${mode}
    PROPERTIES TIMEOUT 900)
endforeach()

# Resuming under a config that does not fit the newest checkpoint (tests/e2e/ckpt/resume_compat_test.py): other LoRA
# targets or alpha, another model's complete checkpoint: one line, exit 2, no fallback to an older checkpoint.
meshtrain_add_test(e2e ckpt resume_compat
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/resume_compat_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600)
# Where checkpoint files may point (tests/e2e/ckpt/checkpoint_paths_test.py): `latest` outside its directory, shard
# paths and malformed meta.json through export, generate and eval; import's token ids outside the vocabulary.
meshtrain_add_test(e2e ckpt checkpoint_paths
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/checkpoint_paths_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 300)
# GGUF (llama.cpp) export and import against the `gguf` package and transformers' GGUF loader
# (tests/e2e/ckpt/gguf_roundtrip_test.py): keys, tensor names/types, logits, tokenizer, round trips, bad files.
meshtrain_add_test(e2e ckpt gguf_roundtrip
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/gguf_roundtrip_test.py ${MESHTRAIN_BIN}
          $<TARGET_FILE:ckpt_logits_driver> ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
# The exported file loaded by llama.cpp itself (llama-cpp-python); skipped where the package is absent.
meshtrain_add_test(e2e ckpt llama_cpp
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/llama_cpp_test.py ${MESHTRAIN_BIN}
          $<TARGET_FILE:ckpt_logits_driver> ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# Hugging Face directories and Hub cache ids read in place by generate, eval, serve and checkpoint.init_from,
# against `meshtrain import` first (tests/e2e/ckpt/hf_dirs_test.py); the mistakes in one line.
meshtrain_add_test(e2e ckpt hf_dirs
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/hf_dirs_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
