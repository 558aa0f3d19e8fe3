// checkpoint.cpp — shard files (atomic write, checksummed read), the JSON manifest, the
// job hashes and the resume checks declared in checkpoint.h. POSIX file calls for the
// write path (fsync + rename); nothing here throws to the caller.
#include "ptd/engine/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "ptd/common/file_read.h"
#include "ptd/common/sha256.h"
#include "ptd/layout/layout.h"

namespace ptd::engine {
namespace fs = std::filesystem;

namespace {

constexpr size_t magic_bytes = 8;
constexpr size_t header_bytes = 32;  // magic, u32 version, u32 rank, u64 count, u64 blob bytes
constexpr size_t digest_bytes = 32;

std::string sys_error(int err) { return std::strerror(err); }

void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
    return v;
}
uint64_t get_u64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
}

std::string to_hex(const uint8_t* p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string out(2 * n, '0');
    for (size_t i = 0; i < n; ++i) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    return out;
}

bool is_hex64(const std::string& s) {
    if (s.size() != 64) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

// Buffered writer on a file descriptor that hashes everything it writes.
class HashingWriter {
public:
    explicit HashingWriter(int fd) : fd_(fd) { buffer_.reserve(capacity); }

    bool put(const void* data, size_t n) {
        hash_.update(data, n);
        const uint8_t* p = static_cast<const uint8_t*>(data);
        if (n >= capacity / 2) return flush() && write_all(p, n);
        if (buffer_.size() + n > capacity && !flush()) return false;
        buffer_.insert(buffer_.end(), p, p + n);
        return true;
    }
    bool flush() {
        const bool ok = write_all(buffer_.data(), buffer_.size());
        buffer_.clear();
        return ok;
    }
    // Writes bytes without hashing them (the trailing digest).
    bool put_unhashed(const void* data, size_t n) {
        return flush() && write_all(static_cast<const uint8_t*>(data), n);
    }
    Sha256& hash() { return hash_; }
    int error() const { return errno_; }

private:
    static constexpr size_t capacity = 1 << 20;
    bool write_all(const uint8_t* p, size_t n) {
        while (n > 0) {
            const ssize_t w = ::write(fd_, p, n);
            if (w < 0) {
                if (errno == EINTR) continue;
                errno_ = errno;
                return false;
            }
            p += w;
            n -= size_t(w);
        }
        return true;
    }
    int fd_;
    int errno_ = 0;
    std::vector<uint8_t> buffer_;
    Sha256 hash_;
};

// fsync of a folder so that a rename inside it is durable (best effort).
void sync_dir(const std::string& dir) {
    const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

std::string parent_of(const std::string& path) { return fs::path(path).parent_path().string(); }

// Ends an atomic write of `tmp` (open as `fd`, written through `w`; `ok`: every write so far
// succeeded): fsync, close, rename onto `path`, and the folder synced. When a step fails the
// temporary is removed and the errno of the first failure comes back; nullopt = written.
// `may_commit` is asked last, right before the rename (the fsync before it can take long):
// when it says why not, the temporary is removed, `refused` holds the reason and ECANCELED
// comes back.
std::optional<int> commit_atomic_write(const HashingWriter& w, bool ok, int fd, const std::string& tmp,
                                       const std::string& path, const CommitGuard& may_commit, std::string& refused) {
    int err = w.error();
    if (ok && ::fsync(fd) != 0) ok = false, err = errno;
    if (::close(fd) != 0 && ok) ok = false, err = errno;
    if (ok && may_commit) refused = may_commit();
    if (!refused.empty()) ok = false, err = ECANCELED;
    if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
    if (!ok) {
        ::unlink(tmp.c_str());
        return err;
    }
    sync_dir(parent_of(path));
    return std::nullopt;
}

Result<void> ensure_dir(const std::string& dir, const std::string& for_path) {
    if (dir.empty()) return {};
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec && !fs::is_directory(dir))
        return fail(SourceLoc{for_path, 0, 0}, "",
                    "cannot create the folder \"" + dir + "\": " + ec.message());
    return {};
}

// Writes `bytes` to `path` atomically (tmp, fsync, rename, fsync folder).
Result<void> write_file_atomic(const std::string& path, const std::string& bytes, const CommitGuard& may_commit) {
    if (auto ok = ensure_dir(parent_of(path), path); !ok) return ok;
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail(SourceLoc{path, 0, 0}, "", "cannot create \"" + tmp + "\": " + sys_error(errno));
    HashingWriter w(fd);
    const bool ok = w.put(bytes.data(), bytes.size()) && w.flush();
    std::string refused;
    if (const std::optional<int> err = commit_atomic_write(w, ok, fd, tmp, path, may_commit, refused))
        return fail(SourceLoc{path, 0, 0}, "",
                    refused.empty() ? "cannot write \"" + path + "\": " + sys_error(*err)
                                    : "did not write \"" + path + "\": " + refused);
    return {};
}

std::string format_double(double v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

std::string on_off(bool b) { return b ? "on" : "off"; }

std::string join_ints(const std::vector<int>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
}

int derived_dp(const JobSpec& job, int world) {
    if (job.parallel.dp > 0) return job.parallel.dp;
    const int denom = job.parallel.tp * job.parallel.pp * job.parallel.cp;
    return denom > 0 ? world / denom : 0;
}

}  // namespace

// ---- paths -----------------------------------------------------------------------------

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
    return (fs::path(run_dir) / "checkpoints" / name).string();
}

