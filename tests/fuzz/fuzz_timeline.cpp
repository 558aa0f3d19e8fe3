// fuzz_timeline.cpp — libFuzzer target for the measured-timeline files ranks write
// (run_dir/timeline/rank-*.tsv; estimators: parse_measured_rank).
//
// Properties checked on every input:
//   * parse_measured_rank never throws and never crashes, whatever the bytes;
//   * a failure carries located diagnostics that name the file;
//   * a success holds only blocks that end no earlier than they start, with step, stream,
//     micro-batch and chunk at or above their minimum.
// The body is ptd_fuzz_timeline() so that tests/fuzz/replay_main.cpp can replay the corpus
// in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "ptd/timeline/timeline.h"

int ptd_fuzz_timeline(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::string file = "<fuzz>/timeline/rank-00000.tsv";
    auto r = ptd_fuzz::parse_checked("timeline", input, file, [&] { return ptd::parse_measured_rank(input, file); });
    if (!r) return 0;
    for (const ptd::TimelineBlock& b : r->blocks) {
        if (b.end_s < b.start_s || b.start_s < 0)
            ptd_fuzz::property_failed("timeline", "accepted a block that ends before it starts", input,
                                      std::to_string(b.start_s) + " .. " + std::to_string(b.end_s));
        if (b.step < 0 || b.micro_batch < -1 || b.chunk < -1 || b.stream < 0)
            ptd_fuzz::property_failed("timeline", "accepted a field below its minimum", input, "");
    }
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_timeline(data, size);
}
#endif
