// diagnostic.h — user-facing errors: where (file:line:column), which key, what was
// given, what is allowed. Every fallible public function returns ptd::Result<T>
// (std::expected) carrying one or more Diagnostics; programmer errors use assert.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace ptd {

// A position in a source file; line/column are 1-based, 0 = unknown.
struct SourceLoc {
    std::string file;  // path as the user gave it ("<embedded>" for compiled-in presets)
    int line = 0;
    int column = 0;
};

// One problem with user input.
//   key:     dotted key path, e.g. "parallel.tp" ("" when the whole file is at fault)
//   message: says what was given and what is allowed, e.g.
//            "got 3, but heads (64) must be divisible by tp; allowed tp: 1, 2, 4, 8, 16, 32, 64"
struct Diagnostic {
    SourceLoc where;
    std::string key;
    std::string message;
};

// "file:line:col: error: key: message" (parts that are unknown are left out).
std::string format_diagnostic(const Diagnostic& d);

// All diagnostics, one per line.
std::string format_diagnostics(const std::vector<Diagnostic>& ds);

// A failure: at least one diagnostic.
struct Error {
    std::vector<Diagnostic> diagnostics;

    Error() = default;
    explicit Error(Diagnostic d) { diagnostics.push_back(std::move(d)); }
    explicit Error(std::vector<Diagnostic> ds) : diagnostics(std::move(ds)) {}
    std::string str() const { return format_diagnostics(diagnostics); }
    // The diagnostics on one line, without the "error: " word and the trailing newline,
    // joined by "; " — for embedding in a message that already says it is an error
    // (ptd-engine's "rank 3: error: ...").
    std::string one_line() const;
};

template <class T>
using Result = std::expected<T, Error>;

// Shorthand for `return ptd::fail(loc, key, msg);` inside a Result-returning function.
inline std::unexpected<Error> fail(SourceLoc where, std::string key, std::string message) {
    return std::unexpected(Error(Diagnostic{std::move(where), std::move(key), std::move(message)}));
}

// A whole number with thousands separators: 4194304 → "4,194,304".
std::string format_count(unsigned long long n);

// A value the user gave, as every message echoes it: double-quoted, with control
// characters, invalid UTF-8 and invisible characters (a byte-order mark, zero-width
// spaces) escaped as \n, \xEF, \u{FEFF}, and cut after `max_chars` characters with the
// full length appended: "aaaa…" (4,194,304 bytes).
std::string quote_input(std::string_view value, size_t max_chars = 60);

// Closest candidate for "did you mean" hints: the only one that extends `given` past a
// separator ("h100-96gb" → "h100-96gb-500w"), else the closest by edit distance; "" when
// nothing is close (distance > max(2, len/3)).
std::string closest_match(std::string_view given, const std::vector<std::string>& candidates);

}  // namespace ptd
