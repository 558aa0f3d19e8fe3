// fuzz_hf_config.cpp — libFuzzer target for the Hugging Face config.json importer.
//
// Properties checked on every input (a violation aborts, which libFuzzer reports as a
// crash and scripts/fuzz.sh saves under tests/fuzz/regressions/hf_config/):
//   * import_hf_config_text never throws and never crashes;
//   * a failure carries at least one diagnostic, each naming the file, and formats;
//   * a success is a model PTD can count: positive sizes, whole head dimension (or a given
//     head_dim), kv_heads dividing heads, top_k within experts, an MoE layer after the dense ones.
// The body is ptd_fuzz_hf_config() so that tests/fuzz/replay_main.cpp can replay the
// corpus in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ptd/spec/hf_import.h"

namespace {

[[noreturn]] void property_failed(const char* what, std::string_view input, const std::string& detail) {
    std::fprintf(stderr, "fuzz_hf_config: property violated: %s\n--- input (%zu bytes) ---\n%.*s\n--- detail ---\n%s\n",
                 what, input.size(), (int)std::min<size_t>(input.size(), 4096), input.data(), detail.c_str());
    std::abort();
}

void check(std::string_view text, int seq_override) {
    const std::string file = "<fuzz>";
    auto r = ptd::import_hf_config_text(text, file, seq_override);
    if (!r) {
        const ptd::Error& e = r.error();
        std::string formatted = e.str();
        if (e.diagnostics.empty()) property_failed("error without diagnostics", text, formatted);
        for (const ptd::Diagnostic& d : e.diagnostics) {
            if (d.where.file != file) property_failed("diagnostic does not name the file", text, formatted);
            if (d.message.empty()) property_failed("empty diagnostic message", text, formatted);
            if (d.where.line < 0 || d.where.column < 0) property_failed("negative location", text, formatted);
        }
        return;
    }
    const ptd::ModelSpec& m = r->model;
    std::string desc = "layers=" + std::to_string(m.layers) + " hidden=" + std::to_string(m.hidden) +
                       " heads=" + std::to_string(m.heads) + " kv_heads=" + std::to_string(m.kv_heads) +
                       " ffn=" + std::to_string(m.ffn_hidden) + " vocab=" + std::to_string(m.vocab) +
                       " seq=" + std::to_string(m.seq_len) + " experts=" + std::to_string(m.experts) +
                       " top_k=" + std::to_string(m.top_k);
    if (m.layers <= 0 || m.hidden <= 0 || m.heads <= 0 || m.kv_heads <= 0 || m.ffn_hidden <= 0 ||
        m.vocab <= 0 || m.seq_len <= 0)
        property_failed("non-positive size in an imported model", text, desc);
    // mlaio: a given head_dim (Qwen3, MLA's qk_nope_head_dim) is the head width instead.
    if (m.head_dim_given == 0 && m.hidden % m.heads != 0) property_failed("hidden not divisible by heads", text, desc);
    if (m.experts > 1 && m.first_dense_layers >= m.layers) property_failed("no MoE layer left", text, desc);
    if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) property_failed("bad kv_heads", text, desc);
    if (m.experts < 0 || m.top_k < 0 || (m.experts > 0 && (m.top_k < 1 || m.top_k > m.experts)))
        property_failed("bad experts/top_k", text, desc);
    if (seq_override > 0 && m.seq_len != seq_override) property_failed("seq_len override ignored", text, desc);
    if (m.name.empty()) property_failed("empty model name", text, desc);
    if (!(m.norm_eps > 0) || !(m.rope_theta > 0)) property_failed("bad norm_eps/rope_theta", text, desc);
}

}  // namespace

int ptd_fuzz_hf_config(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    check(text, 0);
    // Also exercise the sequence-length override (it makes max_position_embeddings optional).
    if (size % 2 == 1) check(text, 1 + (int)(size % 4096));
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_hf_config(data, size);
}
#endif
