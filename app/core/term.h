// term.h — terminal output: colour only on a TTY without NO_COLOR (and not TERM=dumb), and
// the text helpers every terminal view lays its columns out with.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace ptd {

struct Term {
    bool color = false;
    int width = 100;  // columns, from $COLUMNS or the TTY; 100 when unknown
};

Term detect_term(FILE* stream);

// The group palette (group_colours.h) as a background for group `index`; plain text when
// colour is off.
std::string paint_group(const Term& t, std::string_view text, int index);
std::string bold(const Term& t, std::string_view text);
std::string dim(const Term& t, std::string_view text);
std::string red(const Term& t, std::string_view text);
std::string yellow(const Term& t, std::string_view text);
std::string green(const Term& t, std::string_view text);

// printf into a std::string, of any length.
template <class... Args>
std::string fmt(const char* f, Args... args) {
    const int n = std::snprintf(nullptr, 0, f, args...);
    std::string out((size_t)std::max(0, n), '\0');
    std::snprintf(out.data(), out.size() + 1, f, args...);
    return out;
}

// A duration at 3 significant digits in s, ms or µs: "1.25 s", "12.5 ms", "850 µs".
std::string seconds_text(double s);

// Display width of UTF-8 text without escapes (code points; everything drawn is narrow).
int text_width(std::string_view s);
// `s` padded with spaces to `w` display columns, on the right / on the left.
std::string pad_right(std::string s, int w);
std::string pad_left(std::string s, int w);
// 6.74B, 125.0M, 4.1K: a count with T/B/M/K suffixes.
std::string human_count(double n);

}  // namespace ptd
