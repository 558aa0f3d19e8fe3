// cli_number.h — the one check of a number given on a command line (ptd, ptd-studio,
// ptd-engine). CLI11's Range lets NaN through (every comparison with NaN is false), so
// `--headroom nan` became 0 and `--timeout nan` was accepted; FiniteRange refuses NaN and
// the infinities with a message naming what was given and what is allowed.
// Header-only and CLI11-based: include it only from programs that link CLI11 (the
// estimators library itself never does).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "ptd/common/diagnostic.h"

namespace ptd::cli {

// "" when `text` is a finite number in [lo, hi], else why not.
inline std::string finite_in_range(const std::string& text, double lo, double hi) {
    std::ostringstream allowed;
    allowed << "allowed: a number " << lo << " .. " << hi;
    const char* begin = text.c_str();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(begin, &end);
    if (text.empty() || end != begin + text.size())
        return "got " + quote_input(text) + ", which is not a number; " + allowed.str();
    if (std::isnan(v)) return "got " + quote_input(text) + " (not a number); " + allowed.str();
    if (std::isinf(v) && errno != ERANGE) return "got " + quote_input(text) + " (infinite); " + allowed.str();
    if (std::isinf(v) || (errno == ERANGE && std::fabs(v) > 1))
        return "got " + quote_input(text) + ", which is out of range for a double; " + allowed.str();
    if (v < lo || v > hi) return "got " + quote_input(text) + "; " + allowed.str();
    return "";
}

// CLI::Range for floating-point options, without NaN or infinities.
inline CLI::Validator FiniteRange(double lo, double hi) {
    std::ostringstream desc;
    desc << "FINITE in [" << lo << " - " << hi << "]";
    return CLI::Validator([lo, hi](std::string& text) { return finite_in_range(text, lo, hi); }, desc.str(),
                          "FINITE_RANGE");
}

}  // namespace ptd::cli
