# LibTorch comes from the pinned PyTorch wheel (docs/architecture.md, "Build decisions"): the Python that
# holds it tells CMake where its CMake config lives. MESHTRAIN_PYTHON picks that Python; by default the
# project venv, then python3.
set(MESHTRAIN_PYTHON "" CACHE FILEPATH "Python interpreter whose torch wheel provides LibTorch")
if(NOT MESHTRAIN_PYTHON)
  if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    set(MESHTRAIN_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH "" FORCE)
  else()
    find_program(_mt_py python3 REQUIRED)
    set(MESHTRAIN_PYTHON ${_mt_py} CACHE FILEPATH "" FORCE)
  endif()
endif()
execute_process(
  COMMAND ${MESHTRAIN_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE _mt_torch_out ERROR_VARIABLE _mt_torch_err RESULT_VARIABLE _mt_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _mt_torch_rc EQUAL 0)
  message(FATAL_ERROR "meshtrain: `${MESHTRAIN_PYTHON} -c 'import torch'` failed; run scripts/setup.sh "
                      "(it installs torch==2.11.0 into .venv).\n${_mt_torch_err}")
endif()
string(REPLACE "\n" ";" _mt_torch_out "${_mt_torch_out}")
list(GET _mt_torch_out 0 _mt_torch_prefix)
list(GET _mt_torch_out 1 MESHTRAIN_TORCH_VERSION)
message(STATUS "meshtrain: torch ${MESHTRAIN_TORCH_VERSION} from ${MESHTRAIN_PYTHON}")
list(APPEND CMAKE_PREFIX_PATH ${_mt_torch_prefix})

# The CUDA wheel's config looks for the CUDA toolkit; a CPU build only needs torch_cpu and c10.
if(MESHTRAIN_CUDA STREQUAL "OFF")
  set(USE_CUDA OFF)
endif()
# Torch's CUDA module probes the local GPU for its arch list unless given one; our own .cu files pick their
# architectures themselves (MeshtrainCudaKernels.cmake), so
# any list will do and the probe (which fails on a machine without a GPU) is skipped.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch REQUIRED QUIET)

# Everything that sees Torch headers: Torch's bundled fmt must be header-only (docs/architecture.md, "fmt
# clash"), its headers are SYSTEM (no warnings from them), and one precompiled header is shared by every Torch target.
add_library(meshtrain_torch_iface INTERFACE)
target_include_directories(meshtrain_torch_iface SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_compile_definitions(meshtrain_torch_iface INTERFACE FMT_HEADER_ONLY=1)
target_compile_options(meshtrain_torch_iface INTERFACE -Wno-error=deprecated-declarations)
if(MESHTRAIN_WITH_CUDA)
  target_link_libraries(meshtrain_torch_iface INTERFACE ${TORCH_LIBRARIES})
else()
  target_link_libraries(meshtrain_torch_iface INTERFACE torch_cpu c10)
endif()

if(MESHTRAIN_PCH)
  file(WRITE ${CMAKE_BINARY_DIR}/pch_anchor.cpp "// anchor for the shared Torch precompiled header\n")
  add_library(meshtrain_pch STATIC ${CMAKE_BINARY_DIR}/pch_anchor.cpp)
  target_link_libraries(meshtrain_pch PUBLIC meshtrain_torch_iface)
  target_include_directories(meshtrain_pch PUBLIC ${CMAKE_SOURCE_DIR}/include)
  meshtrain_warnings(meshtrain_pch)
  target_precompile_headers(meshtrain_pch PRIVATE <ATen/ATen.h> <torch/nn/module.h> <torch/nn/modules/linear.h>
                            <torch/autograd.h> <vector> <string> <memory> <functional>)
endif()

function(meshtrain_use_torch target)
  target_link_libraries(${target} PUBLIC meshtrain_torch_iface)
  if(MESHTRAIN_PCH)
    target_precompile_headers(${target} REUSE_FROM meshtrain_pch)
  endif()
endfunction()
