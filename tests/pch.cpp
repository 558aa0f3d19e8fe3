// pch.cpp — no code: the translation unit CMake compiles to build the precompiled
// header every test target reuses (ptd_test_pch in tests/CMakeLists.txt).
