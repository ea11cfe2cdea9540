# CUDA + NCCL: AUTO turns them on where both are found (CI machine: /usr/local/cuda; GPU machine: /usr),
# ON requires them, OFF forces a CPU build. Result: MESHTRAIN_WITH_CUDA and the target meshtrain::nccl.
set(MESHTRAIN_WITH_CUDA OFF)
if(NOT MESHTRAIN_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(MESHTRAIN_NCCL_INCLUDE nccl.h
            HINTS $ENV{NCCL_HOME}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  find_library(MESHTRAIN_NCCL_LIB nccl
               HINTS $ENV{NCCL_HOME}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  if(CUDAToolkit_FOUND AND MESHTRAIN_NCCL_INCLUDE AND MESHTRAIN_NCCL_LIB)
    set(MESHTRAIN_WITH_CUDA ON)
    add_library(meshtrain::nccl INTERFACE IMPORTED)
    target_include_directories(meshtrain::nccl SYSTEM INTERFACE ${MESHTRAIN_NCCL_INCLUDE})
    target_link_libraries(meshtrain::nccl INTERFACE ${MESHTRAIN_NCCL_LIB} CUDA::cudart)
    message(STATUS "meshtrain: CUDA ${CUDAToolkit_VERSION}, NCCL ${MESHTRAIN_NCCL_LIB}")
  elseif(MESHTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "meshtrain: MESHTRAIN_CUDA=ON but CUDA toolkit (${CUDAToolkit_FOUND}) or NCCL "
                        "(${MESHTRAIN_NCCL_INCLUDE}, ${MESHTRAIN_NCCL_LIB}) not found; set NCCL_HOME or use OFF")
  else()
    message(STATUS "meshtrain: CUDA/NCCL not found, CPU-only build")
  endif()
endif()
if(MESHTRAIN_WITH_CUDA)
  add_compile_definitions(MESHTRAIN_WITH_CUDA=1)
endif()
# meshtrain's own CUDA kernels (MeshtrainCudaKernels.cmake) need nvcc; a toolkit with runtime and headers
# only builds none, and the fused ops keep their composite ATen paths. Decided here, before any target
# exists, so every target (and the shared precompiled header) sees the same definitions.
set(MESHTRAIN_CUDA_KERNELS OFF)
if(MESHTRAIN_WITH_CUDA)
  if(CMAKE_CUDA_COMPILER OR (CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}"))
    set(MESHTRAIN_CUDA_KERNELS ON)
    add_compile_definitions(MESHTRAIN_CUDA_KERNELS=1)
  else()
    message(WARNING "meshtrain: CUDA found but no nvcc: fused CUDA kernels not built (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