std::string shard_file_name(int rank) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
    return name;
}

// ---- shard files -----------------------------------------------------------------------

const Blob* Shard::find(std::string_view name) const {
    for (const Blob& b : blobs)
        if (b.name == name) return &b;
    return nullptr;
}

Result<std::string> write_shard(const std::string& path, int rank,
                                const std::vector<BlobView>& blobs, const CommitGuard& may_commit) {
    const SourceLoc loc{path, 0, 0};
    if (rank < 0)
        return fail(loc, "", "cannot write shard \"" + path + "\": rank " + std::to_string(rank) +
                                 " is negative");
    uint64_t blob_bytes = 0;
    std::set<std::string> names;
    for (const BlobView& b : blobs) {
        if (b.name.empty() || b.name.size() >= 65536)
            return fail(loc, "", "cannot write shard \"" + path + "\": blob name \"" +
                                     b.name.substr(0, 64) + "\" must be 1..65535 bytes long");
        if (!names.insert(b.name).second)
            return fail(loc, "", "cannot write shard \"" + path + "\": blob \"" + b.name +
                                     "\" is given twice; names must be unique");
        if (b.bytes > 0 && b.data == nullptr)
            return fail(loc, "", "cannot write shard \"" + path + "\": blob \"" + b.name +
                                     "\" has " + std::to_string(b.bytes) + " bytes but no data");
        blob_bytes += 4 + b.name.size() + 8 + b.bytes;
    }
    if (auto ok = ensure_dir(parent_of(path), path); !ok) return std::unexpected(ok.error());

    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail(loc, "", "cannot create checkpoint shard \"" + tmp + "\": " + sys_error(errno));

    HashingWriter w(fd);
    uint8_t header[header_bytes];
    std::memcpy(header, shard_magic, magic_bytes);
    put_u32(header + 8, shard_format_version);
    put_u32(header + 12, uint32_t(rank));
    put_u64(header + 16, blobs.size());
    put_u64(header + 24, blob_bytes);
    bool ok = w.put(header, sizeof header);
    for (const BlobView& b : blobs) {
        if (!ok) break;
        uint8_t len32[4], len64[8];
        put_u32(len32, uint32_t(b.name.size()));
        put_u64(len64, b.bytes);
        ok = w.put(len32, 4) && w.put(b.name.data(), b.name.size()) && w.put(len64, 8) &&
             (b.bytes == 0 || w.put(b.data, b.bytes));
    }
    std::string whole_hex;
    if (ok) {
        Sha256 whole = w.hash();  // not yet finalized: continues over the stored digest
        const auto content_digest = w.hash().digest();
        whole.update(content_digest.data(), content_digest.size());
        whole_hex = whole.hex_digest();
        ok = w.put_unhashed(content_digest.data(), content_digest.size());
    }
    std::string refused;
    if (const std::optional<int> err = commit_atomic_write(w, ok, fd, tmp, path, may_commit, refused))
        return fail(loc, "",
                    refused.empty() ? "cannot write checkpoint shard \"" + path + "\": " + sys_error(*err)
                                    : "did not write checkpoint shard \"" + path + "\": " + refused);
    return whole_hex;
}

namespace {

// A FILE* that closes itself.
struct File {
    std::FILE* f = nullptr;
    explicit File(std::FILE* file) : f(file) {}
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File() {
        if (f) std::fclose(f);
    }
};

}  // namespace

