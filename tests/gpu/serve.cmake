# serve's GPU checks (label gpu; exit 77 = skipped without a GPU: tests/support/gpu_test_main.h).

# The paged forward on CUDA: bf16 within bf16 rounding of the plain forward, fp32 equal to it, for chunked ragged
# steps over scrambled blocks (Llama with GQA, GPT-2).
add_executable(paged_forward_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/paged_forward_test.cpp)
target_link_libraries(paged_forward_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(paged_forward_gpu_tests)
meshtrain_use_torch(paged_forward_gpu_tests)
target_include_directories(paged_forward_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
meshtrain_add_test(gpu serve paged_forward COMMAND paged_forward_gpu_tests PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)

# CUDA graphs of decode steps: every step's logits with graphs within bf16 rounding of the eager step's (padded
# batches, shrinking batches, prefills between), padding writing only the scratch block; the engine's greedy tokens
# with graphs on and off equal up to a near-tie.
add_executable(decode_graphs_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/decode_graphs_test.cpp)
target_link_libraries(decode_graphs_gpu_tests PRIVATE meshtrain_serve_engine GTest::gtest)
meshtrain_warnings(decode_graphs_gpu_tests)
meshtrain_use_torch(decode_graphs_gpu_tests)
target_include_directories(decode_graphs_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
meshtrain_add_test(gpu serve decode_graphs COMMAND decode_graphs_gpu_tests PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
