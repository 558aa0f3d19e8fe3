// test_engine_io.cpp — ptd-engine's I/O layer: SHA-256 (FIPS 180-4 vectors), token
// sources (text, llm.c, synthetic) with their sequence rule and error messages, and
// checkpoint shards, manifests, job hashes and resume checks. Every fixture is written
// into a fresh temporary folder by the test itself.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ptd/engine/checkpoint.h"
#include "ptd/engine/data.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"
#include "ptd/common/sha256.h"

#include "process_test_util.h"

namespace fs = std::filesystem;
using namespace ptd;
using namespace ptd::engine;

namespace {

// A fresh folder under the system temp dir, removed at the end of the test.
struct TempDir : ptd_test::TempDir {
    TempDir() : ptd_test::TempDir("ptd_io") {}
};

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// An llm.c token file; header fields and extra bytes can be made wrong on purpose.
std::string llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = llmc_magic,
                       int32_t version = llmc_version, int32_t n_override = -1) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = n_override >= 0 ? n_override : int32_t(tokens.size());
    std::string out(reinterpret_cast<const char*>(header.data()), 1024);  // little-endian host
    out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    return out;
}

std::string error_of(const auto& result) {
    EXPECT_FALSE(result.has_value());
    return result.has_value() ? std::string() : result.error().str();
}

std::vector<int32_t> read_seq(const TokenSource& s, int64_t first, int64_t count, int T) {
    std::vector<int32_t> out(size_t(count) * size_t(T + 1), -1);
    s.read_sequences(first, count, T, out.data());
    return out;
}

std::vector<int32_t> as_tokens(const std::string& s) {
    return std::vector<int32_t>(s.begin(), s.end());
}

const JobSpec& tiny_job() {
    static const JobSpec job = tiny_local_job(embedded_presets());
    return job;
}

}  // namespace

// ---- SHA-256 ---------------------------------------------------------------------------

TEST(Sha256, FipsVectors) {
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                         "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    const std::string million(1000000, 'a');
    EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalSplitsGiveTheSameDigest) {
    const std::string million(1000000, 'a');
    Sha256 h;
    const size_t steps[] = {1, 63, 64, 65, 55, 56, 57, 1000, 4096, 7};
    size_t at = 0;
    for (int i = 0; at < million.size(); ++i) {
        const size_t n = std::min(steps[i % 10], million.size() - at);
        h.update(million.data() + at, n);
        at += n;
    }
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // Every length around the padding boundaries, one byte at a time vs in one call.
    for (size_t len = 0; len < 200; ++len) {
        const std::string msg(len, char('a' + len % 26));
        Sha256 bytewise;
        for (char c : msg) bytewise.update(&c, 1);
        ASSERT_EQ(bytewise.hex_digest(), sha256_hex(msg)) << "length " << len;
    }
}

