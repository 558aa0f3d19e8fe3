# test_tmp.cmake — the one temporary root of a ctest run (tests/CMakeLists.txt gives every
# test TMPDIR=ROOT through the ptd_test_tmp fixture).
#   cmake -DROOT=DIR -DSTEP=setup -P test_tmp.cmake    before the first test: an empty ROOT
#   cmake -DROOT=DIR -DSTEP=cleanup -P test_tmp.cmake  after the last: ROOT removed when
#       empty; otherwise what is in it is listed and kept, and this step fails. Tests remove
#       what they create when they pass and keep it when they fail (process_test_util.h),
#       so what is left is a failed test's, to be read, or a leak to fix.
if(NOT ROOT OR NOT STEP)
  message(FATAL_ERROR "test_tmp.cmake: pass -DROOT=<folder> -DSTEP=setup|cleanup")
endif()
file(GLOB left LIST_DIRECTORIES true "${ROOT}/*" "${ROOT}/.*")
if(STEP STREQUAL "setup")
  if(left)
    message(STATUS "removing what an earlier ctest run kept under ${ROOT}")
    file(REMOVE_RECURSE "${ROOT}")
  endif()
  file(MAKE_DIRECTORY "${ROOT}")
elseif(STEP STREQUAL "cleanup")
  if(NOT left)
    file(REMOVE_RECURSE "${ROOT}")
    return()
  endif()
  list(JOIN left "\n  " shown)
  message(FATAL_ERROR "left under ${ROOT} (kept for a failed test, or not removed by a passing one):\n  ${shown}")
else()
  message(FATAL_ERROR "test_tmp.cmake: STEP must be setup or cleanup, got '${STEP}'")
endif()
