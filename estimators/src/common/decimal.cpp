// decimal.cpp — the shortest round-trip text of a double, and decimal ratios (decimal.h).
#include "ptd/common/decimal.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ptd {

std::string shortest_decimal(double v) {
    // The shortest digits that read back to v, laid out as Python's repr does: fixed
    // notation for decimal exponents -4 .. 15 (0.0003, 1500000.0 without ".0"), else
    // scientific (1e-05, 1e+16).
    char buf[400];
    auto sci = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string s(buf, sci.ptr);
    const size_t e = s.find('e');
    const int exponent = e == std::string::npos ? 0 : std::atoi(s.c_str() + e + 1);
    if (exponent < -4 || exponent >= 16 || !std::isfinite(v)) return s;
    auto fixed = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, fixed.ptr);
}

double decimal_ratio(double numerator, double denominator) {
    if (denominator == 0) return 0.0;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.15g", numerator / denominator);
    return std::strtod(buf, nullptr);
}

}  // namespace ptd
