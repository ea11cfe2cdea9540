# Single-process GPU checks (docs/architecture.md "Test tiers"), named gpu.<room>.<case>.
# One GPU-labelled gtest binary: tests/gpu/SOURCE as NAME_gpu_tests, linked to LIB (default meshtrain_model) and
# registered as gpu.ROOM.NAME (default room model; TIMEOUT default 600; label gpu; exit 77 = skipped where it
# cannot run: tests/support/gpu_test_main.h).
function(meshtrain_gpu_test name source)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "ROOM;LIB;TIMEOUT" "")
  if(NOT arg_ROOM)
    set(arg_ROOM model)
  endif()
  if(NOT arg_LIB)
    set(arg_LIB meshtrain_model)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  add_executable(${name}_gpu_tests ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${source})
  target_link_libraries(${name}_gpu_tests PRIVATE ${arg_LIB} GTest::gtest)
  meshtrain_warnings(${name}_gpu_tests)
  meshtrain_use_torch(${name}_gpu_tests)
  target_include_directories(${name}_gpu_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
  meshtrain_add_test(gpu ${arg_ROOM} ${name} COMMAND ${name}_gpu_tests
                     PROPERTIES TIMEOUT ${arg_TIMEOUT} SKIP_RETURN_CODE 77)
endfunction()

# One GPU bench: tests/gpu/NAME.cpp as the executable NAME, linked to meshtrain_model, registered as gpu.ROOM.NAME
# (default room model; label gpu; TIMEOUT 600; exit 77 = skipped) writing its JSON to the build directory.
function(meshtrain_gpu_bench name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ROOM" "")
  if(NOT arg_ROOM)
    set(arg_ROOM model)
  endif()
  add_executable(${name} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE meshtrain_model)
  meshtrain_warnings(${name})
  meshtrain_use_torch(${name})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
  meshtrain_add_test(gpu ${arg_ROOM} ${name} COMMAND ${name} ${CMAKE_BINARY_DIR}/${name}.json
                     PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endfunction()

# The model's fused CUDA kernels against their composite ATen versions, fp32 and bf16, forward and gradients
# (skipped where there is no GPU or the build has no CUDA kernels).
meshtrain_gpu_test(fused_kernels fused_kernels_test.cpp)
# The NF4 dequantize kernel against the CPU path bit for bit, and nf4_linear under autocast (docs/lora.md "QLoRA").
meshtrain_gpu_test(nf4_dequantize nf4_dequantize_test.cpp)

# The same ops timed against their composites (forward + backward, bf16, benchmark shapes): table + JSON.
meshtrain_gpu_bench(fused_kernels_bench)

# Packed documents on CUDA: variable-length flash attention (bf16) and the masked SDPA (fp32) against the
# documents run one by one, loss and gradients (label gpu; exit 77 without a GPU).
meshtrain_gpu_test(document_attention document_attention_test.cpp)

# FP8 matmuls (train.fp8) against bf16/fp32 within stated bounds: one matmul, a linear layer's forward and
# gradients, a model's loss (label gpu; exit 77 without a GPU that has FP8 matmuls).
meshtrain_gpu_test(fp8_linear fp8_linear_test.cpp)

# The FP8 cast kernels (model/kernels/fp8_cast.h) against their composite ATen ops, byte for byte: amax of tensor, rows
# and columns; the row-major and transposed copies (label gpu; exit 77 without a GPU or the kernels).
meshtrain_gpu_test(fp8_cast fp8_cast_test.cpp)

# train.attention_backend: flash and cuDNN attention against the math backend, loss and gradients within bf16
# rounding (Llama with GQA, GPT-2), and the backends each bench shape can run (label gpu; exit 77 without a GPU).
meshtrain_gpu_test(attention_backend attention_backend_test.cpp)

# AdamW's step with the clip divisor and the skip flag as device tensors (the trainer's step without a host
# read) through meshtrain's kernel: equal to the in-place clip, a skip leaves everything bit-identical, and the
# kernel's update is ATen's fused AdamW's bit for bit (label gpu; exit 77 without a GPU).
meshtrain_gpu_test(adamw_device_step adamw_device_step_test.cpp ROOM train LIB meshtrain_train)