// RFC 4231 section 4: test cases 1-7 (case 5 compares the 128-bit truncation it gives).
TEST(HmacSha256, Rfc4231Vectors) {
    auto hex = [](const std::array<uint8_t, 32>& d, size_t bytes = 32) {
        static const char digits[] = "0123456789abcdef";
        std::string s;
        for (size_t i = 0; i < bytes; ++i) s += {digits[d[i] >> 4], digits[d[i] & 15]};
        return s;
    };
    std::string key4;
    for (int i = 1; i <= 25; ++i) key4.push_back((char)i);
    EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    EXPECT_EQ(hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
              "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    EXPECT_EQ(hex(hmac_sha256(key4, std::string(50, '\xcd'))),
              "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0c'), "Test With Truncation"), 16), "a3b6167473100ee06e0c796c2955552b");
    EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'),
                              "This is a test using a larger than block-size key and a larger than block-size data. "
                              "The key needs to be hashed before being used by the HMAC algorithm.")),
              "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, ConstantTimeEqualComparesWholeStrings) {
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "ab"));
    EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(Sha256, File) {
    TempDir tmp;
    write_bytes(tmp / "abc.txt", "abc");
    auto d = sha256_file(tmp / "abc.txt");
    ASSERT_TRUE(d.has_value()) << d.error().str();
    EXPECT_EQ(*d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string err = error_of(sha256_file(tmp / "missing.txt"));
    EXPECT_NE(err.find("missing.txt"), std::string::npos) << err;
}

// ---- text files ------------------------------------------------------------------------

TEST(TextSource, SequencesWalkTheFileAndWrap) {
    TempDir tmp;
    write_bytes(tmp / "ten.txt", "abcdefghij");  // N = 10
    auto src = open_token_source(tmp / "ten.txt", 256, 0, "");
    ASSERT_TRUE(src.has_value()) << src.error().str();
    const TokenSource& s = **src;
    EXPECT_EQ(s.kind(), TokenSourceKind::text);
    EXPECT_EQ(s.num_tokens(), 10);
    EXPECT_NE(s.describe().find("text file"), std::string::npos) << s.describe();
    EXPECT_NE(s.describe().find("10 tokens"), std::string::npos) << s.describe();
    ASSERT_TRUE(s.check_length(3).has_value());

    // T = 3: sequence i starts at (3i) mod 7: 0, 3, 6, 2, 5, 1, 4, 0.
    EXPECT_EQ(read_seq(s, 0, 1, 3), as_tokens("abcd"));
    EXPECT_EQ(read_seq(s, 1, 1, 3), as_tokens("defg"));
    EXPECT_EQ(read_seq(s, 2, 1, 3), as_tokens("ghij"));
    EXPECT_EQ(read_seq(s, 3, 1, 3), as_tokens("cdef"));  // wrapped around
    EXPECT_EQ(read_seq(s, 7, 1, 3), as_tokens("abcd"));
    // Consecutive sequences share one token: last target of i = first input of i + 1.
    EXPECT_EQ(read_seq(s, 0, 3, 3), as_tokens("abcddefgghij"));

    // Independent of how the reads are split.
    std::vector<int32_t> split = read_seq(s, 0, 3, 3);
    const std::vector<int32_t> rest = read_seq(s, 3, 5, 3);
    split.insert(split.end(), rest.begin(), rest.end());
    EXPECT_EQ(read_seq(s, 0, 8, 3), split);
    // Large sequence indices do not overflow.
    const auto far = read_seq(s, int64_t(1) << 61, 1, 3);
    for (int32_t t : far) EXPECT_TRUE(t >= 'a' && t <= 'j');
}

TEST(TextSource, NeedsByteVocabAndEnoughTokens) {
    TempDir tmp;
    write_bytes(tmp / "ten.txt", "abcdefghij");
    std::string err = error_of(open_token_source(tmp / "ten.txt", 100, 0, ""));
    EXPECT_NE(err.find("model.vocab"), std::string::npos) << err;
    EXPECT_NE(err.find("ten.txt"), std::string::npos) << err;
    EXPECT_NE(err.find("256"), std::string::npos) << err;
    EXPECT_NE(err.find("got 100"), std::string::npos) << err;

    write_bytes(tmp / "short.txt", "abc");
    auto src = open_token_source(tmp / "short.txt", 256, 0, "");
    ASSERT_TRUE(src.has_value());
    err = error_of((*src)->check_length(3));
    EXPECT_NE(err.find("short.txt"), std::string::npos) << err;
    EXPECT_NE(err.find("has 3 tokens"), std::string::npos) << err;
    EXPECT_NE(err.find("seq_len = 3"), std::string::npos) << err;
    EXPECT_TRUE((*src)->check_length(2).has_value());
    // Reading anyway stays in bounds.
    for (int32_t t : read_seq(**src, 5, 2, 7)) EXPECT_TRUE(t >= 'a' && t <= 'c');

    write_bytes(tmp / "empty.txt", "");
    auto empty = open_token_source(tmp / "empty.txt", 256, 0, "");
    ASSERT_TRUE(empty.has_value());
    EXPECT_FALSE((*empty)->check_length(1).has_value());
    for (int32_t t : read_seq(**empty, 0, 2, 4)) EXPECT_EQ(t, 0);
}

TEST(TextSource, RelativePathsTryTheCurrentFolderThenTheJobFolder) {
    TempDir tmp;
    fs::create_directories(tmp.path / "job");
    fs::create_directories(tmp.path / "cwd");
    write_bytes(tmp / "job/corpus.txt", "from the job folder");
    const fs::path old_cwd = fs::current_path();
    fs::current_path(tmp.path / "cwd");

    auto src = open_token_source("corpus.txt", 256, 0, tmp / "job");
    ASSERT_TRUE(src.has_value()) << src.error().str();
    EXPECT_EQ((*src)->num_tokens(), 19);
    EXPECT_NE((*src)->describe().find("job"), std::string::npos) << (*src)->describe();

    // The current folder wins when both have it.
    write_bytes(tmp / "cwd/corpus.txt", "cwd");
    src = open_token_source("corpus.txt", 256, 0, tmp / "job");
    ASSERT_TRUE(src.has_value());
    EXPECT_EQ((*src)->num_tokens(), 3);

    // Not found: both places are listed, and the job's location is used.
    const std::string err =
        error_of(open_token_source("nowhere.txt", 256, 0, tmp / "job", SourceLoc{"run.toml", 12, 8}));
    fs::current_path(old_cwd);
    EXPECT_NE(err.find("run.toml:12:8"), std::string::npos) << err;
    EXPECT_NE(err.find("training.data"), std::string::npos) << err;
    EXPECT_NE(err.find((tmp.path / "cwd" / "nowhere.txt").string()), std::string::npos) << err;
    EXPECT_NE(err.find((tmp.path / "job" / "nowhere.txt").string()), std::string::npos) << err;
}

// ---- llm.c files -----------------------------------------------------------------------

TEST(LlmcSource, ValidFile) {
    TempDir tmp;
    std::vector<uint16_t> tokens;
    for (int i = 0; i < 100; ++i) tokens.push_back(uint16_t(i * 7 % 500));
    write_bytes(tmp / "train.bin", llmc_bytes(tokens));
    auto src = open_token_source(tmp / "train.bin", 500, 0, "");
    ASSERT_TRUE(src.has_value()) << src.error().str();
    const TokenSource& s = **src;
    EXPECT_EQ(s.kind(), TokenSourceKind::llmc);
    EXPECT_EQ(s.num_tokens(), 100);
    EXPECT_NE(s.describe().find("llm.c"), std::string::npos) << s.describe();
    EXPECT_NE(s.describe().find("100 tokens"), std::string::npos) << s.describe();
    // T = 8: sequence 13 starts at (13·8) mod 92 = 12.
    const auto seq = read_seq(s, 13, 1, 8);
    for (int j = 0; j <= 8; ++j) EXPECT_EQ(seq[size_t(j)], tokens[size_t(12 + j)]);
    // Magic decides, not the extension.
    write_bytes(tmp / "tokens.dat", llmc_bytes(tokens));
    auto dat = open_token_source(tmp / "tokens.dat", 500, 0, "");
    ASSERT_TRUE(dat.has_value());
    EXPECT_EQ((*dat)->kind(), TokenSourceKind::llmc);
}

TEST(LlmcSource, ErrorsNameTheFileAndTheNumbers) {
    TempDir tmp;
    const std::vector<uint16_t> tokens(50, 3);

    write_bytes(tmp / "nomagic.bin", llmc_bytes(tokens, 12345));
    std::string err = error_of(open_token_source(tmp / "nomagic.bin", 500, 0, ""));
    EXPECT_NE(err.find("nomagic.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("20240520"), std::string::npos) << err;
    EXPECT_NE(err.find("12345"), std::string::npos) << err;

    write_bytes(tmp / "tiny.bin", "ab");
    err = error_of(open_token_source(tmp / "tiny.bin", 500, 0, ""));
    EXPECT_NE(err.find("tiny.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("20240520"), std::string::npos) << err;

    write_bytes(tmp / "v2.bin", llmc_bytes(tokens, llmc_magic, 2));
    err = error_of(open_token_source(tmp / "v2.bin", 500, 0, ""));
    EXPECT_NE(err.find("v2.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("version 2"), std::string::npos) << err;
    EXPECT_NE(err.find("version 1"), std::string::npos) << err;

    // Header says 100 tokens, file holds 50: 1124 bytes instead of 1224.
    write_bytes(tmp / "short.bin", llmc_bytes(tokens, llmc_magic, 1, 100));
    err = error_of(open_token_source(tmp / "short.bin", 500, 0, ""));
    EXPECT_NE(err.find("short.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("1124 bytes"), std::string::npos) << err;
    EXPECT_NE(err.find("100 tokens"), std::string::npos) << err;
    EXPECT_NE(err.find("1224"), std::string::npos) << err;
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;

    write_bytes(tmp / "long.bin", llmc_bytes(tokens) + "xy");
    err = error_of(open_token_source(tmp / "long.bin", 500, 0, ""));
    EXPECT_NE(err.find("extra bytes"), std::string::npos) << err;

    std::string header_only = llmc_bytes(tokens).substr(0, 600);
    write_bytes(tmp / "cut.bin", header_only);
    err = error_of(open_token_source(tmp / "cut.bin", 500, 0, ""));
    EXPECT_NE(err.find("cut.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("600 bytes"), std::string::npos) << err;

    std::vector<uint16_t> bad = tokens;
    bad[7] = 60;
    write_bytes(tmp / "vocab.bin", llmc_bytes(bad));
    err = error_of(open_token_source(tmp / "vocab.bin", 50, 0, ""));
    EXPECT_NE(err.find("vocab.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("token 7"), std::string::npos) << err;
    EXPECT_NE(err.find("byte offset 1038"), std::string::npos) << err;
    EXPECT_NE(err.find("is 60"), std::string::npos) << err;
    EXPECT_NE(err.find("model.vocab is 50"), std::string::npos) << err;
    EXPECT_TRUE(open_token_source(tmp / "vocab.bin", 61, 0, "").has_value());

    auto few = open_token_source(tmp / "v1.bin", 500, 0, "");  // does not exist
    EXPECT_FALSE(few.has_value());
    write_bytes(tmp / "few.bin", llmc_bytes(std::vector<uint16_t>(5, 1)));
    auto src = open_token_source(tmp / "few.bin", 500, 0, "");
    ASSERT_TRUE(src.has_value());
    err = error_of((*src)->check_length(8));
    EXPECT_NE(err.find("few.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("has 5 tokens"), std::string::npos) << err;
    EXPECT_NE(err.find("seq_len = 8"), std::string::npos) << err;
}

// ---- synthetic -------------------------------------------------------------------------

TEST(SyntheticSource, DeterministicAndChunkIndependent) {
    auto a = open_token_source("synthetic", 256, 42, "");
    auto b = open_token_source("synthetic", 256, 42, "");
    auto c = open_token_source("synthetic", 256, 43, "");
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ((*a)->kind(), TokenSourceKind::synthetic);
    EXPECT_EQ((*a)->num_tokens(), -1);
    EXPECT_TRUE((*a)->check_length(1 << 20).has_value());
    const auto whole = read_seq(**a, 100, 8, 32);
    EXPECT_EQ(whole, read_seq(**b, 100, 8, 32));
    EXPECT_NE(whole, read_seq(**c, 100, 8, 32));
    auto split = read_seq(**b, 100, 3, 32);
    const auto rest = read_seq(**b, 103, 5, 32);
    split.insert(split.end(), rest.begin(), rest.end());
    EXPECT_EQ(whole, split);
    for (int32_t t : whole) EXPECT_TRUE(t >= 0 && t < 256);
    // Small and odd vocabularies stay in range.
    auto small = open_token_source("synthetic", 7, 1, "");
    ASSERT_TRUE(small.has_value());
    for (int32_t t : read_seq(**small, 0, 4, 50)) EXPECT_TRUE(t >= 0 && t < 7);
}

TEST(SyntheticSource, IsLearnableNotUniform) {
    const int V = 256, T = 64, S = 2000;
    auto src = open_token_source("synthetic", V, 1234, "");
    ASSERT_TRUE(src.has_value());
    const auto tokens = read_seq(**src, 0, S, T);
    std::vector<double> pair(size_t(V) * V, 0.0), prev_count(V, 0.0), unigram(V, 0.0);
    double total = 0;
    for (int s = 0; s < S; ++s)
        for (int j = 1; j <= T; ++j) {
            const int p = tokens[size_t(s) * (T + 1) + j - 1], n = tokens[size_t(s) * (T + 1) + j];
            pair[size_t(p) * V + n] += 1;
            prev_count[p] += 1;
            unigram[n] += 1;
            total += 1;
        }
    double h_cond = 0, h_uni = 0;
    for (int p = 0; p < V; ++p)
        for (int n = 0; n < V; ++n)
            if (double c = pair[size_t(p) * V + n]; c > 0) h_cond -= c / total * std::log(c / prev_count[p]);
    for (double c : unigram)
        if (c > 0) h_uni -= c / total * std::log(c / total);
    const double log_v = std::log(double(V));
    EXPECT_LT(h_cond, 0.25 * log_v) << "H(next | prev) = " << h_cond;  // rule: ≈ 0.58 nats
    EXPECT_GT(h_uni, 0.95 * log_v) << "H(next) = " << h_uni;           // but every token is used
}

// ---- shard files -----------------------------------------------------------------------

namespace {
struct ShardFixture {
    std::vector<float> params;
    std::vector<double> moments;
    std::string note = "rank 3 of 4";
    std::vector<BlobView> blobs() const {
        return {{"params", params.data(), params.size() * sizeof(float)},
                {"adam.m", moments.data(), moments.size() * sizeof(double)},
                {"empty", nullptr, 0},
                {"note", note.data(), note.size()}};
    }
    ShardFixture() {
        for (int i = 0; i < 5000; ++i) params.push_back(float(i) * 0.25f - 3.0f);
        for (int i = 0; i < 300; ++i) moments.push_back(1.0 / (i + 1));
    }
};
}  // namespace

TEST(Shard, RoundTripAndNoTmpLeftBehind) {
    TempDir tmp;
    ShardFixture fx;
    const std::string path = checkpoint_dir(tmp.path.string(), 42) + "/" + shard_file_name(3);
    EXPECT_NE(path.find("checkpoints/step-00000042/rank-00003.bin"), std::string::npos) << path;
    auto sha = write_shard(path, 3, fx.blobs());
    ASSERT_TRUE(sha.has_value()) << sha.error().str();
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(*sha, *sha256_file(path));  // the whole-file digest, as sha256sum prints it

    auto shard = read_shard(path, *sha);
    ASSERT_TRUE(shard.has_value()) << shard.error().str();
    EXPECT_EQ(shard->rank, 3);
    EXPECT_EQ(shard->format_version, shard_format_version);
    EXPECT_EQ(shard->sha256, *sha);
    ASSERT_EQ(shard->blobs.size(), 4u);
    EXPECT_EQ(shard->blobs[0].name, "params");
    const Blob* p = shard->find("params");
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->bytes.size(), fx.params.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(p->bytes.data(), fx.params.data(), p->bytes.size()), 0);
    const Blob* m = shard->find("adam.m");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(std::memcmp(m->bytes.data(), fx.moments.data(), m->bytes.size()), 0);
    EXPECT_TRUE(shard->find("empty")->bytes.empty());
    EXPECT_EQ(std::string(shard->find("note")->bytes.begin(), shard->find("note")->bytes.end()), fx.note);
    EXPECT_EQ(shard->find("missing"), nullptr);

    // Overwriting is atomic too.
    auto again = write_shard(path, 3, fx.blobs());
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, *sha);

    // A different expected digest is refused with both digests named.
    const std::string other(64, 'a');
    const std::string err = error_of(read_shard(path, other));
    EXPECT_NE(err.find(other), std::string::npos) << err;
    EXPECT_NE(err.find(*sha), std::string::npos) << err;
}

TEST(Shard, WriteErrors) {
    TempDir tmp;
    const int x = 1;
    std::string err = error_of(write_shard(tmp / "a.bin", 0, {{"w", &x, 4}, {"w", &x, 4}}));
    EXPECT_NE(err.find("\"w\" is given twice"), std::string::npos) << err;
    err = error_of(write_shard(tmp / "a.bin", 0, {{"", &x, 4}}));
    EXPECT_NE(err.find("blob name"), std::string::npos) << err;
    write_bytes(tmp / "file", "x");  // a file where a folder should be
    err = error_of(write_shard(tmp / "file/a.bin", 0, {{"w", &x, 4}}));
    EXPECT_NE(err.find("file/a.bin"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(tmp / "a.bin.tmp"));
}

TEST(Shard, CorruptFilesAreRefusedWithClearErrors) {
    TempDir tmp;
    ShardFixture fx;
    const std::string path = tmp / "rank-00000.bin";
    ASSERT_TRUE(write_shard(path, 0, fx.blobs()).has_value());
    const std::string good = read_bytes(path);
    const uint64_t blob_bytes = good.size() - 32 - 32;

    std::string err = error_of(read_shard(tmp / "nope.bin"));
    EXPECT_NE(err.find("nope.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("does not exist"), std::string::npos) << err;

    write_bytes(tmp / "trunc.bin", good.substr(0, good.size() - 5));
    err = error_of(read_shard(tmp / "trunc.bin"));
    EXPECT_NE(err.find("trunc.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("is truncated: header says " + std::to_string(blob_bytes) + " bytes of blobs"),
              std::string::npos) << err;
    EXPECT_NE(err.find("file has " + std::to_string(blob_bytes + 32 - 5)), std::string::npos) << err;

    write_bytes(tmp / "head.bin", good.substr(0, 20));
    err = error_of(read_shard(tmp / "head.bin"));
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;

    std::string flipped = good;
    flipped[100] = char(flipped[100] ^ 0x10);
    write_bytes(tmp / "flip.bin", flipped);
    err = error_of(read_shard(tmp / "flip.bin"));
    EXPECT_NE(err.find("flip.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
    const std::string stored_hex = sha256_hex(good.data(), good.size() - 32);
    EXPECT_NE(err.find(stored_hex), std::string::npos) << err;
    EXPECT_NE(err.find(sha256_hex(flipped.data(), flipped.size() - 32)), std::string::npos) << err;

    std::string magic = good;
    magic[0] = 'X';
    write_bytes(tmp / "magic.bin", magic);
    err = error_of(read_shard(tmp / "magic.bin"));
    EXPECT_NE(err.find("not a ptd-engine checkpoint shard"), std::string::npos) << err;
    write_bytes(tmp / "text.bin", "hello");
    err = error_of(read_shard(tmp / "text.bin"));
    EXPECT_NE(err.find("not a ptd-engine checkpoint shard"), std::string::npos) << err;

    std::string v9 = good;
    v9[8] = 9;
    write_bytes(tmp / "v9.bin", v9);
    err = error_of(read_shard(tmp / "v9.bin"));
    EXPECT_NE(err.find("format version 9"), std::string::npos) << err;

    write_bytes(tmp / "tail.bin", good + "zz");
    err = error_of(read_shard(tmp / "tail.bin"));
    EXPECT_NE(err.find("2 unexpected bytes"), std::string::npos) << err;

    // Every single-byte truncation and a few flips: an error, never a crash.
    for (size_t cut = 0; cut < good.size(); cut += 331) {
        write_bytes(tmp / "cut.bin", good.substr(0, cut));
        EXPECT_FALSE(read_shard(tmp / "cut.bin").has_value()) << cut;
    }
    for (size_t at = 0; at < good.size(); at += 397) {
        std::string f = good;
        f[at] = char(f[at] ^ 0xff);
        write_bytes(tmp / "f.bin", f);
        EXPECT_FALSE(read_shard(tmp / "f.bin").has_value()) << at;
    }
}

// ---- manifest --------------------------------------------------------------------------

namespace {
Manifest sample_manifest(int64_t step) {
    Manifest m = make_manifest(tiny_job(), 4, "run-test", step, step * 8, "rng:12345");
    for (int r = 0; r < 4; ++r)
        m.files.push_back({r, shard_file_name(r), 1000 + r, sha256_hex(std::to_string(r)), r < 2 ? 0 : -1, r < 2 ? 640 : -1});
    return m;
}

// Rewrites manifest.json in `dir` after `edit` on its text.
void edit_manifest(const std::string& dir, const std::string& from, const std::string& to) {
    const std::string path = dir + "/manifest.json";
    std::string text = read_bytes(path);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_bytes(path, text);
}
}  // namespace

TEST(Manifest, RoundTrip) {
    TempDir tmp;
    const Manifest m = sample_manifest(7);
    const std::string dir = checkpoint_dir(tmp.path.string(), 7);
    ASSERT_TRUE(write_manifest(dir, m).has_value());
    EXPECT_FALSE(fs::exists(dir + "/manifest.json.tmp"));
    auto back = read_manifest(dir);
    ASSERT_TRUE(back.has_value()) << back.error().str();
    EXPECT_EQ(back->dir, dir);
    EXPECT_EQ(back->run_id, "run-test");
    EXPECT_EQ(back->step, 7);
    EXPECT_EQ(back->spec_hash, m.spec_hash);
    EXPECT_EQ(back->math_hash, m.math_hash);
    EXPECT_EQ(back->spec, m.spec);
    EXPECT_EQ(back->layout, m.layout);
    EXPECT_EQ(back->layout.tp, 2);
    EXPECT_EQ(back->layout.pp, 2);
    EXPECT_EQ(back->layout.world, 4);
    EXPECT_EQ(back->data_position, 56);
    EXPECT_EQ(back->rng_state, "rng:12345");
    EXPECT_EQ(back->created, m.created);
    EXPECT_EQ(back->created.size(), 20u);  // YYYY-MM-DDTHH:MM:SSZ
    ASSERT_EQ(back->files.size(), 4u);
    EXPECT_EQ(back->files[2].file, "rank-00002.bin");
    EXPECT_EQ(back->files[2].bytes, 1002);
    EXPECT_EQ(back->files[2].sha256, m.files[2].sha256);
    // The optimizer range where it is recorded; absent (older checkpoints) reads as -1.
    EXPECT_EQ(back->files[1].optimizer_offset, 0);
    EXPECT_EQ(back->files[1].optimizer_count, 640);
    EXPECT_EQ(back->files[2].optimizer_offset, -1);
    EXPECT_EQ(back->files[2].optimizer_count, -1);
    EXPECT_NE(read_bytes(dir + "/manifest.json").find("\"schema\": \"ptd.checkpoint/1\""), std::string::npos);
}

TEST(Manifest, BadFieldsNameTheFileAndTheField) {
    TempDir tmp;
    const std::string dir = tmp / "ckpt";
    const std::string path = dir + "/manifest.json";
    auto fresh = [&] { ASSERT_TRUE(write_manifest(dir, sample_manifest(3)).has_value()); };

    fresh();
    edit_manifest(dir, "\"data_position\"", "\"data_pos\"");
    std::string err = error_of(read_manifest(dir));
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("data_position: missing"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"step\": 3", "\"step\": \"three\"");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("step: expected an integer"), std::string::npos) << err;
    EXPECT_NE(err.find("\"three\""), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"tp\": 2", "\"tp\": 0");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("layout.tp"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"rank\": 1", "\"rank\": 0");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("files[1].rank"), std::string::npos) << err;
    EXPECT_NE(err.find("listed twice"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"rank-00002.bin\"", "\"../../etc/passwd\"");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("files[2].file"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"optimizer_range\": [", "\"optimizer_range\": [-5, ");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("files[0].optimizer_range: expected [offset, count], two integers ≥ 0"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "ptd.checkpoint/1", "ptd.checkpoint/9");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find("ptd.checkpoint/9"), std::string::npos) << err;

    fresh();
    edit_manifest(dir, "\"run_id\"", "\"run_id\" \"broken\",");
    err = error_of(read_manifest(dir));
    EXPECT_NE(err.find(path + ":3:"), std::string::npos) << err;
    EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;

    err = error_of(read_manifest(tmp / "nowhere"));
    EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST(Manifest, FindLatestSkipsIncompleteCheckpoints) {
    TempDir tmp;
    const std::string run = tmp.path.string();
    EXPECT_FALSE(find_latest_checkpoint(run).has_value());
    EXPECT_FALSE(find_latest_checkpoint(tmp / "no-such-run").has_value());
    ASSERT_TRUE(write_manifest(checkpoint_dir(run, 5), sample_manifest(5)).has_value());
    ASSERT_TRUE(write_manifest(checkpoint_dir(run, 10), sample_manifest(10)).has_value());
    fs::create_directories(checkpoint_dir(run, 20));  // shards only, no manifest: incomplete
    write_bytes(checkpoint_dir(run, 20) + "/rank-00000.bin", "partial");
    fs::create_directories(tmp.path / "checkpoints" / "step-00000099.tmp");
    fs::create_directories(tmp.path / "checkpoints" / "notes");
    auto latest = find_latest_checkpoint(run);
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(fs::path(*latest).filename(), "step-00000010");
    ASSERT_TRUE(read_manifest(*latest).has_value());
    EXPECT_EQ(read_manifest(*latest)->step, 10);
}

// ---- job hashes and resume checks ------------------------------------------------------

TEST(JobHash, ChangesWithMathAndLayoutButNotSteps) {
    const JobSpec base = tiny_job();
    const std::string spec = job_spec_hash(base), math = job_math_hash(base);
    EXPECT_EQ(spec.size(), 64u);
    EXPECT_NE(spec, math);
    EXPECT_EQ(job_spec_hash(base), spec);  // deterministic

    JobSpec steps = base;
    steps.training.steps = 5000;
    EXPECT_EQ(job_spec_hash(steps), spec);
    EXPECT_EQ(job_math_hash(steps), math);

    JobSpec lr = base;
    lr.training.lr = 2e-3;
    EXPECT_NE(job_spec_hash(lr), spec);
    EXPECT_NE(job_math_hash(lr), math);

    JobSpec tp = base;
    tp.parallel.tp = 1;
    tp.parallel.dp = 2;
    EXPECT_NE(job_spec_hash(tp), spec);
    EXPECT_EQ(job_math_hash(tp), math);

    JobSpec layers = base;
    layers.model.layers += 2;
    EXPECT_NE(job_math_hash(layers), math);
    JobSpec data = base;
    data.training.data = "input.txt";
    EXPECT_NE(job_math_hash(data), math);
    JobSpec name = base;
    name.model.name = "renamed";
    EXPECT_EQ(job_spec_hash(name), spec);  // cosmetic
}

TEST(Resume, CompatibleAndRefusedWithReasons) {
    const JobSpec base = tiny_job();
    Manifest m = make_manifest(base, 4, "run", 10, 80, "");
    m.dir = "runs/x/checkpoints/step-00000010";
    EXPECT_TRUE(check_resume_compatible(m, base, 4).has_value());

    JobSpec longer = base;
    longer.training.steps = 500;
    EXPECT_TRUE(check_resume_compatible(m, longer, 4).has_value());

    JobSpec lr = base;
    lr.training.lr = 2e-3;
    std::string err = error_of(check_resume_compatible(m, lr, 4));
    EXPECT_NE(err.find("checkpoint runs/x/checkpoints/step-00000010 was written for a different job"),
              std::string::npos) << err;
    EXPECT_NE(err.find("spec hash " + m.spec_hash.substr(0, 12) + " vs " + job_spec_hash(lr).substr(0, 12)),
              std::string::npos) << err;
    EXPECT_NE(err.find("the model or training settings changed"), std::string::npos) << err;
    EXPECT_NE(err.find("training.lr 0.001 → 0.002"), std::string::npos) << err;

    JobSpec tp = base;
    tp.parallel.tp = 1;
    tp.parallel.dp = 2;
    err = error_of(check_resume_compatible(m, tp, 4));
    EXPECT_NE(err.find("was written with tp=2 pp=2 dp=1 zero=0 sp=off; this run has tp=1 pp=2 dp=2 "
                       "zero=0 sp=off; resuming on a different layout is not supported"),
              std::string::npos) << err;

    JobSpec vpp = base;
    vpp.parallel.vpp = 2;
    err = error_of(check_resume_compatible(m, vpp, 4));
    EXPECT_NE(err.find("vpp=2"), std::string::npos) << err;

    err = error_of(check_resume_compatible(m, base, 8));  // world differs
    EXPECT_NE(err.find("different layout"), std::string::npos) << err;

    // Only dp differs (and the world with it): resumed by re-splitting the optimizer shards.
    JobSpec dp2 = base;
    dp2.parallel.dp = 2;
    bool reshard = false;
    EXPECT_TRUE(check_resume_compatible(m, dp2, 8, &reshard).has_value());
    EXPECT_TRUE(reshard);
    EXPECT_TRUE(check_resume_compatible(m, base, 4, &reshard).has_value());
    EXPECT_FALSE(reshard);
    // dp and tp together: refused, saying what may change.
    JobSpec dp2_tp1 = dp2;
    dp2_tp1.parallel.tp = 1;
    err = error_of(check_resume_compatible(m, dp2_tp1, 4, &reshard));
    EXPECT_NE(err.find("only dp may change"), std::string::npos) << err;
}

// ---- issue 12: special files -------------------------------------------------------------

#include <sys/stat.h>

#include "ptd/common/file_read.h"

// /dev/zero or a FIFO as training.data grew memory without end or hung; a directory,
// device or FIFO is refused by the shared reader before a byte is read. Data files have no
// size cap (they are large by nature), but must be regular files.
TEST(SpecialFiles, DataFile) {
    TempDir tmp;
    ASSERT_EQ(::mkfifo((tmp / "fifo.txt").c_str(), 0600), 0);
    fs::create_directories(tmp.path / "folder");
    const std::string fifo = error_of(open_token_source(tmp / "fifo.txt", 256, 0, tmp.path.string()));
    EXPECT_EQ(fifo, (tmp / "fifo.txt") + ": error: training.data: is a FIFO (named pipe); expected a regular file (a data file)\n");
    const std::string zero = error_of(open_token_source("/dev/zero", 256, 0, tmp.path.string()));
    EXPECT_EQ(zero, "/dev/zero: error: training.data: is a character device; expected a regular file (a data file)\n");
    const std::string folder = error_of(open_token_source(tmp / "folder", 256, 0, tmp.path.string()));
    EXPECT_NE(folder.find("is a directory; expected a regular file (a data file)"), std::string::npos) << folder;
    // Large is fine for data: a sparse 16 MiB text file opens (the engine reads it whole).
    std::ofstream(tmp / "big.txt");
    fs::resize_file(tmp / "big.txt", 16u << 20);
    auto big = open_token_source(tmp / "big.txt", 256, 0, tmp.path.string());
    EXPECT_TRUE(big.has_value()) << big.error().str();
}

// The checkpoint manifest and shards go through the same reader; the manifest is capped.
TEST(SpecialFiles, CheckpointManifestAndShard) {
    TempDir tmp;
    ASSERT_EQ(::mkfifo((tmp / "manifest.json").c_str(), 0600), 0);
    std::string err = error_of(read_manifest(tmp.path.string()));
    EXPECT_NE(err.find("manifest.json: error: is a FIFO (named pipe); expected a regular file (a checkpoint manifest)"),
              std::string::npos)
        << err;
    fs::remove(tmp.path / "manifest.json");
    std::ofstream(tmp / "manifest.json");
    fs::resize_file(tmp.path / "manifest.json", 65u << 20);
    err = error_of(read_manifest(tmp.path.string()));
    EXPECT_NE(err.find("is 68,157,440 bytes, more than a checkpoint manifest may be (at most 64 MiB)"), std::string::npos)
        << err;

    ASSERT_EQ(::mkfifo((tmp / "rank0.shard").c_str(), 0600), 0);
    err = error_of(read_shard(tmp / "rank0.shard"));
    EXPECT_NE(err.find("is a FIFO (named pipe); expected a regular file (a checkpoint shard)"), std::string::npos) << err;
    err = error_of(read_shard("/dev/zero"));
    EXPECT_NE(err.find("is a character device"), std::string::npos) << err;
    err = error_of(sha256_file("/dev/zero"));
    EXPECT_NE(err.find("is a character device"), std::string::npos) << err;
}
