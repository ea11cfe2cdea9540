# System C++ dependencies (Debian 12 / Ubuntu 24.04 packages; scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(cxxopts REQUIRED)
if(MESHTRAIN_TESTS)
  find_package(GTest REQUIRED)
endif()
# yaml-cpp 0.7 exports `yaml-cpp`, 0.8 exports `yaml-cpp::yaml-cpp`; name one target for both.
if(NOT TARGET yaml-cpp AND TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp ALIAS yaml-cpp::yaml-cpp)
endif()