Result<Shard> read_shard(const std::string& path, const std::string& expected_sha256) {
    const SourceLoc loc{path, 0, 0};
    const std::string what = "checkpoint shard \"" + path + "\"";
    std::error_code ec;
    if (!fs::exists(path, ec)) return fail(loc, "", what + " does not exist");
    // The shared reader refuses directories, FIFOs and devices before any byte is read.
    auto opened = open_regular_file(path, file_kind::checkpoint_shard);
    if (!opened) return std::unexpected(opened.error());
    File file(::fdopen(opened->fd(), "rb"));
    if (!file.f) return fail(loc, "", "cannot open " + what + ": " + sys_error(errno));
    opened->release();  // the FILE owns the descriptor now
    struct stat st {};
    if (::fstat(::fileno(file.f), &st) != 0)
        return fail(loc, "", "cannot stat " + what + ": " + sys_error(errno));
    const uint64_t size = uint64_t(st.st_size);

    uint8_t header[header_bytes] = {};
    const size_t got = std::fread(header, 1, header_bytes, file.f);
    if (got < magic_bytes || std::memcmp(header, shard_magic, magic_bytes) != 0)
        return fail(loc, "", "\"" + path + "\" is not a ptd-engine checkpoint shard: it does not " +
                                 "start with the magic \"" + shard_magic + "\"");
    if (got < header_bytes)
        return fail(loc, "", what + " is truncated: it is " + std::to_string(size) +
                                 " bytes, shorter than the " + std::to_string(header_bytes) +
                                 "-byte header");
    const uint32_t version = get_u32(header + 8);
    if (version != shard_format_version)
        return fail(loc, "", what + " has format version " + std::to_string(version) +
                                 "; this ptd-engine reads version " +
                                 std::to_string(shard_format_version));
    const uint32_t rank = get_u32(header + 12);
    const uint64_t count = get_u64(header + 16);
    const uint64_t blob_bytes = get_u64(header + 24);
    const uint64_t after_header = size - header_bytes;
    if (blob_bytes > after_header || after_header - blob_bytes < digest_bytes)
        return fail(loc, "", what + " is truncated: header says " + std::to_string(blob_bytes) +
                                 " bytes of blobs plus a " + std::to_string(digest_bytes) +
                                 "-byte checksum, file has " + std::to_string(after_header) +
                                 " bytes after the header");
    if (after_header - blob_bytes > digest_bytes)
        return fail(loc, "", what + " has " +
                                 std::to_string(after_header - blob_bytes - digest_bytes) +
                                 " unexpected bytes after its checksum (header says " +
                                 std::to_string(blob_bytes) + " bytes of blobs)");

    // Pass 1: checksum of header + blobs, before trusting any blob record.
    Sha256 content;
    content.update(header, header_bytes);
    {
        std::vector<uint8_t> chunk(1 << 20);
        uint64_t left = blob_bytes;
        while (left > 0) {
            const size_t want = size_t(std::min<uint64_t>(left, chunk.size()));
            if (std::fread(chunk.data(), 1, want, file.f) != want)
                return fail(loc, "", "error reading " + what + ": " +
                                         (std::ferror(file.f) ? sys_error(errno) : "unexpected end of file"));
            content.update(chunk.data(), want);
            left -= want;
        }
    }
    uint8_t stored[digest_bytes];
    if (std::fread(stored, 1, digest_bytes, file.f) != digest_bytes)
        return fail(loc, "", "error reading the checksum of " + what);
    Sha256 whole = content;
    const auto computed = content.digest();
    if (std::memcmp(computed.data(), stored, digest_bytes) != 0)
        return fail(loc, "", what + " is corrupt: checksum mismatch: the file stores SHA-256 " +
                                 to_hex(stored, digest_bytes) + " but its contents hash to " +
                                 to_hex(computed.data(), digest_bytes));
    whole.update(stored, digest_bytes);
    Shard shard;
    shard.format_version = version;
    shard.rank = int(rank);
    shard.sha256 = whole.hex_digest();
    if (!expected_sha256.empty() && expected_sha256 != shard.sha256)
        return fail(loc, "", what + " is not the file the manifest lists: expected SHA-256 " +
                                 expected_sha256 + ", actual " + shard.sha256);

    // Pass 2: the blob records, every length checked against what is left.
    if (std::fseek(file.f, long(header_bytes), SEEK_SET) != 0)
        return fail(loc, "", "cannot seek in " + what + ": " + sys_error(errno));
    uint64_t left = blob_bytes;
    auto read_exact = [&](void* dst, uint64_t n) {
        if (n > left) return false;
        if (n > 0 && std::fread(dst, 1, size_t(n), file.f) != n) return false;
        left -= n;
        return true;
    };
    const auto malformed = [&](uint64_t index, const std::string& why) {
        return fail(loc, "", what + " is malformed: blob " + std::to_string(index) + " " + why);
    };
    for (uint64_t i = 0; i < count; ++i) {
        uint8_t len32[4], len64[8];
        if (!read_exact(len32, 4)) return malformed(i, "runs past the header's blob bytes");
        Blob blob;
        blob.name.resize(get_u32(len32));
        if (!read_exact(blob.name.data(), blob.name.size()) || !read_exact(len64, 8))
            return malformed(i, "runs past the header's blob bytes");
        const uint64_t n = get_u64(len64);
        if (n > left)
            return malformed(i, "(\"" + blob.name + "\") says " + std::to_string(n) +
                                    " bytes but only " + std::to_string(left) + " are left");
        blob.bytes.resize(size_t(n));
        if (!read_exact(blob.bytes.data(), n)) return malformed(i, "cannot be read");
        shard.blobs.push_back(std::move(blob));
    }
    if (left != 0)
        return fail(loc, "", what + " is malformed: " + std::to_string(left) +
                                 " bytes of blob data are left after the " + std::to_string(count) +
                                 " blobs the header announces");
    return shard;
}

