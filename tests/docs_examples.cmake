# docs_examples — every command output shown in docs/ and README.md must be what this build
# prints: scripts/docs_examples.sh --check regenerates each marked example from the binaries in
# the build's bin folder and fails, naming the doc and line, on any difference (see the script's
# header for the markers; `scripts/docs_examples.sh --update` takes the build's output).
# It runs only programs already built (ptd, ptd-engine, ptd-studio, the benches); an example
# whose program this configuration does not build is skipped and named.
#   include(${CMAKE_CURRENT_SOURCE_DIR}/docs_examples.cmake) from tests/CMakeLists.txt
add_test(NAME docs_examples
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/docs_examples.sh --check ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set_tests_properties(docs_examples PROPERTIES TIMEOUT 300 LABELS docs)
