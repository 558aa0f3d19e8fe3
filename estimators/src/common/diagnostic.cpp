// diagnostic.cpp — formatting of user-facing errors and "did you mean" suggestions.
#include "ptd/common/diagnostic.h"

#include <algorithm>
#include <cstdio>

namespace ptd {

std::string format_diagnostic(const Diagnostic& d) {
    std::string out;
    if (!d.where.file.empty()) {
        out += d.where.file;
        if (d.where.line > 0) {
            out += ':' + std::to_string(d.where.line);
            if (d.where.column > 0) out += ':' + std::to_string(d.where.column);
        }
        out += ": ";
    }
    out += "error: ";
    if (!d.key.empty()) {
        // Keys can come from the input too (an unknown key): shown quoted when they are
        // long or have characters that would not show.
        std::string shown = quote_input(d.key);
        out += (shown.size() == d.key.size() + 2 ? d.key : shown) + ": ";
    }
    out += d.message;
    return out;
}

std::string format_diagnostics(const std::vector<Diagnostic>& ds) {
    std::string out;
    for (const Diagnostic& d : ds) {
        out += format_diagnostic(d);
        out += '\n';
    }
    return out;
}

std::string Error::one_line() const {
    std::string out;
    for (const Diagnostic& d : diagnostics) {
        std::string text = format_diagnostic(d);
        if (size_t at = text.find("error: "); at != std::string::npos) text.erase(at, 7);
        while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
        if (!out.empty()) out += "; ";
        out += text;
    }
    return out;
}

std::string format_count(unsigned long long n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// Length of the valid UTF-8 sequence at s[i] and its code point; 0 when invalid.
static size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp) {
    const unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return 0;
    cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
        const unsigned char cc = (unsigned char)s[i + k];
        if ((cc & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (cc & 0x3F);
    }
    static const char32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// Characters that print as nothing (or as a blank that is not a space).
static bool invisible(char32_t cp) {
    return cp == 0xFEFF || cp == 0x00A0 || cp == 0x00AD || (cp >= 0x200B && cp <= 0x200F) ||
           (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x80 && cp < 0xA0);
}

std::string quote_input(std::string_view value, size_t max_chars) {
    std::string out = "\"";
    size_t chars = 0, i = 0;
    char buf[16];
    while (i < value.size()) {
        if (chars == max_chars) {
            out += "\u2026\" (" + format_count(value.size()) + " bytes)";
            return out;
        }
        char32_t cp = 0;
        const size_t len = utf8_sequence(value, i, cp);
        if (len == 0) {
            std::snprintf(buf, sizeof buf, "\\x%02X", (unsigned char)value[i]);
            out += buf;
            i += 1;
        } else {
            switch (cp) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\t': out += "\\t"; break;
                case '\r': out += "\\r"; break;
                default:
                    if (cp < 0x20 || cp == 0x7F) {
                        std::snprintf(buf, sizeof buf, "\\x%02X", (unsigned)cp);
                        out += buf;
                    } else if (invisible(cp)) {
                        std::snprintf(buf, sizeof buf, "\\u{%04X}", (unsigned)cp);
                        out += buf;
                    } else {
                        out.append(value.substr(i, len));
                    }
            }
            i += len;
        }
        ++chars;
    }
    return out + "\"";
}

// Levenshtein distance, two rows.
static size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string closest_match(std::string_view given, const std::vector<std::string>& candidates) {
    // A name cut short at a separator ("h100-96gb" for "h100-96gb-500w") is far by edit
    // distance but plainly meant: the one candidate that extends it wins.
    if (given.size() >= 3) {
        const std::string* extended = nullptr;
        int count = 0;
        for (const std::string& c : candidates)
            if (c.size() > given.size() && c.starts_with(given) && std::string_view("-_.").find(c[given.size()]) != std::string_view::npos)
                extended = &c, ++count;
        if (count == 1) return *extended;
    }
    std::string best;
    size_t best_distance = SIZE_MAX;
    const size_t limit = std::max<size_t>(2, given.size() / 3);
    for (const std::string& c : candidates) {
        // The distance is at least the difference in length: skip hopeless candidates
        // before the quadratic work (a 4 MB value must not take seconds).
        const size_t gap = given.size() > c.size() ? given.size() - c.size() : c.size() - given.size();
        if (gap > limit) continue;
        size_t dist = edit_distance(given, c);
        if (dist < best_distance) {
            best_distance = dist;
            best = c;
        }
    }
    return best_distance <= limit ? best : std::string();
}

}  // namespace ptd