// ---- job hashes ------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> job_spec_fields(const JobSpec& job,
                                                                 bool with_layout) {
    std::vector<std::pair<std::string, std::string>> f;
    auto add = [&](const char* key, std::string value) { f.emplace_back(key, std::move(value)); };
    auto num = [](auto v) { return std::to_string(v); };
    auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
    const ModelSpec& m = job.model;
    add("model.arch", to_string(m.arch));
    add("model.layers", num(m.layers));
    add("model.hidden", num(m.hidden));
    add("model.heads", num(m.heads));
    add("model.kv_heads", num(m.kv_heads));
    add("model.ffn_hidden", num(m.ffn_hidden));
    add("model.vocab", num(m.vocab));
    add("model.seq_len", num(m.seq_len));
    add("model.tied_embeddings", flag(m.tied_embeddings));
    add("model.norm", to_string(m.norm));
    add("model.activation", to_string(m.activation));
    add("model.position", to_string(m.position));
    add("model.bias", flag(m.bias));
    add("model.qkv_bias", flag(m.qkv_bias));
    add("model.experts", num(m.experts));
    add("model.top_k", num(m.top_k));
    add("model.rope_theta", format_double(m.rope_theta));
    add("model.norm_eps", format_double(m.norm_eps));

    const TrainingSpec& t = job.training;
    const int dp = derived_dp(job, job.world_size());
    add("training.micro_batch", num(t.micro_batch));
    add("training.global_batch", num(t.global_batch > 0 ? t.global_batch : t.micro_batch * dp));
    add("training.precision", to_string(t.precision));
    add("training.optimizer", to_string(t.optimizer));
    add("training.lr", format_double(t.lr));
    add("training.min_lr", format_double(t.min_lr));
    add("training.warmup", num(t.warmup));
    add("training.weight_decay", format_double(t.weight_decay));
    add("training.grad_clip", format_double(t.grad_clip));
    add("training.seed", num(t.seed));
    add("training.data", t.data);

    if (with_layout) {
        const ParallelSpec& p = job.parallel;
        add("parallel.tp", num(p.tp));
        add("parallel.pp", num(p.pp));
        add("parallel.dp", num(dp));
        add("parallel.cp", num(p.cp));
        add("parallel.ep", num(p.ep));
        add("parallel.vpp", num(p.vpp));
        add("parallel.zero", num(p.zero));
        add("parallel.distributed_optimizer", flag(p.distributed_optimizer));
        add("parallel.sequence_parallel", flag(p.sequence_parallel));
        add("parallel.recompute", to_string(p.recompute));
        add("parallel.order", p.order);
        add("parallel.layers_per_stage", join_ints(p.layers_per_stage));
    }
    return f;
}

namespace {
std::string hash_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
    Sha256 h;
    h.update("ptd.spec/1\n");
    for (const auto& [k, v] : fields) {
        h.update(k);
        h.update("=");
        h.update(v);  // values never contain '\n' except a pathological data path; the
        h.update("\n");  // key order is fixed, so the text stays unambiguous enough
    }
    return h.hex_digest();
}
}  // namespace

std::string job_spec_hash(const JobSpec& job) { return hash_fields(job_spec_fields(job, true)); }
std::string job_math_hash(const JobSpec& job) { return hash_fields(job_spec_fields(job, false)); }

// ---- manifest --------------------------------------------------------------------------

CheckpointLayout layout_of(const JobSpec& job, int world) {
    const ParallelSpec& p = job.parallel;
    CheckpointLayout l;
    l.world = world;
    l.tp = p.tp;
    l.pp = p.pp;
    l.dp = derived_dp(job, world);
    l.cp = p.cp;
    l.ep = p.ep;
    l.vpp = p.vpp;
    l.zero = p.zero;
    l.distributed_optimizer = p.distributed_optimizer;
    l.sequence_parallel = p.sequence_parallel;
    l.recompute = to_string(p.recompute);
    l.order = p.order;
    l.layers_per_stage = p.layers_per_stage;
    return l;
}

std::string describe_layout(const CheckpointLayout& l) {
    const CheckpointLayout d;
    std::string out = "tp=" + std::to_string(l.tp) + " pp=" + std::to_string(l.pp) +
                      " dp=" + std::to_string(l.dp) + " zero=" + std::to_string(l.zero) +
                      " sp=" + on_off(l.sequence_parallel);
    if (l.cp != d.cp) out += " cp=" + std::to_string(l.cp);
    if (l.ep != d.ep) out += " ep=" + std::to_string(l.ep);
    if (l.vpp != d.vpp) out += " vpp=" + std::to_string(l.vpp);
    if (l.distributed_optimizer) out += " distributed_optimizer=on";
    if (l.recompute != d.recompute) out += " recompute=" + l.recompute;
    if (l.order != d.order) out += " order=" + l.order;
    if (!l.layers_per_stage.empty()) out += " layers_per_stage=" + join_ints(l.layers_per_stage);
    if (int64_t(l.world) != int64_t(l.tp) * l.pp * l.dp * l.cp)
        out += " world=" + std::to_string(l.world);
    return out;
}

std::string iso8601_now() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return buf;
}

Manifest make_manifest(const JobSpec& job, int world, const std::string& run_id, int64_t step,
                       int64_t data_position, const std::string& rng_state) {
    Manifest m;
    m.run_id = run_id;
    m.step = step;
    m.spec_hash = job_spec_hash(job);
    m.math_hash = job_math_hash(job);
    m.spec = job_spec_fields(job, true);
    m.layout = layout_of(job, world);
    m.data_position = data_position;
    m.rng_state = rng_state;
    m.created = iso8601_now();
    return m;
}

