# Warnings for meshtrain's own targets; third-party headers (Torch, spdlog) are included as SYSTEM so their
# warnings never fail our build. MESHTRAIN_WERROR (on in CI through scripts/test.sh) makes them errors.
function(meshtrain_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
  # GCC 13's -Wdangling-reference flags every reference bound to a function's returned reference when an
  # argument is a temporary (e.g. lookup(table, s.substr(…))); its false positives outnumber its finds.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    target_compile_options(${target} PRIVATE -Wno-dangling-reference)
  endif()
  # GCC's -Wmaybe-uninitialized depends on what the optimizer inlined where: unity batches (MESHTRAIN_UNITY)
  # inline yaml-cpp's node iterators into our loops and GCC 12 then reports its members as maybe uninitialized,
  # a false positive in a system header. -Wuninitialized (definitely uninitialized) stays on.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(MESHTRAIN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
