// fuzz_cluster_profile.cpp — libFuzzer target for the cluster profile `ptd calibrate`
// writes and every prediction may read (estimators: load_profile_text).
//
// Properties checked on every input:
//   * load_profile_text never throws and never crashes, whatever the bytes;
//   * a failure carries located diagnostics that name the file;
//   * a profile it accepts, written back with profile_toml, loads again and writes the
//     same text (what is read is what a later run reads).
// The body is ptd_fuzz_cluster_profile() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "ptd/spec/cluster_profile.h"

int ptd_fuzz_cluster_profile(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::string file = "<fuzz>/profile.toml";
    const auto parse = [&](std::string_view text) { return ptd::load_profile_text(text, file); };
    auto r = ptd_fuzz::parse_checked("cluster_profile", input, file, [&] { return parse(input); });
    if (r) ptd_fuzz::check_round_trip("cluster_profile", input, *r, parse, ptd::profile_toml);
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_cluster_profile(data, size);
}
#endif
