// data.cpp — the token sources behind data.h: path resolution, the llm.c header and
// token checks, byte-level text, the in-memory source, and the synthetic Markov stream.
// Files are read into memory once and kept at their stored width (uint8 / uint16);
// read_sequences widens to int32.
#include "ptd/engine/data.h"

#include "ptd/common/file_read.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace ptd::engine {
namespace fs = std::filesystem;

const char* to_string(TokenSourceKind k) {
    switch (k) {
    case TokenSourceKind::synthetic: return "synthetic";
    case TokenSourceKind::text: return "text";
    case TokenSourceKind::llmc: return "llm.c";
    case TokenSourceKind::memory: return "memory";
    }
    return "?";
}

namespace {

// "1.1 MB" (decimal units, as `ls -h --si` and most download pages show).
std::string human_bytes(uint64_t n) {
    const char* units[] = {"B", "kB", "MB", "GB", "TB"};
    double v = double(n);
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        ++u;
    }
    char buf[32];
    if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
    else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

int32_t load_le_i32(const uint8_t* p) {
    return int32_t(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
                   (uint32_t(p[3]) << 24));
}

// Start offset of sequence `seq` in a file of `n` tokens: (seq · T) mod (n − T), or 0
// when the file is too short (positions then wrap modulo n).
uint64_t sequence_start(int64_t seq, int T, uint64_t n) {
    if (n <= uint64_t(T)) return 0;
    const unsigned __int128 span = n - uint64_t(T);
    return uint64_t((static_cast<unsigned __int128>(uint64_t(seq)) * uint64_t(T)) % span);
}

// A file (or memory) source holding tokens of type Elem.
template <class Elem>
class StoredSource final : public TokenSource {
public:
    StoredSource(TokenSourceKind kind, std::string name, uint64_t file_bytes,
                 std::vector<Elem> tokens)
        : kind_(kind), name_(std::move(name)), file_bytes_(file_bytes),
          tokens_(std::move(tokens)) {}

    TokenSourceKind kind() const override { return kind_; }

    std::string describe() const override {
        std::string what = kind_ == TokenSourceKind::text   ? "text file "
                           : kind_ == TokenSourceKind::llmc ? "llm.c token file "
                                                            : "in-memory tokens ";
        std::string out = what + name_ + ": ";
        if (kind_ != TokenSourceKind::memory) out += human_bytes(file_bytes_) + ", ";
        return out + std::to_string(tokens_.size()) + " tokens";
    }

    int64_t num_tokens() const override { return int64_t(tokens_.size()); }

    Result<void> check_length(int T) const override {
        const uint64_t n = tokens_.size();
        if (T >= 1 && n >= uint64_t(T) + 1) return {};
        return fail(SourceLoc{name_, 0, 0}, "training.data",
                    "\"" + name_ + "\" has " + std::to_string(n) + " tokens, but one sequence " +
                        "needs seq_len + 1 = " + std::to_string(int64_t(T) + 1) +
                        " tokens (model.seq_len = " + std::to_string(T) +
                        "); use a longer file or a shorter seq_len");
    }