Result<void> write_manifest(const std::string& dir, const Manifest& m, const CommitGuard& may_commit) {
    nlohmann::ordered_json j;
    j["schema"] = manifest_schema;
    j["run_id"] = m.run_id;
    j["step"] = m.step;
    j["spec_hash"] = m.spec_hash;
    j["math_hash"] = m.math_hash;
    nlohmann::ordered_json spec = nlohmann::ordered_json::object();
    for (const auto& [k, v] : m.spec) spec[k] = v;
    j["spec"] = spec;
    const CheckpointLayout& l = m.layout;
    j["layout"] = {{"world", l.world},
                   {"tp", l.tp},
                   {"pp", l.pp},
                   {"dp", l.dp},
                   {"cp", l.cp},
                   {"ep", l.ep},
                   {"vpp", l.vpp},
                   {"zero", l.zero},
                   {"distributed_optimizer", l.distributed_optimizer},
                   {"sequence_parallel", l.sequence_parallel},
                   {"recompute", l.recompute},
                   {"order", l.order},
                   {"layers_per_stage", l.layers_per_stage}};
    j["data_position"] = m.data_position;
    j["rng_state"] = m.rng_state;
    j["created"] = m.created;
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (const ManifestFile& f : m.files) {
        nlohmann::ordered_json fj = {{"rank", f.rank}, {"file", f.file}, {"bytes", f.bytes}, {"sha256", f.sha256}};
        if (f.optimizer_offset >= 0) fj["optimizer_range"] = {f.optimizer_offset, f.optimizer_count};
        files.push_back(std::move(fj));
    }
    j["files"] = files;
    std::string text;
    try {
        text = j.dump(2) + "\n";
    } catch (const std::exception& e) {  // invalid UTF-8 in a string (e.g. run_id)
        return fail(SourceLoc{(fs::path(dir) / "manifest.json").string(), 0, 0}, "",
                    std::string("cannot encode the manifest as JSON: ") + e.what());
    }
    return write_file_atomic((fs::path(dir) / "manifest.json").string(), text, may_commit);
}

namespace {

using Json = nlohmann::ordered_json;

// Typed field access with errors that name the file and the field.
struct ManifestReader {
    std::string path;

    std::unexpected<Error> bad(const std::string& field, const std::string& message) const {
        return std::unexpected(Error(Diagnostic{SourceLoc{path, 0, 0}, field, message}));
    }
    Result<const Json*> get(const Json& obj, const std::string& prefix, const char* key,
                            const char* expected) const {
        auto it = obj.find(key);
        if (it == obj.end())
            return bad(prefix + key, std::string("missing; expected ") + expected);
        return &*it;
    }
    std::string shown(const Json& v) const {
        std::string s = v.dump();
        return s.size() > 80 ? s.substr(0, 77) + "..." : s;
    }
    Result<std::string> str(const Json& obj, const std::string& prefix, const char* key) const {
        auto v = get(obj, prefix, key, "a string");
        if (!v) return std::unexpected(v.error());
        if (!(*v)->is_string()) return bad(prefix + key, "expected a string, got " + shown(**v));
        return (*v)->get<std::string>();
    }
    Result<int64_t> integer(const Json& obj, const std::string& prefix, const char* key,
                            int64_t lo, int64_t hi) const {
        auto v = get(obj, prefix, key, "an integer");
        if (!v) return std::unexpected(v.error());
        const Json& x = **v;
        const bool fits = x.is_number_integer() &&
                          (x.is_number_unsigned()
                               ? x.get<uint64_t>() <= uint64_t(hi) && (lo <= 0 || x.get<uint64_t>() >= uint64_t(lo))
                               : x.get<int64_t>() >= lo && x.get<int64_t>() <= hi);
        if (!fits)
            return bad(prefix + key, "expected an integer in " + std::to_string(lo) + " .. " +
                                         std::to_string(hi) + ", got " + shown(x));
        return x.is_number_unsigned() ? int64_t(x.get<uint64_t>()) : x.get<int64_t>();
    }
    Result<bool> boolean(const Json& obj, const std::string& prefix, const char* key) const {
        auto v = get(obj, prefix, key, "true or false");
        if (!v) return std::unexpected(v.error());
        if (!(*v)->is_boolean()) return bad(prefix + key, "expected true or false, got " + shown(**v));
        return (*v)->get<bool>();
    }
};

// 1-based line and column of byte `offset` in `text`.
std::pair<int, int> line_col(std::string_view text, size_t offset) {
    int line = 1, col = 1;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') ++line, col = 1;
        else ++col;
    }
    return {line, col};
}

}  // namespace

