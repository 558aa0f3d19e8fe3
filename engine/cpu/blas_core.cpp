// blas_core.cpp — picks the best OpenBLAS core type this CPU computes correctly (see
// engine/include/ptd/engine/blas_core.h for the whole procedure and its environment).
#include "ptd/engine/blas_core.h"

#include <cblas.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace ptd::engine {
namespace {

BlasChoice g_choice;

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = (char)std::tolower((unsigned char)c);
    return out;
}

std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < s.size()) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        if (end > at) out.push_back(s.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

bool contains_core(const std::vector<std::string>& list, std::string_view core) {
    return std::any_of(list.begin(), list.end(), [&](const std::string& s) { return lower(s) == lower(core); });
}

std::string joined(const std::vector<std::string>& list) {
    std::string out;
    for (const std::string& s : list) out += (out.empty() ? "" : ",") + s;
    return out;
}

// The instruction set of a level (blas_core_level / isa_level).
std::string level_name(int level) {
    static const char* const names[] = {"sse only", "avx", "avx2+fma", "avx512", "avx512_bf16"};
    return names[std::clamp(level, 0, 4)];
}

std::string library_version() {
    std::string v = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of(' ') + 1);
    return v;
}

// C = op(A)·op(B) (+ C when beta = 1) in fp32 through cblas_sgemm, against a double sum.
// Row-major as the engine calls it. Returns "" or what differed.
std::string check_one(bool ta, bool tb, int m, int n, int k, float beta, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n), c0;
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    for (float& x : c) x = u(rng);
    c0 = c;
    const int lda = ta ? m : k, ldb = tb ? k : n;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                a.data(), lda, b.data(), ldb, beta, c.data(), n);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double sum = 0, mag = 0;
            for (int p = 0; p < k; ++p) {
                const double x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                const double y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                sum += x * y;
                mag += std::fabs(x * y);
            }
            sum += beta * (double)c0[(size_t)i * n + j];
            mag += std::fabs(beta * (double)c0[(size_t)i * n + j]);
            // fp32 rounding of a k-term sum in any order: |error| ≤ k·u·Σ|terms| (u = 2^-24);
            // wrong kernels miss by orders of magnitude, so a 4× margin costs no sensitivity.
            const double bound = 4.0 * (k + 2) * 0x1p-24 * mag + 1e-30;
            const double got = c[(size_t)i * n + j];
            if (!(std::fabs(got - sum) <= bound)) {
                char buf[200];
                std::snprintf(buf, sizeof buf, "sgemm %s%s %dx%dx%d beta %g: C[%d][%d] = %.9g, expected %.9g",
                              ta ? "T" : "N", tb ? "T" : "N", m, n, k, beta, i, j, got, sum);
                return buf;
            }
        }
    return "";
}

}  // namespace

CpuIsa read_cpu_isa() {
    CpuIsa isa;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return isa;
    const bool osxsave = c & (1u << 27);
    const bool cpu_avx = c & (1u << 28), cpu_fma = c & (1u << 12);
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    // The OS must save the registers: XMM|YMM (bits 1, 2) for AVX, plus opmask and both
    // ZMM halves (bits 5, 6, 7) for AVX-512.
    const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
    isa.avx = cpu_avx && os_ymm;
    isa.fma = isa.avx && cpu_fma;
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        isa.avx2 = isa.avx && (b & (1u << 5));
        const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
        isa.avx512 = os_zmm && f && dq && bw && vl;
        const unsigned subleaves = a;
        if (subleaves >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            isa.avx512_bf16 = isa.avx512 && (a & (1u << 5));
        }
    }
#endif
    return isa;
}

int isa_level(const CpuIsa& isa) {
    if (isa.avx512_bf16) return 4;
    if (isa.avx512) return 3;
    if (isa.avx2 && isa.fma) return 2;
    if (isa.avx) return 1;
    return 0;
}

std::string describe_isa(const CpuIsa& isa) { return level_name(isa_level(isa)); }

int blas_core_level(std::string_view core) {
    const std::string c = lower(core);
    if (c == "cooperlake" || c == "sapphirerapids") return 4;
    if (c == "skylakex") return 3;
    if (c == "haswell" || c == "zen") return 2;
    if (c == "sandybridge" || c == "bulldozer" || c == "piledriver" || c == "steamroller" || c == "excavator")
        return 1;
    return 0;
}

std::vector<std::string> better_blas_cores(const CpuIsa& isa, int above) {
    // One core type per level: the one OpenBLAS 0.3.x builds for every CPU of that level.
    static const char* const by_level[] = {"", "Sandybridge", "Haswell", "SkylakeX", "Cooperlake"};
    std::vector<std::string> out;
    for (int level = isa_level(isa); level > above && level >= 1; --level) out.push_back(by_level[level]);
    return out;
}

std::string check_blas_gemm() {
    // The engine runs single-threaded checks here: OpenBLAS keeps small GEMMs on the
    // calling thread, and the check must not start OpenBLAS's pool before --threads.
    std::mt19937 rng(20261129);
    struct Shape { int m, n, k; };
    // Odd sizes reach every edge kernel; k = 520 crosses the K blocking of every core type.
    const Shape shapes[] = {{37, 29, 67}, {70, 33, 520}};
    for (const Shape& s : shapes)
        for (int t = 0; t < 4; ++t)
            for (float beta : {0.0f, 1.0f})
                if (std::string bad = check_one(t & 1, t & 2, s.m, s.n, s.k, beta, rng); !bad.empty()) return bad;
    return "";
}

