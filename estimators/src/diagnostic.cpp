// diagnostic.cpp — formatting of user-facing errors and "did you mean" suggestions.
#include "ptd/diagnostic.h"

#include <algorithm>

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
    if (!d.key.empty()) out += d.key + ": ";
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
    std::string best;
    size_t best_distance = SIZE_MAX;
    for (const std::string& c : candidates) {
        size_t dist = edit_distance(given, c);
        if (dist < best_distance) {
            best_distance = dist;
            best = c;
        }
    }
    size_t limit = std::max<size_t>(2, given.size() / 3);
    return best_distance <= limit ? best : std::string();
}

}  // namespace ptd