#define PTD_TRY(var, expr)                                 \
    auto var##_r = (expr);                                 \
    if (!var##_r) return std::unexpected(var##_r.error()); \
    auto var = *var##_r
// The same, for a value that goes straight into `dst`.
#define PTD_TRY_SET(dst, expr)                                             \
    do {                                                                   \
        auto try_set_r = (expr);                                           \
        if (!try_set_r) return std::unexpected(try_set_r.error());         \
        dst = *try_set_r;                                                  \
    } while (0)

Result<Manifest> read_manifest(const std::string& dir) {
    const std::string path = (fs::path(dir) / "manifest.json").string();
    std::error_code ec;
    if (!fs::exists(path, ec))
        return fail(SourceLoc{path, 0, 0}, "", "checkpoint manifest \"" + path + "\" does not exist (an incomplete checkpoint?)");
    auto text = read_regular_file(path, file_kind::checkpoint_manifest);
    if (!text) return std::unexpected(text.error());
    return parse_manifest(*text, path, dir);
}

Result<Manifest> parse_manifest(std::string_view text, const std::string& path, const std::string& dir) {
    const ManifestReader r{path};
    Json j;
    try {
        j = Json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        const auto [line, col] = line_col(text, e.byte > 0 ? e.byte - 1 : 0);
        std::string what = e.what();
        if (auto pos = what.find(": syntax error"); pos != std::string::npos) what = what.substr(pos + 2);
        return fail(SourceLoc{path, line, col}, "",
                    "checkpoint manifest \"" + path + "\" is not valid JSON: " + what);
    } catch (const nlohmann::json::exception& e) {
        // Not a syntax error but a value the parser cannot hold, e.g. a number past the
        // double range ("out_of_range.406 number overflow"): found by fuzz_checkpoint_manifest.
        return fail(SourceLoc{path, 0, 0}, "", "checkpoint manifest \"" + path + "\" holds a value JSON cannot represent: " +
                                                   std::string(e.what()));
    }
    if (!j.is_object())
        return fail(SourceLoc{path, 0, 0}, "",
                    "checkpoint manifest \"" + path + "\" must be a JSON object, got " + r.shown(j));

    Manifest m;
    m.dir = dir;
    PTD_TRY(schema, r.str(j, "", "schema"));
    if (schema != manifest_schema)
        return r.bad("schema", "got \"" + schema + "\"; this ptd-engine reads \"" +
                                   std::string(manifest_schema) + "\"");
    PTD_TRY_SET(m.run_id, r.str(j, "", "run_id"));
    PTD_TRY_SET(m.step, r.integer(j, "", "step", 0, INT64_MAX));
    for (const char* key : {"spec_hash", "math_hash"}) {
        PTD_TRY(h, r.str(j, "", key));
        if (!is_hex64(h)) return r.bad(key, "expected 64 lower-case hex digits, got \"" + h + "\"");
        (std::string(key) == "spec_hash" ? m.spec_hash : m.math_hash) = h;
    }
    if (auto it = j.find("spec"); it != j.end()) {
        if (!it->is_object()) return r.bad("spec", "expected an object of strings, got " + r.shown(*it));
        for (auto kv = it->begin(); kv != it->end(); ++kv) {
            if (!kv.value().is_string())
                return r.bad("spec." + kv.key(), "expected a string, got " + r.shown(kv.value()));
            m.spec.emplace_back(kv.key(), kv.value().get<std::string>());
        }
    }

    PTD_TRY(layout_json, r.get(j, "", "layout", "an object"));
    if (!layout_json->is_object()) return r.bad("layout", "expected an object, got " + r.shown(*layout_json));
    {
        const Json& lj = *layout_json;
        CheckpointLayout& l = m.layout;
        struct IntField { const char* key; int* dst; int lo; };
        const IntField ints[] = {{"world", &l.world, 1}, {"tp", &l.tp, 1}, {"pp", &l.pp, 1},
                                 {"dp", &l.dp, 1},       {"cp", &l.cp, 1}, {"ep", &l.ep, 1},
                                 {"vpp", &l.vpp, 1},     {"zero", &l.zero, 0}};
        for (const IntField& f : ints) {
            PTD_TRY(v, r.integer(lj, "layout.", f.key, f.lo, INT32_MAX));
            *f.dst = int(v);
        }
        PTD_TRY_SET(l.distributed_optimizer, r.boolean(lj, "layout.", "distributed_optimizer"));
        PTD_TRY_SET(l.sequence_parallel, r.boolean(lj, "layout.", "sequence_parallel"));
        PTD_TRY_SET(l.recompute, r.str(lj, "layout.", "recompute"));
        PTD_TRY_SET(l.order, r.str(lj, "layout.", "order"));
        PTD_TRY(lps, r.get(lj, "layout.", "layers_per_stage", "an array of integers"));
        if (!lps->is_array()) return r.bad("layout.layers_per_stage", "expected an array of integers, got " + r.shown(*lps));
        for (const Json& x : *lps) {
            if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > INT32_MAX)
                return r.bad("layout.layers_per_stage", "expected integers ≥ 1, got " + r.shown(x));
            l.layers_per_stage.push_back(int(x.get<int64_t>()));
        }
    }

    PTD_TRY_SET(m.data_position, r.integer(j, "", "data_position", 0, INT64_MAX));
    PTD_TRY_SET(m.rng_state, r.str(j, "", "rng_state"));
    PTD_TRY_SET(m.created, r.str(j, "", "created"));

    PTD_TRY(files, r.get(j, "", "files", "an array of {rank, file, bytes, sha256}"));
    if (!files->is_array()) return r.bad("files", "expected an array, got " + r.shown(*files));
    if (int64_t(files->size()) != m.layout.world)
        return r.bad("files", "lists " + std::to_string(files->size()) + " shard files, but layout.world is " +
                                  std::to_string(m.layout.world) + "; expected one per rank");
    std::vector<bool> seen(size_t(m.layout.world), false);
    for (size_t i = 0; i < files->size(); ++i) {
        const Json& fj = (*files)[i];
        const std::string prefix = "files[" + std::to_string(i) + "].";
        if (!fj.is_object()) return r.bad("files[" + std::to_string(i) + "]", "expected an object, got " + r.shown(fj));
        ManifestFile f;
        PTD_TRY(rank, r.integer(fj, prefix, "rank", 0, m.layout.world - 1));
        f.rank = int(rank);
        if (seen[size_t(f.rank)]) return r.bad(prefix + "rank", "rank " + std::to_string(f.rank) + " is listed twice");
        seen[size_t(f.rank)] = true;
        PTD_TRY(name, r.str(fj, prefix, "file"));
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
            return r.bad(prefix + "file", "expected a file name inside the checkpoint folder, got \"" + name + "\"");
        f.file = name;
        PTD_TRY_SET(f.bytes, r.integer(fj, prefix, "bytes", 0, INT64_MAX));
        PTD_TRY(sha, r.str(fj, prefix, "sha256"));
        if (!is_hex64(sha)) return r.bad(prefix + "sha256", "expected 64 lower-case hex digits, got \"" + sha + "\"");
        f.sha256 = sha;
        if (auto range = fj.find("optimizer_range"); range != fj.end()) {
            const auto count_ok = [](const Json& x) {
                return x.is_number_integer() && (x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t(INT64_MAX) / 2
                                                                        : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT64_MAX / 2);
            };
            if (!range->is_array() || range->size() != 2 || !count_ok((*range)[0]) || !count_ok((*range)[1]))
                return r.bad(prefix + "optimizer_range",
                             "expected [offset, count], two integers ≥ 0, got " + r.shown(*range));
            f.optimizer_offset = (*range)[0].get<int64_t>();
            f.optimizer_count = (*range)[1].get<int64_t>();
        }
        m.files.push_back(std::move(f));
    }
    std::sort(m.files.begin(), m.files.end(),
              [](const ManifestFile& a, const ManifestFile& b) { return a.rank < b.rank; });
    return m;
}

