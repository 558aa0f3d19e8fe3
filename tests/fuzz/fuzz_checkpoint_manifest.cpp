// fuzz_checkpoint_manifest.cpp — libFuzzer target for checkpoint manifests
// (checkpoints/step-N/manifest.json, read by --resume; engine/io/checkpoint.cpp).
//
// Properties checked on every input:
//   * parse_manifest never throws and never crashes, whatever the bytes;
//   * a failure carries located diagnostics that name the file;
//   * a manifest it accepts lists one shard file per rank of its layout, each a plain file
//     name inside the checkpoint folder, sorted by rank.
// The body is ptd_fuzz_checkpoint_manifest() so that tests/fuzz/replay_main.cpp can replay
// the corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "ptd/engine/checkpoint.h"

int ptd_fuzz_checkpoint_manifest(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::string dir = "<fuzz>/checkpoints/step-00000001";
    const std::string file = dir + "/manifest.json";
    auto r = ptd_fuzz::parse_checked("checkpoint_manifest", input, file,
                                     [&] { return ptd::engine::parse_manifest(input, file, dir); });
    if (!r) return 0;
    if ((int64_t)r->files.size() != r->layout.world)
        ptd_fuzz::property_failed("checkpoint_manifest", "shard count differs from layout.world", input, "");
    for (size_t i = 0; i < r->files.size(); ++i) {
        const auto& f = r->files[i];
        if (f.rank != (int)i) ptd_fuzz::property_failed("checkpoint_manifest", "shards not one per rank in order", input, "");
        if (f.file.empty() || f.file.find('/') != std::string::npos || f.file == "." || f.file == "..")
            ptd_fuzz::property_failed("checkpoint_manifest", "a shard outside the checkpoint folder", input, f.file);
    }
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_checkpoint_manifest(data, size);
}
#endif
