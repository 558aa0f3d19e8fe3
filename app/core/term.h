// term.h — terminal output: colour only on a TTY without NO_COLOR (and not TERM=dumb).
#pragma once

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

}  // namespace ptd