#undef PTD_TRY
#undef PTD_TRY_SET

std::optional<std::string> find_latest_checkpoint(const std::string& run_dir) {
    const fs::path root = fs::path(run_dir) / "checkpoints";
    std::error_code ec;
    fs::directory_iterator it(root, ec), end;
    if (ec) return std::nullopt;
    std::optional<std::string> best;
    int64_t best_step = -1;
    for (; it != end; it.increment(ec)) {
        if (ec) break;
        const std::string name = it->path().filename().string();
        if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) continue;
        int64_t step = 0;
        const char* b = name.data() + 5;
        const char* e = name.data() + name.size();
        const auto [ptr, err] = std::from_chars(b, e, step);
        if (err != std::errc() || ptr != e || step < 0) continue;  // also skips "step-…tmp"
        std::error_code ec2;
        if (!fs::is_regular_file(it->path() / "manifest.json", ec2)) continue;  // incomplete
        if (step > best_step) {
            best_step = step;
            best = it->path().string();
        }
    }
    return best;
}

std::optional<int> restarts_recorded(const std::string& run_dir) {
    int recorded = 0;
    std::error_code ec;
    const fs::path manifest = fs::path(run_dir) / "manifest.json";
    if (fs::exists(manifest, ec)) {
        std::ifstream in(manifest);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return std::nullopt;
        if (auto it = j.find("restarts"); it != j.end() && it->is_array()) recorded = (int)it->size();
    }
    const fs::path jsonl = fs::path(run_dir) / "restarts.jsonl";
    if (fs::exists(jsonl, ec)) {
        std::ifstream in(jsonl);
        int lines = 0;
        for (std::string line; std::getline(in, line);) lines += !line.empty();
        recorded = std::max(recorded, lines);
    }
    return recorded;
}

Result<void> check_resume_compatible(const Manifest& m, const JobSpec& job, int world, bool* reshard_over_dp) {
    if (reshard_over_dp) *reshard_over_dp = false;
    const std::string dir = m.dir.empty() ? std::string("(unnamed)") : m.dir;
    const SourceLoc loc{m.dir.empty() ? std::string() : (fs::path(m.dir) / "manifest.json").string(), 0, 0};
    const std::string job_hash = job_spec_hash(job);
    if (m.math_hash != job_math_hash(job)) {
        std::string changed;
        if (!m.spec.empty()) {
            std::map<std::string, std::string> before(m.spec.begin(), m.spec.end());
            std::set<std::string> now_keys;
            for (const auto& [k, v] : job_spec_fields(job, false)) {
                now_keys.insert(k);
                auto it = before.find(k);
                const std::string old = it == before.end() ? "(unset)" : it->second;
                if (old != v) changed += (changed.empty() ? "" : ", ") + k + " " + old + " → " + v;
            }
            for (const auto& [k, v] : m.spec)
                if (k.rfind("parallel.", 0) != 0 && !now_keys.count(k))
                    changed += (changed.empty() ? "" : ", ") + k + " " + v + " → (unset)";
        }
        return fail(loc, "",
                    "checkpoint " + dir + " was written for a different job: spec hash " +
                        m.spec_hash.substr(0, 12) + " vs " + job_hash.substr(0, 12) +
                        "; the model or training settings changed" +
                        (changed.empty() ? std::string() : ": " + changed) +
                        " (only training.steps may change on resume)");
    }
    const CheckpointLayout now = layout_of(job, world);
    if (only_dp_differs(m.layout, now)) {
        if (reshard_over_dp) *reshard_over_dp = true;
        return {};
    }
    if (!(m.layout == now) || m.spec_hash != job_hash)
        return fail(loc, "",
                    "checkpoint " + dir + " was written with " + describe_layout(m.layout) +
                        "; this run has " + describe_layout(now) +
                        "; resuming on a different layout is not supported (only dp may change: the "
                        "optimizer shards are re-split over the new dp; tp, pp, cp, ep, vpp, zero, sp, "
                        "recompute, order and layers_per_stage must stay)");
    return {};
}

