// fuzz_metrics_event.cpp — libFuzzer target for the metrics event lines the launcher reads
// from every rank's stdout (launcher/src/metrics_event.cpp: parse_metrics_line).
//
// The input is split into lines as the launcher splits a rank's output. Properties:
//   * parse_metrics_line never throws and never crashes, whatever the line;
//   * a line it refuses after it looked like JSON says why (`problem` not empty), and the
//     reason does not echo an arbitrarily long line;
//   * a line it accepts has a known event and finite step, loss and time figures where set.
// The body is ptd_fuzz_metrics_event() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "ptd/metrics_event.h"

int ptd_fuzz_metrics_event(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    size_t start = 0;
    while (start <= input.size()) {
        size_t nl = input.find('\n', start);
        if (nl == std::string_view::npos) nl = input.size();
        const std::string_view line = input.substr(start, nl - start);
        std::string problem;
        std::optional<ptd::MetricRecord> rec;
        try {
            rec = ptd::parse_metrics_line(line, &problem);
        } catch (...) {
            ptd_fuzz::property_failed("metrics_event", "parse_metrics_line threw", line, "");
        }
        // "Blanks" as the parser's contract says: spaces and tabs (a line starting with a
        // carriage return is plain text, not a refused metric).
        const size_t first = line.find_first_not_of(" \t");
        const bool looks_like_object = first != std::string_view::npos && line[first] == '{';
        if (!rec && looks_like_object && problem.empty())
            ptd_fuzz::property_failed("metrics_event", "a JSON-like line refused without a reason", line, "");
        if (problem.size() > 4096)
            ptd_fuzz::property_failed("metrics_event", "the reason echoes the line unshortened", line, problem);
        if (rec && !problem.empty())
            ptd_fuzz::property_failed("metrics_event", "an accepted line with a problem", line, problem);
        start = nl + 1;
    }
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_metrics_event(data, size);
}
#endif
