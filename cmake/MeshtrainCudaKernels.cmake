# meshtrain's own CUDA kernels (the model room's fused ops, src/model/kernels/*.cu), built only when
# MESHTRAIN_CUDA_KERNELS (MeshtrainCuda.cmake: CUDA and nvcc found). They form a separate static library
# without Torch headers or the Torch precompiled header, so nvcc compiles plain CUDA quickly; the model
# room's .cpp files call them through src/model/kernels/cuda_kernel.h.
# Architectures: Torch's CMake config turns TORCH_CUDA_ARCH_LIST (MeshtrainTorch.cmake: 8.0;9.0 unless
# given, i.e. A100 and H100/H200; two keep the build short) into -gencode flags in CMAKE_CUDA_FLAGS and sets
# CMAKE_CUDA_ARCHITECTURES OFF; the target keeps it OFF so no second list is added.
if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()
if(MESHTRAIN_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${MESHTRAIN_CCACHE})
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

file(GLOB _mt_cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/model/kernels/*.cu)
add_library(meshtrain_model_cuda STATIC ${_mt_cuda_srcs})
# nvcc compiles one kernel file a unit (no unity batches).
set_target_properties(meshtrain_model_cuda PROPERTIES CUDA_ARCHITECTURES OFF UNITY_BUILD OFF)
# src/ for the room's private headers; include/ for core/cuda_check.h and core/error.h (no Torch in either).
target_include_directories(meshtrain_model_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(meshtrain_model_cuda PUBLIC CUDA::cudart)
# cuBLASLt for the GEMM epilogues (src/model/kernels/lt_matmul.cpp calls it on LibTorch's handle): the toolkit's,
# whose soname (libcublasLt.so.13) is the one the wheel's libcublas loads, so one copy serves both (the
# toolkit's and the wheel's directories both on the run path, as for cudart and nvrtc). Where the toolkit has
# no cuBLAS, the wheel's own copy.
if(TARGET CUDA::cublasLt)
  target_link_libraries(meshtrain_model_cuda PUBLIC CUDA::cublasLt)
else()
  file(GLOB _mt_cublaslt "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib/libcublasLt.so.*")
  if(NOT _mt_cublaslt)
    message(FATAL_ERROR "meshtrain: cuBLASLt not found (neither the CUDA toolkit nor the torch wheel's "
                        "nvidia/*/lib has libcublasLt); install the toolkit's cuBLAS or use -DMESHTRAIN_CUDA=OFF")
  endif()
  list(GET _mt_cublaslt 0 _mt_cublaslt)
  target_link_libraries(meshtrain_model_cuda PUBLIC ${_mt_cublaslt})
endif()
target_compile_options(meshtrain_model_cuda PRIVATE -Xcompiler=-Wall,-Wextra -lineinfo)
if(MESHTRAIN_WERROR)
  target_compile_options(meshtrain_model_cuda PRIVATE -Werror=all-warnings -Xcompiler=-Werror)
endif()
target_link_libraries(meshtrain_model PUBLIC meshtrain_model_cuda)
message(STATUS "meshtrain: fused CUDA kernels built by ${CMAKE_CUDA_COMPILER} for TORCH_CUDA_ARCH_LIST")
