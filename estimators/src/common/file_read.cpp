// file_read.cpp — open only regular files, without blocking, and read them within a cap
// (see file_read.h for why).
#include "ptd/common/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ptd {

RegularFile& RegularFile::operator=(RegularFile&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.fd_;
        size_ = o.size_;
        o.fd_ = -1;
    }
    return *this;
}

RegularFile::~RegularFile() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

const char* file_type_phrase(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::string mib_text(uint64_t bytes) {
    if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
    return format_count(bytes) + " bytes";
}

std::string too_large(const FileKind& kind, uint64_t size) {
    return "is " + format_count(size) + " bytes, more than " + kind.noun + " may be (at most " +
           mib_text(kind.max_bytes) + ")";
}

template <class Buffer>
Result<Buffer> read_all(const std::string& path, const FileKind& kind, const std::string& key) {
    auto file = open_regular_file(path, kind, key);
    if (!file) return std::unexpected(file.error());
    Buffer out;
    // The size at open time is a hint only: the file may change while it is read.
    if (file->size() > 0 && (kind.max_bytes == 0 || file->size() <= kind.max_bytes)) out.reserve(file->size());
    char chunk[1 << 16];
    for (;;) {
        const ssize_t got = ::read(file->fd(), chunk, sizeof chunk);
        if (got < 0) {
            if (errno == EINTR) continue;
            return fail(SourceLoc{path}, key, std::string("cannot read: ") + std::strerror(errno));
        }
        if (got == 0) break;
        out.insert(out.end(), chunk, chunk + got);
        if (kind.max_bytes != 0 && out.size() > kind.max_bytes)
            return fail(SourceLoc{path}, key,
                        "grew past " + mib_text(kind.max_bytes) + " while being read, more than " + kind.noun +
                            " may be");
    }
    return out;
}

}  // namespace

Result<RegularFile> open_regular_file(const std::string& path, const FileKind& kind, const std::string& key) {
    const SourceLoc where{path};
    if (path.empty()) return fail(where, key, std::string("empty path; expected the path of ") + kind.noun);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return fail(where, key, std::string("cannot open: ") + std::strerror(errno));
    RegularFile file(fd, 0);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail(where, key, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(where, key,
                    std::string("is ") + file_type_phrase(st.st_mode) + "; expected a regular file (" + kind.noun +
                        ")");
    const uint64_t size = (uint64_t)st.st_size;
    if (kind.max_bytes != 0 && size > kind.max_bytes) return fail(where, key, too_large(kind, size));
    // Regular files never block; clear O_NONBLOCK so callers see ordinary semantics.
    if (const int flags = ::fcntl(fd, F_GETFL); flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return RegularFile(file.release(), size);
}

Result<std::string> read_regular_file(const std::string& path, const FileKind& kind, const std::string& key) {
    return read_all<std::string>(path, kind, key);
}

Result<std::vector<uint8_t>> read_regular_file_bytes(const std::string& path, const FileKind& kind,
                                                     const std::string& key) {
    return read_all<std::vector<uint8_t>>(path, kind, key);
}

std::string_view strip_utf8_bom(std::string_view text) {
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    return text;
}

}  // namespace ptd
