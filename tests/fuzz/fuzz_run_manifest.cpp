// fuzz_run_manifest.cpp — libFuzzer target for run manifests (RUN_DIR/manifest.json, which
// `ptd watch`, the studio and the launcher read back; launcher/src/run_dir.cpp), and for a
// Slurm run's RUN_DIR/restarts.jsonl (restarts_from_lines), which ptd watch reads beside it.
//
// Properties checked on every input:
//   * manifest_from_json never throws and never crashes, whatever the bytes;
//   * a failure carries located diagnostics that name the file;
//   * a manifest it accepts, written back with manifest_to_json, reads again and writes
//     the same text;
//   * restarts_from_lines never throws, and a failure names restarts.jsonl.
// The body is ptd_fuzz_run_manifest() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "ptd/run_dir.h"

int ptd_fuzz_run_manifest(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const std::string file = "<fuzz>/manifest.json";
    const auto parse = [&](const std::string& text) { return ptd::manifest_from_json(text, file); };
    auto r = ptd_fuzz::parse_checked("run_manifest", input, file, [&] { return parse(input); });
    if (r) ptd_fuzz::check_round_trip("run_manifest", input, *r, parse, ptd::manifest_to_json);
    const std::string lines = "<fuzz>/restarts.jsonl";
    ptd_fuzz::parse_checked("run_manifest", input, lines, [&] { return ptd::restarts_from_lines(input, lines, 8, 2); });
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_run_manifest(data, size);
}
#endif