bool only_dp_differs(const CheckpointLayout& from, const CheckpointLayout& to) {
    if (from.dp == to.dp) return false;
    CheckpointLayout same_dp = to;
    same_dp.dp = from.dp;
    same_dp.world = from.world;
    // The world must still be the product of the degrees on both sides (a checkpoint whose
    // world is not tp·pp·dp·cp was written by some other arrangement).
    const auto product = [](const CheckpointLayout& l) { return int64_t(l.tp) * l.pp * l.dp * l.cp; };
    return same_dp == from && product(from) == from.world && product(to) == to.world;
}

Result<std::vector<int>> reshard_source_ranks(const CheckpointLayout& from, int tp, int cp, int pp) {
    // Nodes play no part in who holds what: one node of the whole world.
    auto layout = make_layout(LayoutRequest{.tp = from.tp, .cp = from.cp, .dp = from.dp, .pp = from.pp, .ep = from.ep,
                                            .gpus_per_node = std::max(1, from.world), .order = from.order});
    if (!layout) return std::unexpected(layout.error());
    if (tp < 0 || tp >= from.tp || cp < 0 || cp >= from.cp || pp < 0 || pp >= from.pp)
        return fail(SourceLoc{}, "", "position tp " + std::to_string(tp) + " cp " + std::to_string(cp) + " pp " +
                                         std::to_string(pp) + " is outside the checkpoint's " + describe_layout(from));
    const bool sharded = from.zero >= 1 && from.dp > 1;
    std::vector<int> ranks;
    for (int d = 0; d < (sharded ? from.dp : 1); ++d) ranks.push_back(layout->rank_of(tp, cp, d, pp));
    return ranks;
}

Result<OptimizerSlice> reslice_optimizer(const std::vector<OptimizerSlice>& parts, int64_t numel, int64_t offset,
                                         int64_t count, bool with_master) {
    const SourceLoc loc{parts.empty() ? std::string() : parts.front().source, 0, 0};
    if (parts.empty()) return fail(loc, "", "no shard holds this rank's optimizer state");
    std::vector<const OptimizerSlice*> sorted;
    for (const OptimizerSlice& p : parts) {
        if (p.v.size() != p.m.size() || (!p.master.empty() && p.master.size() != p.m.size()))
            return fail(SourceLoc{p.source, 0, 0}, "",
                        p.source + ": adam.m holds " + std::to_string(p.m.size()) + " elements but adam.v " +
                            std::to_string(p.v.size()) + " and master " + std::to_string(p.master.size()));
        if (with_master && p.master.empty())
            return fail(SourceLoc{p.source, 0, 0}, "",
                        p.source + ": no master blob (f32 master weights), which this run's precision needs");
        if (p.offset < 0) return fail(SourceLoc{p.source, 0, 0}, "", p.source + ": negative shard offset");
        sorted.push_back(&p);
    }
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    // Every parameter element in some shard: the joined slices reach numel without a gap.
    int64_t covered = 0;
    for (const OptimizerSlice* p : sorted) {
        if (p->offset > covered && covered < numel)
            return fail(SourceLoc{p->source, 0, 0}, "",
                        "the checkpoint's optimizer shards do not cover this rank's " + std::to_string(numel) +
                            " parameters: elements " + std::to_string(covered) + " .. " +
                            std::to_string(std::min(p->offset, numel) - 1) + " are in no shard (next: " + p->source +
                            " from element " + std::to_string(p->offset) + ")");
        covered = std::max(covered, p->offset + (int64_t)p->m.size());
    }
    if (covered < numel)
        return fail(SourceLoc{sorted.back()->source, 0, 0}, "",
                    "the checkpoint's optimizer shards do not cover this rank's " + std::to_string(numel) +
                        " parameters: elements " + std::to_string(covered) + " .. " + std::to_string(numel - 1) +
                        " are in no shard (the last, " + sorted.back()->source + ", ends at element " +
                        std::to_string(covered) + ")");
    OptimizerSlice out;
    out.offset = offset;
    out.m.assign((size_t)count, 0.0f);
    out.v.assign((size_t)count, 0.0f);
    if (with_master) out.master.assign((size_t)count, 0.0f);
    // Only parameter elements are copied: past numel is padding, zero in every layout.
    const int64_t want_end = std::min(offset + count, numel);
    for (const OptimizerSlice* p : sorted) {
        const int64_t b = std::max(offset, p->offset), e = std::min(want_end, p->offset + (int64_t)p->m.size());
        if (b >= e) continue;
        const size_t src = size_t(b - p->offset), dst = size_t(b - offset), n = size_t(e - b);
        std::copy_n(p->m.begin() + src, n, out.m.begin() + dst);
        std::copy_n(p->v.begin() + src, n, out.v.begin() + dst);
        if (with_master) std::copy_n(p->master.begin() + src, n, out.master.begin() + dst);
    }
    return out;
}

}  // namespace ptd::engine
