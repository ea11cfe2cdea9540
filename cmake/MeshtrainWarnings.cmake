# Warnings for meshtrain's own targets; third-party headers (Torch, spdlog) are included as SYSTEM so their
# warnings never fail our build. MESHTRAIN_WERROR (on in CI through scripts/test.sh) makes them errors.
function(meshtrain_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
  if(MESHTRAIN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
