// data.h — where ptd-engine's tokens come from (`training.data` in the job spec):
//   "synthetic"     an endless, seeded, learnable stream (the rule is documented below);
//   an llm.c file   `*.bin` token file: 256 little-endian int32 header (magic 20240520,
//                   version 1, token count N), then N uint16 tokens;
//   any other file  byte-level text: each byte is one token 0..255.
//
// Sources are addressed by global sequence index only: sequence i is always the same
// T + 1 tokens, whoever reads it and however the reads are split. The trainer owns the
// run's data position (global sequences consumed) and asks for the sequences it needs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd::engine {

enum class TokenSourceKind { synthetic, text, llmc, memory };

// "synthetic", "text", "llm.c", "memory".
const char* to_string(TokenSourceKind k);

// The magic number and version of an llm.c token file's header (header[0], header[1]).
constexpr int32_t llmc_magic = 20240520;
constexpr int32_t llmc_version = 1;
constexpr int llmc_header_ints = 256;  // header size: 256 int32 = 1024 bytes

class TokenSource {
public:
    virtual ~TokenSource() = default;

    virtual TokenSourceKind kind() const = 0;

    // One line for logs, e.g. "text file input.txt: 1.1 MB, 1115394 tokens" or
    // "synthetic: seed 1234, vocab 256, next = (3·prev + 1) mod vocab, 1/16 noise".
    virtual std::string describe() const = 0;

    // Tokens in the file; -1 for the endless synthetic stream.
    virtual int64_t num_tokens() const = 0;

    // Whether sequences of T + 1 tokens can be cut: a file needs at least T + 1 tokens.
    // The error (key "training.data") names the file, its token count N and seq_len T.
    // Synthetic always succeeds (for T ≥ 1).
    virtual Result<void> check_length(int T) const = 0;

    // Fills out[count × (T + 1)] with global sequences first .. first + count − 1, one
    // after another; each is T + 1 tokens (inputs = the first T, targets = the last T).
    // Deterministic and independent of how the caller splits the work: reading [0, 8)
    // in one call equals reading [0, 3) and then [3, 8).
    //   File with N tokens: sequence i is the N-token file from offset (i · T) mod (N − T),
    //   so the file is walked in order and wraps around, and consecutive sequences share
    //   one token (the last target of sequence i is the first input of i + 1), as in
    //   llm.c's loader. Tokens are widened to int32.
    // Preconditions: first ≥ 0, count ≥ 0, T ≥ 1, check_length(T) succeeded. (Without the
    // length check the result is unspecified but memory-safe: positions wrap modulo N and
    // an empty file yields zeros.)
    virtual void read_sequences(int64_t first, int64_t count, int T, int32_t* out) const = 0;
};

// Opens the source named by `data` (the value of training.data).
//   "synthetic" → the synthetic stream over `vocab` tokens, seeded by `seed`.
//   Otherwise a path. A relative path is tried against the current directory, then
//   against `job_dir` (the folder of the job file; "" = not tried); the not-found error
//   lists every place tried. The file is read into memory once.
//   - First 4 bytes equal llmc_magic (little-endian) → llm.c token file; checked: the
//     header is complete, version = 1, N ≥ 0, the file size is exactly 1024 + 2·N bytes,
//     and every token < vocab (the error gives the token's index, its byte offset and
//     its value).
//   - A `.bin` file without the magic is an error that says what the magic should be.
//   - Anything else is byte-level text, which needs vocab ≥ 256 (error keyed model.vocab).
// Errors about the setting itself (not found, vocab too small) carry `where` (pass
// job.where("training.data") to point at the job file's line); errors about the file's
// contents are located at the data file. Every message names the file. Never throws.
Result<std::unique_ptr<TokenSource>> open_token_source(const std::string& data, int vocab,
                                                       uint64_t seed, const std::string& job_dir,
                                                       const SourceLoc& where = {});

// A source over tokens already in memory, with the file sources' sequence rule; `name`
// is used in describe() and errors. For tests and tools. Tokens are not range-checked.
std::unique_ptr<TokenSource> make_memory_token_source(std::vector<int32_t> tokens,
                                                      std::string name);

// The synthetic stream, exposed for tests: token `pos` (0 ≤ pos ≤ T) of sequence `seq`.
//   pos 0:   h(seed, seq, 0) mod vocab
//   pos > 0: with probability 15/16, next = (3 · prev + 1) mod vocab; otherwise (the
//            "noise", 1/16 of positions) next = h(seed, seq, pos) mod vocab, uniform.
// h is a SplitMix64-style hash of (seed, seq, pos), so every sequence is an independent,
// reproducible draw. The next-token entropy given the previous token is about
// 0.23 + ln(vocab)/16 nats (0.58 nats for vocab 256, against ln 256 = 5.55), so a small
// model that learns the bigram rule drives the loss well below ln(vocab).
// Fills out[0 .. T] (T + 1 tokens).
void synthetic_sequence(uint64_t seed, int vocab, int64_t seq, int T, int32_t* out);

}  // namespace ptd::engine
