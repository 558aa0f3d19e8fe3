// blas_core.h — which OpenBLAS kernels this process runs, and making them the best ones this
// CPU computes correctly.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it is loaded it picks one "core type"
// (a set of kernels: Prescott, Haswell, SkylakeX, Cooperlake, ...) from the CPUID it knows.
// On a processor it does not recognise it silently falls back to the generic SSE kernels
// (Prescott): 3-4x slower GEMMs. It reads OPENBLAS_CORETYPE once, when the library loads,
// so the only way to change the choice is to set the variable and execute the program again.
//
// choose_blas_core() is called first thing in main(). It checks a few GEMMs against a
// double-precision reference, compares the kernels' instruction-set level with what CPUID
// (and the OS's saved state, XGETBV) says this CPU runs, and, when a better core type
// exists, sets OPENBLAS_CORETYPE and asks the caller to execute itself again. The next
// process checks the new kernels the same way; a core type that OpenBLAS does not take, or
// that computes wrong results, is skipped for the next best one, and when none is left the
// process goes back to OpenBLAS's own choice. A user's own OPENBLAS_CORETYPE is honoured
// (checked, never replaced). Environment variables ptd-engine sets for itself:
//   PTD_BLAS_CORETYPE   the OPENBLAS_CORETYPE value it set (so it is not taken for the user's)
//   PTD_BLAS_DEFAULT    the core type OpenBLAS chose on its own
//   PTD_BLAS_TRIED      core types already tried, comma-separated
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptd::engine {

// What CPUID and XGETBV say this CPU and OS can run (all false off x86-64).
struct CpuIsa {
    bool avx = false, fma = false, avx2 = false;
    bool avx512 = false;       // AVX-512 F, BW, VL and DQ, with the OS saving the ZMM state
    bool avx512_bf16 = false;  // AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4+)
};
CpuIsa read_cpu_isa();
std::string describe_isa(const CpuIsa& isa);  // e.g. "avx512_bf16" (the highest level it has)

// The instruction-set level of an OpenBLAS x86-64 core type (case-insensitive name):
// 4 AVX-512 + BF16 (Cooperlake, SapphireRapids), 3 AVX-512 (SkylakeX), 2 AVX2 + FMA
// (Haswell, Zen), 1 AVX (Sandybridge, Bulldozer family), 0 SSE-only generic kernels
// (Prescott, Core2, Nehalem, Atom, ...) and names it does not know.
int blas_core_level(std::string_view core);
// The highest level this CPU runs.
int isa_level(const CpuIsa& isa);
// Core types of OpenBLAS 0.3.x that this CPU runs, best first, one per level above
// `above` (e.g. {"Cooperlake", "SkylakeX", "Haswell"} for an AVX-512-BF16 CPU and above 0).
std::vector<std::string> better_blas_cores(const CpuIsa& isa, int above);

// Runs small single-precision GEMMs (all four transpose combinations, beta 0 and 1, odd
// shapes, a reduction long enough to cross OpenBLAS's K blocking) against a double
// reference. Returns "" when every element is within the fp32 rounding bound, else what
// differed (shape, element, got, expected).
std::string check_blas_gemm();

// The outcome, reported in the engine's start event and --describe / --devices output.
struct BlasChoice {
    std::string library;          // "OpenBLAS 0.3.21"
    std::string core;             // the core type this process runs
    std::string openblas_default; // what OpenBLAS picked on its own ("" when not known: the user set it)
    std::string chosen_by;        // "openblas", "ptd-engine" or "user (OPENBLAS_CORETYPE)"
    std::string isa;              // describe_isa of this CPU
    std::string check;            // "passed" or what failed
    std::string note;             // why the choice is what it is, in one sentence
    nlohmann::json to_json() const;
    std::string line() const;     // one human line for --devices and logs
};

// What the decision reads: this process's OpenBLAS, CPU, environment and GEMM check.
struct BlasState {
    std::string library;       // "OpenBLAS 0.3.21"
    CpuIsa isa;
    std::string running;       // openblas_get_corename()
    std::string coretype_env;  // OPENBLAS_CORETYPE ("" unset)
    std::string ours_env;      // PTD_BLAS_CORETYPE
    std::string default_env;   // PTD_BLAS_DEFAULT
    std::string tried_env;     // PTD_BLAS_TRIED
    std::string check;         // check_blas_gemm(): "" = correct
};
// What to do: run again with set_env (reexec), stop with error, or go on with choice.
struct BlasDecision {
    bool reexec = false;
    std::vector<std::pair<std::string, std::string>> set_env;
    std::string error;
    BlasChoice choice;
};
// Pure: the whole procedure above, one process's step of it.
BlasDecision decide_blas_core(const BlasState& state);

// Decides (see the top of this file) with this process's state. When it returns reexec = true it has set
// OPENBLAS_CORETYPE and the PTD_BLAS_* variables, and the caller must execv itself; when
// it returns an error text the kernels compute wrong results with every core type tried
// and the process must not train.
struct BlasStep {
    bool reexec = false;
    std::string error;
};
BlasStep choose_blas_core();

// The choice of this process (valid after choose_blas_core() returned without reexec).
const BlasChoice& blas_choice();

}  // namespace ptd::engine
