// fuzz_job_toml.cpp — libFuzzer target for the job-file loader (load_job_text).
//
// Properties checked on every input (a violation aborts, which libFuzzer reports as a
// crash and scripts/fuzz.sh saves under tests/fuzz/regressions/job_toml/):
//   * load_job_text never throws and never crashes, whatever the bytes;
//   * a failure carries at least one diagnostic and formats (Error::str());
//   * round trip: a spec that loads is saved with save_job_toml, the text loads again,
//     and model, cluster, parallel, training and launch are equal to the first load.
// The body is ptd_fuzz_job_toml() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"

namespace {

[[noreturn]] void property_failed(const char* what, std::string_view input, const std::string& detail) {
    std::fprintf(stderr, "fuzz_job_toml: property violated: %s\n--- input (%zu bytes) ---\n%.*s\n--- detail ---\n%s\n",
                 what, input.size(), (int)std::min<size_t>(input.size(), 4096), input.data(), detail.c_str());
    std::abort();
}

// Which parts differ, for the abort message.
std::string differences(const ptd::JobSpec& a, const ptd::JobSpec& b) {
    std::string out;
    if (!(a.model == b.model)) out += "model ";
    if (!(a.cluster == b.cluster)) out += "cluster ";
    if (!(a.parallel == b.parallel)) out += "parallel ";
    if (!(a.training == b.training)) out += "training ";
    if (!(a.launch == b.launch)) out += "launch ";
    if (!(a.estimate == b.estimate)) out += "estimate ";
    return out;
}

}  // namespace

int ptd_fuzz_job_toml(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    const ptd::PresetCatalog& presets = ptd::embedded_presets();

    auto first = ptd::load_job_text(text, "<fuzz>", presets);
    if (!first) {
        std::string formatted = first.error().str();
        if (first.error().diagnostics.empty()) property_failed("error without diagnostics", text, formatted);
        return 0;
    }

    std::string saved = ptd::save_job_toml(*first);
    auto second = ptd::load_job_text(saved, "<fuzz-roundtrip>", presets);
    if (!second)
        property_failed("saved job does not load again", text,
                        "--- saved ---\n" + saved + "--- errors ---\n" + second.error().str());
    std::string diff = differences(*first, *second);
    if (!diff.empty())
        property_failed("round trip changed the job", text,
                        "differs in: " + diff + "\n--- saved ---\n" + saved + "--- saved again ---\n" +
                            ptd::save_job_toml(*second));
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_job_toml(data, size);
}
#endif
