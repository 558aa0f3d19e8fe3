// term.cpp — TTY detection, ANSI colour helpers and the column text helpers.
#include "term.h"

#include "group_colours.h"

#include <cstdlib>
#include <sys/ioctl.h>
#include <unistd.h>

namespace ptd {

Term detect_term(FILE* stream) {
    Term t;
    const int fd = fileno(stream);
    const char* no_color = std::getenv("NO_COLOR");
    const char* term = std::getenv("TERM");
    t.color = isatty(fd) && !(no_color && *no_color) && !(term && std::string_view(term) == "dumb");
    winsize ws{};
    if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) t.width = ws.ws_col;
    else if (const char* cols = std::getenv("COLUMNS")) t.width = std::max(40, std::atoi(cols));
    return t;
}

static std::string sgr(const Term& t, std::string_view code, std::string_view text) {
    if (!t.color) return std::string(text);
    return "\x1b[" + std::string(code) + "m" + std::string(text) + "\x1b[0m";
}

std::string paint_group(const Term& t, std::string_view text, int index) {
    return sgr(t, "30;48;5;" + std::to_string(group_xterm_colour(index)), text);
}
std::string bold(const Term& t, std::string_view text) { return sgr(t, "1", text); }
std::string dim(const Term& t, std::string_view text) { return sgr(t, "2", text); }
std::string red(const Term& t, std::string_view text) { return sgr(t, "1;31", text); }
std::string yellow(const Term& t, std::string_view text) { return sgr(t, "33", text); }
std::string green(const Term& t, std::string_view text) { return sgr(t, "32", text); }

std::string seconds_text(double s) {
    char buf[32];
    if (s >= 1) std::snprintf(buf, sizeof buf, "%.3g s", s);
    else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
    else std::snprintf(buf, sizeof buf, "%.3g µs", s * 1e6);
    return buf;
}

int text_width(std::string_view s) {
    int w = 0;
    for (unsigned char ch : s) w += (ch & 0xC0) != 0x80;
    return w;
}
std::string pad_right(std::string s, int w) { return s + std::string((size_t)std::max(0, w - text_width(s)), ' '); }
std::string pad_left(std::string s, int w) { return std::string((size_t)std::max(0, w - text_width(s)), ' ') + s; }

std::string human_count(double n) {
    if (n >= 1e12) return fmt("%.2fT", n / 1e12);
    if (n >= 1e9) return fmt("%.2fB", n / 1e9);
    if (n >= 1e6) return fmt("%.1fM", n / 1e6);
    if (n >= 1e3) return fmt("%.1fK", n / 1e3);
    return fmt("%.0f", n);
}

}  // namespace ptd
