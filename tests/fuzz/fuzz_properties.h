// fuzz_properties.h — what every fuzz target of a file or network input checks of a
// parser's answer: a failure is reported, not thrown; it carries located diagnostics with
// a message; and a violated property aborts with the input shown (libFuzzer reports the
// abort as a crash, scripts/fuzz.sh saves the input under tests/fuzz/regressions/<target>/).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "ptd/common/diagnostic.h"

namespace ptd_fuzz {

[[noreturn]] inline void property_failed(const char* target, const char* what, std::string_view input,
                                         const std::string& detail) {
    std::fprintf(stderr, "fuzz_%s: property violated: %s\n--- input (%zu bytes) ---\n%.*s\n--- detail ---\n%s\n", target,
                 what, input.size(), (int)std::min<size_t>(input.size(), 4096), input.data(),
                 detail.substr(0, 4096).c_str());
    std::abort();
}

// A parser's error: at least one diagnostic, each with a message and no negative location.
// `file`, when not empty, must be named by every diagnostic.
inline void check_error(const char* target, const ptd::Error& e, std::string_view input, const std::string& file = "") {
    const std::string formatted = e.str();
    if (e.diagnostics.empty()) property_failed(target, "error without diagnostics", input, formatted);
    for (const ptd::Diagnostic& d : e.diagnostics) {
        if (d.message.empty()) property_failed(target, "empty diagnostic message", input, formatted);
        if (d.where.line < 0 || d.where.column < 0) property_failed(target, "negative location", input, formatted);
        if (!file.empty() && formatted.find(file) == std::string::npos)
            property_failed(target, "error does not name the file", input, formatted);
    }
}

// Runs `parse()` (a Result-returning parser of `input`), failing the property when it throws
// or when its error breaks check_error. Returns the result, for the target's own checks.
template <class Parse>
auto parse_checked(const char* target, std::string_view input, const std::string& file, Parse parse) -> decltype(parse()) {
    try {
        auto r = parse();
        if (!r) check_error(target, r.error(), input, file);
        return r;
    } catch (const std::exception& e) {
        property_failed(target, "the parser threw", input, e.what());
    } catch (...) {
        property_failed(target, "the parser threw", input, "(not a std::exception)");
    }
}

// What a parser accepted, written back by `write`, parses again (`parse_text`) and writes
// the same text: what is read is what a later reader reads.
template <class Value, class ParseText, class Write>
void check_round_trip(const char* target, std::string_view input, const Value& value, ParseText parse_text, Write write) {
    const std::string written = write(value);
    auto again = parse_text(written);
    if (!again) property_failed(target, "its own output does not parse", input, again.error().str() + "\n" + written);
    if (write(*again) != written) property_failed(target, "the round trip changed the value", input, written);
}

}  // namespace ptd_fuzz
