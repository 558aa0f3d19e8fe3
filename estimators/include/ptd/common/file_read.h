// file_read.h — the one way PTD reads a file whose path a user gave (job files, hostfiles,
// config.json, presets, run and checkpoint manifests, data files, checkpoint shards).
// Only regular files are read: a FIFO, /dev/zero, a terminal or a directory would block,
// never end or grow memory without bound, so they are refused by name before any byte is
// read. Files whose size has a sensible upper bound (a job file is a few kB) are capped,
// and the error says the path, the size and the cap.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd {

// What a file is for (named in messages) and the most bytes it may have (0 = no cap).
struct FileKind {
    const char* noun;
    uint64_t max_bytes;
};

inline constexpr uint64_t kMiB = 1ull << 20;

namespace file_kind {
inline constexpr FileKind job_toml{"a job file", 4 * kMiB};
inline constexpr FileKind preset_toml{"a preset file", 4 * kMiB};
inline constexpr FileKind hostfile{"a hostfile", 1 * kMiB};
inline constexpr FileKind hf_config{"a Hugging Face config.json", 8 * kMiB};
inline constexpr FileKind run_manifest{"a run manifest", 64 * kMiB};
inline constexpr FileKind checkpoint_manifest{"a checkpoint manifest", 64 * kMiB};
inline constexpr FileKind data{"a data file", 0};
inline constexpr FileKind checkpoint_shard{"a checkpoint shard", 0};
inline constexpr FileKind ssh_config{"an ssh config file", 1 * kMiB};
inline constexpr FileKind ssh_identity{"an SSH private key", 1 * kMiB};
inline constexpr FileKind known_hosts{"a known_hosts file", 64 * kMiB};
}  // namespace file_kind

// An open regular file (owns the descriptor; move-only).
class RegularFile {
public:
    RegularFile() = default;
    RegularFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
    RegularFile(RegularFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
    RegularFile& operator=(RegularFile&& o) noexcept;
    RegularFile(const RegularFile&) = delete;
    RegularFile& operator=(const RegularFile&) = delete;
    ~RegularFile();

    int fd() const { return fd_; }
    uint64_t size() const { return size_; }  // at open time
    int release() {  // the caller owns the descriptor from now on
        int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_ = -1;
    uint64_t size_ = 0;
};

// Opens `path` for reading without blocking (O_NONBLOCK, so a FIFO with no writer cannot
// hang the open), checks that it is a regular file within `kind`'s cap, then switches the
// descriptor back to blocking reads. Errors are located at `path`, under `key` ("" for
// none), e.g. "runs/x: error: is a directory; expected a regular file (a job file)".
Result<RegularFile> open_regular_file(const std::string& path, const FileKind& kind, const std::string& key = "");

// The whole file, at most kind.max_bytes (a file that grows past the cap while being read
// is refused too).
Result<std::string> read_regular_file(const std::string& path, const FileKind& kind, const std::string& key = "");
Result<std::vector<uint8_t>> read_regular_file_bytes(const std::string& path, const FileKind& kind,
                                                     const std::string& key = "");

// Text without a leading UTF-8 byte-order mark (EF BB BF), which some Windows editors
// write; TOML, JSON and hostfile readers accept it and ignore it.
std::string_view strip_utf8_bom(std::string_view text);

}  // namespace ptd
