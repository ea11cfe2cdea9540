# Multi-process checkpoint tests (tests/multiproc/ckpt/): real ranks under meshrun on the CPU backend save
# under one layout and load under another world size and split; workers killed with SIGKILL at each stage
# of a save leave a checkpoint that loads.
add_executable(ckpt_worker ${CMAKE_CURRENT_LIST_DIR}/ckpt/ckpt_worker.cpp)
target_link_libraries(ckpt_worker PRIVATE meshtrain_ckpt)
target_include_directories(ckpt_worker PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)  # multiproc/ckpt/layouts.h
meshtrain_warnings(ckpt_worker)
meshtrain_use_torch(ckpt_worker)

meshtrain_add_test(multiproc ckpt reshard_matrix
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/ckpt/reshard_matrix.sh ${MESHTRAIN_BIN} PROPERTIES TIMEOUT 600)
meshtrain_add_test(multiproc ckpt crash_safety
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/crash_test.py ${MESHTRAIN_BIN}
  PROPERTIES TIMEOUT 900)
# A seeded kill -9 campaign against `meshtrain train` under meshrun (tests/multiproc/ckpt/kill_campaign_test.py):
# a worker, meshrun itself or a rank mid-save killed at a random step; every trial resumes bit-identically and
# `latest` never dangles. The seed is fixed; `--seed N` replays another campaign.
meshtrain_add_test(multiproc ckpt kill_campaign
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ckpt/kill_campaign_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900)