    void read_sequences(int64_t first, int64_t count, int T, int32_t* out) const override {
        const uint64_t n = tokens_.size();
        const size_t row = size_t(T) + 1;
        for (int64_t s = 0; s < count; ++s) {
            int32_t* dst = out + size_t(s) * row;
            if (n == 0) {
                std::fill(dst, dst + row, 0);
                continue;
            }
            const uint64_t start = sequence_start(first + s, T, n);
            if (start + row <= n) {
                const Elem* src = tokens_.data() + start;
                for (size_t j = 0; j < row; ++j) dst[j] = int32_t(src[j]);
            } else {
                for (size_t j = 0; j < row; ++j) dst[j] = int32_t(tokens_[(start + j) % n]);
            }
        }
    }

private:
    TokenSourceKind kind_;
    std::string name_;
    uint64_t file_bytes_;
    std::vector<Elem> tokens_;
};

class SyntheticSource final : public TokenSource {
public:
    SyntheticSource(int vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {}
    TokenSourceKind kind() const override { return TokenSourceKind::synthetic; }
    std::string describe() const override {
        return "synthetic: seed " + std::to_string(seed_) + ", vocab " + std::to_string(vocab_) +
               ", next = (3·prev + 1) mod vocab with 1/16 noise";
    }
    int64_t num_tokens() const override { return -1; }
    Result<void> check_length(int T) const override {
        if (T >= 1) return {};
        return fail(SourceLoc{}, "training.data",
                    "synthetic data needs seq_len ≥ 1; got " + std::to_string(T));
    }
    void read_sequences(int64_t first, int64_t count, int T, int32_t* out) const override {
        const size_t row = size_t(T) + 1;
        for (int64_t s = 0; s < count; ++s)
            synthetic_sequence(seed_, vocab_, first + s, T, out + size_t(s) * row);
    }

private:
    int vocab_;
    uint64_t seed_;
};

uint64_t mix64(uint64_t x) {  // SplitMix64 finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Reads a whole data file through the shared reader: regular files only (a FIFO or
// /dev/zero would block or grow without end); no size cap, data files are large.
Result<std::vector<uint8_t>> read_whole_file(const std::string& path) {
    return read_regular_file_bytes(path, file_kind::data, "training.data");
}

Result<std::unique_ptr<TokenSource>> parse_llmc(const std::string& path,
                                                const std::vector<uint8_t>& bytes, int vocab) {
    const SourceLoc loc{path, 0, 0};
    const uint64_t size = bytes.size();
    const uint64_t header_bytes = uint64_t(llmc_header_ints) * 4;
    if (size < header_bytes)
        return fail(loc, "training.data",
                    "llm.c token file \"" + path + "\" is truncated: it is " + std::to_string(size) +
                        " bytes, shorter than the " + std::to_string(header_bytes) +
                        "-byte header (256 int32)");
    const int32_t version = load_le_i32(bytes.data() + 4);
    if (version != llmc_version)
        return fail(loc, "training.data",
                    "llm.c token file \"" + path + "\" has version " + std::to_string(version) +
                        " (header[1]); ptd-engine reads version " + std::to_string(llmc_version) +
                        " (uint16 tokens)");
    const int32_t n = load_le_i32(bytes.data() + 8);
    if (n < 0)
        return fail(loc, "training.data",
                    "llm.c token file \"" + path + "\" has a negative token count " +
                        std::to_string(n) + " (header[2]); expected ≥ 0");
    const uint64_t expected = header_bytes + 2 * uint64_t(n);
    if (size != expected)
        return fail(loc, "training.data",
                    "llm.c token file \"" + path + "\" is " + std::to_string(size) +
                        " bytes, but its header says " + std::to_string(n) +
                        " tokens, which needs exactly 1024 + 2 × " + std::to_string(n) + " = " +
                        std::to_string(expected) + " bytes (" +
                        (size < expected ? "the file is truncated" : "the file has extra bytes") +
                        ")");
    std::vector<uint16_t> tokens(static_cast<size_t>(n));
    const uint8_t* p = bytes.data() + header_bytes;
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t t = uint16_t(p[2 * i] | (p[2 * i + 1] << 8));
        if (int64_t(t) >= int64_t(vocab))
            return fail(loc, "training.data",
                        "llm.c token file \"" + path + "\": token " + std::to_string(i) +
                            " (byte offset " + std::to_string(header_bytes + 2 * uint64_t(i)) +
                            ") is " + std::to_string(t) + ", but model.vocab is " +
                            std::to_string(vocab) + "; every token must be < vocab");
        tokens[size_t(i)] = t;
    }
    return std::make_unique<StoredSource<uint16_t>>(TokenSourceKind::llmc, path, size,
                                                    std::move(tokens));
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void synthetic_sequence(uint64_t seed, int vocab, int64_t seq, int T, int32_t* out) {
    const uint64_t v = vocab > 0 ? uint64_t(vocab) : 1;
    const uint64_t base = mix64(mix64(seed) ^ uint64_t(seq));
    uint64_t prev = mix64(base) % v;
    out[0] = int32_t(prev);
    for (int pos = 1; pos <= T; ++pos) {
        const uint64_t h = mix64(base + uint64_t(pos) * 0xd1b54a32d192ed03ull);
        if ((h >> 60) == 0) prev = mix64(h) % v;  // 1/16: a uniform token
        else prev = (3 * prev + 1) % v;
        out[pos] = int32_t(prev);
    }
}

std::unique_ptr<TokenSource> make_memory_token_source(std::vector<int32_t> tokens,
                                                      std::string name) {
    return std::make_unique<StoredSource<int32_t>>(TokenSourceKind::memory, std::move(name),
                                                   0, std::move(tokens));
}

Result<std::unique_ptr<TokenSource>> open_token_source(const std::string& data, int vocab,
                                                       uint64_t seed, const std::string& job_dir,
                                                       const SourceLoc& where) {
    if (data == "synthetic") {
        if (vocab < 1)
            return fail(where, "model.vocab",
                        "synthetic data needs vocab ≥ 1; got " + std::to_string(vocab));
        return std::make_unique<SyntheticSource>(vocab, seed);
    }
    if (data.empty())
        return fail(where, "training.data",
                    "empty; expected \"synthetic\", a text file or an llm.c .bin token file");

    // Resolve: as given (absolute, or relative to the current directory), then job_dir.
    std::vector<std::string> tried;
    std::string path;
    std::error_code ec;
    const fs::path given(data);
    std::vector<fs::path> candidates;
    if (given.is_absolute()) {
        candidates.push_back(given);
    } else {
        const fs::path cwd = fs::current_path(ec);
        candidates.push_back(ec ? given : (cwd / given).lexically_normal());
        if (!job_dir.empty()) {
            const fs::path alt = (fs::path(job_dir) / given).lexically_normal();
            if (alt != candidates.front()) candidates.push_back(alt);
        }
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
        tried.push_back(candidates[i].string());
        if (fs::exists(candidates[i], ec)) {
            // Name the file as the user wrote it when it was found where they said.
            path = (i == 0 && !given.is_absolute()) ? data : candidates[i].string();
            break;
        }
    }
    if (path.empty()) {
        std::string list;
        for (size_t i = 0; i < tried.size(); ++i)
            list += (i == 0 ? "" : i + 1 == tried.size() ? " and " : ", ") + tried[i];
        return fail(where, "training.data",
                    "data file \"" + data + "\" not found; tried " + list +
                        " (expected \"synthetic\", a text file or an llm.c .bin token file)");
    }

    auto bytes = read_whole_file(path);
    if (!bytes) return std::unexpected(bytes.error());

    const bool has_magic = bytes->size() >= 4 && load_le_i32(bytes->data()) == llmc_magic;
    if (has_magic) return parse_llmc(path, *bytes, vocab);
    if (ends_with(path, ".bin")) {
        std::string got = "it is only " + std::to_string(bytes->size()) + " bytes";
        if (bytes->size() >= 4) got = "its first 4 bytes read " + std::to_string(load_le_i32(bytes->data()));
        return fail(SourceLoc{path, 0, 0}, "training.data",
                    "\"" + path + "\" is not an llm.c token file: " + got +
                        ", but an llm.c file starts with the int32 magic " +
                        std::to_string(llmc_magic) + " (little-endian)");
    }
    if (vocab < 256)
        return fail(where, "model.vocab",
                    "training.data \"" + path + "\" is a byte-level text file (tokens 0..255), " +
                        "which needs model.vocab ≥ 256; got " + std::to_string(vocab));
    const uint64_t size = bytes->size();
    return std::make_unique<StoredSource<uint8_t>>(TokenSourceKind::text, path, size,
                                                   std::move(*bytes));
}

}  // namespace ptd::engine
