// contract_failure.h — how a compute backend stops on a broken contract (a bug in its
// caller, never a condition of the run): "ptd-engine: error: <where><message>" on stderr,
// then exit 1. Header-only, so the CPU backend, its stream checker and both CUDA backend
// builds share one wording without linking each other.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ptd::engine {

// `where` names the place and ends in ": " ("stream check: "); `fmt` and `ap` are the
// message, as vfprintf takes them. The caller's va_start needs no va_end: this never returns.
[[noreturn]] inline void contract_failure(const std::string& where, const char* fmt, va_list ap) {
    std::fprintf(stderr, "ptd-engine: error: %s", where.c_str());
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    std::exit(1);
}

}  // namespace ptd::engine