nlohmann::json BlasChoice::to_json() const {
    return {{"library", library},
            {"core", core},
            {"openblas_default", openblas_default.empty() ? nlohmann::json(nullptr) : nlohmann::json(openblas_default)},
            {"chosen_by", chosen_by},
            {"cpu_isa", isa},
            {"check", check},
            {"note", note}};
}

std::string BlasChoice::line() const {
    return library + " kernels " + core + " (chosen by " + chosen_by + "; CPU " + isa + "; GEMM check " + check +
           "): " + note;
}

BlasDecision decide_blas_core(const BlasState& st) {
    BlasDecision out;
    BlasChoice& ch = out.choice;
    const bool correct = st.check.empty();
    const bool user_set = !st.coretype_env.empty() && lower(st.coretype_env) != lower(st.ours_env);
    ch.library = st.library;
    ch.core = st.running;
    ch.isa = describe_isa(st.isa);
    ch.check = correct ? "passed" : st.check;

    if (user_set) {
        ch.chosen_by = "user (OPENBLAS_CORETYPE)";
        ch.note = "OPENBLAS_CORETYPE=" + st.coretype_env + " is the user's; ptd-engine does not replace it";
        if (!correct)
            out.error = "OpenBLAS " + st.running + " kernels (OPENBLAS_CORETYPE=" + st.coretype_env +
                        ") compute wrong results on this CPU: " + st.check +
                        "; unset OPENBLAS_CORETYPE to let ptd-engine choose, or name another core type";
        return out;
    }

    // The first process records OpenBLAS's own pick; later ones read it back.
    const std::string openblas_default = st.default_env.empty() ? st.running : st.default_env;
    std::vector<std::string> tried = split_commas(st.tried_env);
    const bool ours_running = !st.ours_env.empty() && lower(st.ours_env) == lower(st.running);
    ch.openblas_default = openblas_default;
    ch.chosen_by = ours_running ? "ptd-engine" : "openblas";
    auto run_again_with = [&](const std::string& core) {
        out.reexec = true;
        out.set_env = {{"OPENBLAS_CORETYPE", core},
                       {"PTD_BLAS_CORETYPE", core},
                       {"PTD_BLAS_DEFAULT", openblas_default},
                       {"PTD_BLAS_TRIED", joined(tried)}};
        ch.note = "could not run again with OPENBLAS_CORETYPE=" + core + " (execv failed)";
    };

    // Good enough: correct kernels at the best level this CPU has.
    if (correct && blas_core_level(st.running) >= isa_level(st.isa)) {
        ch.note = !ours_running ? "OpenBLAS's own choice uses the best instructions this CPU has"
                                : "OpenBLAS chose " + openblas_default + " (" +
                                      level_name(blas_core_level(openblas_default)) + " kernels) on this " + ch.isa +
                                      " CPU; " + st.running +
                                      " kernels run instead, checked against a double-precision reference";
        return out;
    }

    // Try the best untried core type above what runs now (above nothing when what runs
    // now computes wrong results). OpenBLAS may not take a name (it then runs its own
    // pick, which is in `tried`): that too moves on to the next.
    if (!contains_core(tried, st.running)) tried.push_back(st.running);
    if (!st.ours_env.empty() && !contains_core(tried, st.ours_env)) tried.push_back(st.ours_env);
    const int floor = correct ? blas_core_level(st.running) : -1;
    for (const std::string& next : better_blas_cores(st.isa, floor)) {
        if (contains_core(tried, next)) continue;
        tried.push_back(next);
        run_again_with(next);
        return out;
    }

    // Nothing better is left. Correct kernels: keep them. Wrong ones: go back to
    // OpenBLAS's own pick once if that is not what runs, else stop.
    if (correct) {
        ch.note = "no better core type computes correctly here (tried " + joined(tried) + ")";
        return out;
    }
    const std::string way_back = openblas_default + "*";  // '*': the way back, taken once
    if (lower(st.running) != lower(openblas_default) && !contains_core(tried, way_back)) {
        tried.push_back(way_back);
        run_again_with(openblas_default);
        return out;
    }
    out.error = "OpenBLAS computes wrong GEMM results on this CPU with every core type tried (" + joined(tried) +
                "), last " + st.running + ": " + st.check + "; set OPENBLAS_CORETYPE to one that works";
    return out;
}

BlasStep choose_blas_core() {
    BlasState st;
    st.library = library_version();
    st.isa = read_cpu_isa();
    st.running = openblas_get_corename();
    st.coretype_env = env_or_empty("OPENBLAS_CORETYPE");
    st.ours_env = env_or_empty("PTD_BLAS_CORETYPE");
    st.default_env = env_or_empty("PTD_BLAS_DEFAULT");
    st.tried_env = env_or_empty("PTD_BLAS_TRIED");
    st.check = check_blas_gemm();
    BlasDecision d = decide_blas_core(st);
    for (const auto& [name, value] : d.set_env) setenv(name.c_str(), value.c_str(), 1);
    g_choice = d.choice;
    return {d.reexec, d.error};
}

const BlasChoice& blas_choice() {
    // A process that never chose (a test or bench running the trainer in-process) reports
    // what runs, as found.
    if (g_choice.library.empty()) {
        const std::string check = check_blas_gemm();
        const std::string set = env_or_empty("OPENBLAS_CORETYPE");
        g_choice.library = library_version();
        g_choice.core = openblas_get_corename();
        g_choice.isa = describe_isa(read_cpu_isa());
        g_choice.check = check.empty() ? "passed" : check;
        g_choice.chosen_by = set.empty() ? "openblas" : "user (OPENBLAS_CORETYPE)";
        g_choice.note = "this process did not run ptd-engine's choice (choose_blas_core)";
    }
    return g_choice;
}

}  // namespace ptd::engine
