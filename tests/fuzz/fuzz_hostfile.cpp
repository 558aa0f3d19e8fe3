// fuzz_hostfile.cpp — libFuzzer target for the DeepSpeed-style hostfile parser.
//
// Properties checked on every input (a violation aborts, which libFuzzer reports as a
// crash and scripts/fuzz.sh saves under tests/fuzz/regressions/hostfile/):
//   * parse_hostfile never throws and never crashes, whatever the bytes;
//   * a failure carries at least one diagnostic, each naming the file with a line ≥ 0,
//     and no message grows with the input (echoed values are shortened by quote_input);
//   * a success lists each host once, with a host name of the allowed characters, a port
//     in 0..65535 and slots in 0..1024, each with its line.
// The body is ptd_fuzz_hostfile() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ptd/hostfile.h"

namespace {

[[noreturn]] void property_failed(const char* what, std::string_view input, const std::string& detail) {
    std::fprintf(stderr, "fuzz_hostfile: property violated: %s\n--- input (%zu bytes) ---\n%.*s\n--- detail ---\n%s\n",
                 what, input.size(), (int)std::min<size_t>(input.size(), 4096), input.data(),
                 detail.substr(0, 4096).c_str());
    std::abort();
}

bool host_char(char c) {
    return std::isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_' || c == ':' || c == '%';
}

}  // namespace

int ptd_fuzz_hostfile(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    const std::string file = "<fuzz>";
    auto r = ptd::parse_hostfile(text, file);
    if (!r) {
        const ptd::Error& e = r.error();
        const std::string formatted = e.str();
        if (e.diagnostics.empty()) property_failed("error without diagnostics", text, formatted);
        for (const ptd::Diagnostic& d : e.diagnostics) {
            if (d.where.file != file) property_failed("diagnostic does not name the file", text, formatted);
            if (d.where.line < 0 || d.where.column < 0) property_failed("negative location", text, formatted);
            if (d.message.empty()) property_failed("empty diagnostic message", text, formatted);
            // The longest fixed text is ~120 characters; echoed tokens are cut at 60.
            if (d.message.size() > 600) property_failed("message echoes the input unshortened", text, formatted);
        }
        return 0;
    }
    for (size_t i = 0; i < r->size(); ++i) {
        const ptd::HostEntry& h = (*r)[i];
        const std::string desc = "host " + h.host + " port " + std::to_string(h.port) + " slots " +
                                 std::to_string(h.slots) + " line " + std::to_string(h.line);
        if (h.host.empty() || !std::all_of(h.host.begin(), h.host.end(), host_char))
            property_failed("accepted a bad host name", text, desc);
        if (h.port < 0 || h.port > 65535) property_failed("port out of range", text, desc);
        if (h.slots < 0 || h.slots > 1024) property_failed("slots out of range", text, desc);
        if (h.line < 1) property_failed("host without its line", text, desc);
        for (size_t j = 0; j < i; ++j)
            if ((*r)[j].host == h.host && (*r)[j].port == h.port) property_failed("host listed twice", text, desc);
    }
    if (r->empty()) property_failed("success with no hosts", text, "");
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_hostfile(data, size);
}
#endif
