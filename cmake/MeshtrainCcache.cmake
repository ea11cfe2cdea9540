# ccache where present. Precompiled headers need the sloppiness below for ccache to hit.
find_program(MESHTRAIN_CCACHE ccache)
if(MESHTRAIN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${MESHTRAIN_CCACHE})
  message(STATUS "meshtrain: ccache ${MESHTRAIN_CCACHE}")
endif()
