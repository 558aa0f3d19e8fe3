// pipeline_layout.cpp — reads Megatron-core's pipeline layout strings (pipeline_layout.h).
// The grammar is Megatron-core's (megatron/core/transformer/pipeline_parallel_layer_layout.py,
// main d98e8a6): commas dropped, "(group)*n" unrolled, then "x*n", then "|" splits chunks.
#include "ptd/spec/pipeline_layout.h"

#include <cctype>

namespace ptd {

namespace {

bool layout_letter(char c) { return c == 'E' || c == 't' || c == 'm' || c == 'L'; }

// Reads the count after a "*" at text[i] (i at the "*"); advances i past the digits.
std::expected<long long, std::string> repeat_count(std::string_view text, size_t& i) {
    const size_t star = i++;
    long long n = 0;
    const size_t digits = i;
    while (i < text.size() && std::isdigit((unsigned char)text[i])) {
        n = n * 10 + (text[i] - '0');
        if (n > kMaxLayoutItems)
            return std::unexpected("the count after \"*\" at character " + std::to_string(star + 1) + " is over " +
                                   std::to_string(kMaxLayoutItems));
        ++i;
    }
    if (i == digits)
        return std::unexpected("\"*\" at character " + std::to_string(star + 1) + " is not followed by a count");
    return n;
}

}  // namespace

std::expected<PipelineLayout, std::string> parse_pipeline_layout(std::string_view text) {
    const std::string allowed =
        "; allowed: chunks of E (embedding), t (transformer layer), m (MTP layer), L (loss) separated by \"|\", with x*n "
        "and (…)*n repeats, e.g. \"Et|(tt|)*30mL\"";
    if (text.empty()) return std::unexpected("is empty" + allowed);
    // Unroll into a flat string of letters and "|".
    std::string flat;
    auto append = [&](std::string_view piece, long long times) -> bool {
        if ((long long)flat.size() + (long long)piece.size() * times > kMaxLayoutItems) return false;
        for (long long k = 0; k < times; ++k) flat.append(piece);
        return true;
    };
    auto too_long = [&] {
        return std::unexpected("unrolls to more than " + std::to_string(kMaxLayoutItems) + " letters" + allowed);
    };
    for (size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (c == ',') {
            ++i;
        } else if (c == '(') {
            const size_t close = text.find(')', i + 1);
            if (close == std::string_view::npos)
                return std::unexpected("\"(\" at character " + std::to_string(i + 1) + " is never closed" + allowed);
            std::string group;
            for (size_t k = i + 1; k < close; ++k) {
                const char g = text[k];
                if (g == '(') return std::unexpected("groups nest at character " + std::to_string(k + 1) + allowed);
                if (g == '*') {
                    // A repeat inside the group: unroll it in the group.
                    if (group.empty() || !layout_letter(group.back()))
                        return std::unexpected("\"*\" at character " + std::to_string(k + 1) + " follows no letter" + allowed);
                    size_t j = k;
                    const auto n = repeat_count(text, j);
                    if (!n) return std::unexpected(n.error() + allowed);
                    if (*n == 0) group.pop_back();
                    else if ((long long)group.size() + *n > kMaxLayoutItems) return too_long();
                    else group.append((size_t)(*n - 1), group.back());
                    k = j - 1;
                } else if (g != ',') {
                    if (!layout_letter(g) && g != '|')
                        return std::unexpected("character " + std::to_string(k + 1) + " is \"" + std::string(1, g) + "\"" + allowed);
                    group.push_back(g);
                }
            }
            i = close + 1;
            if (i >= text.size() || text[i] != '*')
                return std::unexpected("the group closed at character " + std::to_string(close + 1) + " has no \"*n\" after it" + allowed);
            const auto n = repeat_count(text, i);
            if (!n) return std::unexpected(n.error() + allowed);
            if (!append(group, *n)) return too_long();
        } else if (c == '*') {
            if (flat.empty() || !layout_letter(flat.back()))
                return std::unexpected("\"*\" at character " + std::to_string(i + 1) + " follows no letter" + allowed);
            const char letter = flat.back();
            const auto n = repeat_count(text, i);
            if (!n) return std::unexpected(n.error() + allowed);
            flat.pop_back();
            if (!append(std::string_view(&letter, 1), *n)) return too_long();
        } else if (layout_letter(c) || c == '|') {
            if (!append(std::string_view(&c, 1), 1)) return too_long();
            ++i;
        } else {
            return std::unexpected("character " + std::to_string(i + 1) + " is \"" + std::string(1, c) + "\"" + allowed);
        }
    }
    PipelineLayout out;
    out.chunks.emplace_back();
    for (char c : flat) {
        LayoutChunk& ch = out.chunks.back();
        // Megatron-core (validate_layer_layout): the flattened layout starts with E and ends with
        // L, and no decoder layer follows an MTP layer.
        if (ch.loss && c != '|') return std::unexpected(std::string("has a layer after the loss (L) in its chunk") + allowed);
        if (c == 'E' && (ch.decoder || ch.mtp))
            return std::unexpected(std::string("has a layer before the embedding (E) in its chunk") + allowed);
        if (c == 't' && ch.mtp)
            return std::unexpected(std::string("has a transformer layer (t) after an MTP layer (m); Megatron-core places "
                                               "the decoder layers first") + allowed);
        switch (c) {
            case '|': out.chunks.emplace_back(); break;
            case 't': ++ch.decoder; break;
            case 'm': ++ch.mtp; break;
            case 'E':
                if (ch.embedding) return std::unexpected(std::string("names the embedding (E) twice") + allowed);
                ch.embedding = true;
                break;
            case 'L':
                if (ch.loss) return std::unexpected(std::string("names the loss (L) twice") + allowed);
                ch.loss = true;
                break;
        }
    }
    return out;
}

std::expected<void, std::string> check_pipeline_layout(const PipelineLayout& layout, int pp, int vpp, int layers,
                                                       int mtp_layers) {
    const auto& ch = layout.chunks;
    const long long want = (long long)pp * std::max(vpp, 1);
    if ((long long)ch.size() != want)
        return std::unexpected("has " + std::to_string(ch.size()) + " chunks; allowed: pp·vpp = " + std::to_string(pp) + "·" +
                               std::to_string(std::max(vpp, 1)) + " = " + std::to_string(want) + " (one per virtual stage)");
    int embeddings = 0, losses = 0, decoders = 0, mtps = 0;
    for (const LayoutChunk& c : ch) embeddings += c.embedding, losses += c.loss, decoders += c.decoder, mtps += c.mtp;
    if (embeddings != 1 || !ch.front().embedding)
        return std::unexpected(std::string("has the embedding (E) ") + (embeddings == 0 ? "nowhere" : "outside the first chunk") +
                               "; allowed: E once, at the start of the first chunk");
    if (losses != 1 || !ch.back().loss)
        return std::unexpected(std::string("has the loss (L) ") + (losses == 0 ? "nowhere" : "outside the last chunk") +
                               "; allowed: L once, in the last chunk");
    if (decoders != layers)
        return std::unexpected("holds " + std::to_string(decoders) + " transformer layers (t), but the model has " +
                               std::to_string(layers) + "; allowed: one t per layer");
    if (mtps != mtp_layers)
        return std::unexpected("holds " + std::to_string(mtps) + " MTP layers (m), but the model has mtp_layers = " +
                               std::to_string(mtp_layers) + "; allowed: one m per MTP layer");
    if (mtps > 0 && ch.back().mtp != mtps)
        return std::unexpected("places MTP layers (m) outside the last chunk; allowed: every m in the last chunk, beside "
                               "the loss (PTD models the MTP modules on the last stage; Megatron-core's standalone MTP "
                               "stage is not modelled)");
    return {};
}

std::vector<int> layout_layers_per_chunk(const PipelineLayout& layout) {
    std::vector<int> out;
    out.reserve(layout.chunks.size());
    for (const LayoutChunk& c : layout.chunks) out.push_back(c.decoder);
    return out;
}

PipelineLayout layout_of_split(const std::vector<int>& layers_per_chunk, int mtp_layers) {
    PipelineLayout out;
    for (int l : layers_per_chunk) out.chunks.push_back(LayoutChunk{.decoder = l});
    if (out.chunks.empty()) out.chunks.emplace_back();
    out.chunks.front().embedding = true;
    out.chunks.back().mtp = mtp_layers;
    out.chunks.back().loss = true;
    return out;
}

std::string format_pipeline_layout(const PipelineLayout& layout) {
    auto repeat = [](char letter, int n) {
        return n <= 0 ? std::string() : n == 1 ? std::string(1, letter) : std::string(1, letter) + "*" + std::to_string(n);
    };
    std::vector<std::string> texts;
    for (const LayoutChunk& c : layout.chunks)
        texts.push_back((c.embedding ? "E" : "") + repeat('t', c.decoder) + repeat('m', c.mtp) + (c.loss ? "L" : ""));
    std::string out;
    for (size_t i = 0; i < texts.size();) {
        size_t run = 1;
        while (i + run + 1 < texts.size() && texts[i + run] == texts[i]) ++run;  // never the last chunk
        if (run >= 3) {
            out += "(" + texts[i] + "|)*" + std::to_string(run);
        } else {
            for (size_t k = 0; k < run; ++k) out += texts[i] + (i + k + 1 < texts.size() ? "|" : "");
        }
        i += run;
    }
    return out;
}

std::vector<int> torchtitan_default_split(int layers, int chunks, int framework_version) {
    if (layers < 1 || chunks < 1) return {};
    if (chunks == 1) return {layers};
    std::vector<int> out((size_t)chunks);
    if (framework_version > 0 && framework_version < kTorchtitanWeightedSplitFrom) {
        // generate_split_points: "Total stages cannot be greater than the number of layers".
        if (chunks > layers) return {};
        const int base = layers / chunks;
        int extra = layers % chunks, placed = base;
        out[0] = base;
        for (int k = 1; k + 1 < chunks; ++k) {
            out[(size_t)k] = base + (extra > 0 ? 1 : 0);
            if (extra > 0) --extra;
            placed += out[(size_t)k];
        }
        out.back() = layers - placed;
        return out;
    }
    // generate_llm_fqn_per_model_part: raises for more stages than effective layers and for a
    // weight (1) above the layers per stage.
    const int effective = layers + 2, base = effective / chunks, extra = effective % chunks;
    if (chunks > effective || base < 1) return {};
    for (int k = 0; k < chunks; ++k) out[(size_t)k] = base + (k < extra ? 1 : 0) - (k == 0 || k + 1 == chunks ? 1 : 0);
    return out;
}

}  // namespace ptd
