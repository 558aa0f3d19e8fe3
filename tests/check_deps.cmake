# check_deps.cmake — the dependency direction, checked on the built artefacts:
#   * libptd_estimators.a references no GUI, SSH or network symbol;
#   * ptd-engine contains no GLFW, ImGui or libssh code (static or dynamic).
# Run by ctest as `cmake -DBIN_DIR=... -DBUILD_DIR=... -P check_deps.cmake`.
find_program(NM nm REQUIRED)
file(GLOB_RECURSE estimators_lib "${BUILD_DIR}/estimators/libptd_estimators.a")
if(NOT estimators_lib)
  message(FATAL_ERROR "libptd_estimators.a not found under ${BUILD_DIR}/estimators")
endif()

execute_process(COMMAND ${NM} -u ${estimators_lib} OUTPUT_VARIABLE undefined RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${estimators_lib}")
endif()
foreach(pattern "glfw" "ImGui" "ssh_" " socket$" " connect$" " bind$" " getaddrinfo$" "gloo" " gl[A-Z]")
  string(REGEX MATCH "[^\n]*${pattern}[^\n]*" hit "${undefined}")
  if(hit)
    message(FATAL_ERROR "estimators must not depend on GUI/SSH/network code, but references: ${hit}")
  endif()
endforeach()

execute_process(COMMAND ${NM} -C ${BIN_DIR}/ptd-engine OUTPUT_VARIABLE engine_syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${BIN_DIR}/ptd-engine")
endif()
foreach(pattern "glfw" "ImGui" "ssh_")
  string(REGEX MATCH "[^\n]*${pattern}[^\n]*" hit "${engine_syms}")
  if(hit)
    message(FATAL_ERROR "ptd-engine must not link GLFW, ImGui or libssh, but contains: ${hit}")
  endif()
endforeach()
message(STATUS "dependency direction ok: estimators has no GUI/SSH/network symbols; ptd-engine has no GLFW/ImGui/libssh")
