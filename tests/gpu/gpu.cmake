# The model's fused CUDA kernels against their composite ATen versions, fp32 and bf16, forward and gradients
# (label gpu; exit 77 = skipped where there is no GPU or the build has no CUDA kernels).
add_executable(fused_kernels_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/fused_kernels_test.cpp)
target_link_libraries(fused_kernels_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(fused_kernels_gpu_tests)
meshtrain_use_torch(fused_kernels_gpu_tests)
target_include_directories(fused_kernels_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME gpu.fused_kernels COMMAND fused_kernels_gpu_tests)
set_tests_properties(gpu.fused_kernels PROPERTIES LABELS "gpu;model" TIMEOUT 600 SKIP_RETURN_CODE 77)

# The same ops timed against their composites (forward + backward, bf16, benchmark shapes): table + JSON.
add_executable(fused_kernels_bench ${CMAKE_CURRENT_LIST_DIR}/fused_kernels_bench.cpp)
target_link_libraries(fused_kernels_bench PRIVATE meshtrain_model)
meshtrain_warnings(fused_kernels_bench)
meshtrain_use_torch(fused_kernels_bench)
add_test(NAME gpu.fused_kernels_bench COMMAND fused_kernels_bench ${CMAKE_BINARY_DIR}/fused_kernels_bench.json)
set_tests_properties(gpu.fused_kernels_bench PROPERTIES LABELS "gpu;model;bench" TIMEOUT 600 SKIP_RETURN_CODE 77)

# Packed documents on CUDA: variable-length flash attention (bf16) and the masked SDPA (fp32) against the
# documents run one by one, loss and gradients (label gpu; exit 77 without a GPU).
add_executable(document_attention_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/document_attention_test.cpp)
target_link_libraries(document_attention_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(document_attention_gpu_tests)
meshtrain_use_torch(document_attention_gpu_tests)
target_include_directories(document_attention_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME gpu.document_attention COMMAND document_attention_gpu_tests)
set_tests_properties(gpu.document_attention PROPERTIES LABELS "gpu;model" TIMEOUT 600 SKIP_RETURN_CODE 77)

# FP8 matmuls (train.fp8) against bf16/fp32 within stated bounds: one matmul, a linear layer's forward and
# gradients, a model's loss (label gpu; exit 77 without a GPU that has FP8 matmuls).
add_executable(fp8_linear_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/fp8_linear_test.cpp)
target_link_libraries(fp8_linear_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(fp8_linear_gpu_tests)
meshtrain_use_torch(fp8_linear_gpu_tests)
target_include_directories(fp8_linear_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME gpu.fp8_linear COMMAND fp8_linear_gpu_tests)
set_tests_properties(gpu.fp8_linear PROPERTIES LABELS "gpu;model" TIMEOUT 600 SKIP_RETURN_CODE 77)

# The FP8 cast kernels (model/fp8_cast.h) against their composite ATen ops, byte for byte: amax of tensor, rows
# and columns; the row-major and transposed copies (label gpu; exit 77 without a GPU or the kernels).
add_executable(fp8_cast_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/fp8_cast_test.cpp)
target_link_libraries(fp8_cast_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(fp8_cast_gpu_tests)
meshtrain_use_torch(fp8_cast_gpu_tests)
target_include_directories(fp8_cast_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME gpu.fp8_cast COMMAND fp8_cast_gpu_tests)
set_tests_properties(gpu.fp8_cast PROPERTIES LABELS "gpu;model" TIMEOUT 600 SKIP_RETURN_CODE 77)

# train.attention_backend: flash and cuDNN attention against the math backend, loss and gradients within bf16
# rounding (Llama with GQA, GPT-2), and the backends each bench shape can run (label gpu; exit 77 without a GPU).
add_executable(attention_backend_gpu_tests ${CMAKE_CURRENT_LIST_DIR}/attention_backend_test.cpp)
target_link_libraries(attention_backend_gpu_tests PRIVATE meshtrain_model GTest::gtest)
meshtrain_warnings(attention_backend_gpu_tests)
meshtrain_use_torch(attention_backend_gpu_tests)
target_include_directories(attention_backend_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME gpu.attention_backend COMMAND attention_backend_gpu_tests)
set_tests_properties(gpu.attention_backend PROPERTIES LABELS "gpu;model" TIMEOUT 600 SKIP_RETURN_CODE 77)
