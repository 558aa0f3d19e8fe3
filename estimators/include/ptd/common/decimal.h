// decimal.h — floats written back as the decimals a user typed: the shortest text that reads
// back to the same double, and ratios / derived defaults rounded to 15 significant digits so
// a binary quotient (3e-4 / 10 = 2.9999999999999997e-05) prints as the decimal (3e-05).
#pragma once

#include <string>

namespace ptd {

// Shortest decimal text that reads back to the same double (std::to_chars), e.g.
// 0.0003, 1e-05, 0.1. Every float an export prints goes through this.
std::string shortest_decimal(double v);
// A ratio of two user-given decimals (min_lr / lr, lr / 10): rounded to 15 significant digits
// first, so 3e-4 / 3e-3 is 0.1, not the binary quotient 0.09999999999999999.
double decimal_ratio(double numerator, double denominator);

}  // namespace ptd
