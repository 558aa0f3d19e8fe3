// test_hostfile.cpp — DeepSpeed-style hostfiles and resolving a job's hosts.
#include <cstdio>

#include <gtest/gtest.h>

#include "ptd/hostfile.h"
#include "ptd/spec/presets.h"

namespace {

TEST(Hostfile, ParsesHostsSlotsUsersPortsAndComments) {
    auto hosts = ptd::parse_hostfile("# cluster\nworker-1 slots=8\n\n  alice@worker-2:2222  slots=8  # gpu box\n"
                                     "[fe80::1]:22 slots=8\n10.0.0.7\n",
                                     "hosts");
    ASSERT_TRUE(hosts) << hosts.error().str();
    ASSERT_EQ(hosts->size(), 4u);
    EXPECT_EQ((*hosts)[0].host, "worker-1");
    EXPECT_EQ((*hosts)[0].slots, 8);
    EXPECT_EQ((*hosts)[1].user, "alice");
    EXPECT_EQ((*hosts)[1].port, 2222);
    EXPECT_EQ((*hosts)[1].line, 4);
    EXPECT_EQ((*hosts)[2].host, "fe80::1");
    EXPECT_EQ((*hosts)[2].port, 22);
    EXPECT_EQ((*hosts)[3].slots, 0);
}

TEST(Hostfile, DuplicateHostIsAnError) {
    auto r = ptd::parse_hostfile("a slots=8\nb slots=8\na slots=8\n", "hosts");
    ASSERT_FALSE(r);
    const ptd::Diagnostic& d = r.error().diagnostics[0];
    EXPECT_EQ(d.where.line, 3);
    EXPECT_NE(d.message.find("listed twice (first on line 1)"), std::string::npos) << d.message;
}

TEST(Hostfile, MalformedTokensAreLocated) {
    auto r = ptd::parse_hostfile("good slots=8\nbad slots=x\nh;rm slots=8\nh2 gpus=8\nh3:99999\n", "hosts");
    ASSERT_FALSE(r);
    ASSERT_EQ(r.error().diagnostics.size(), 4u) << r.error().str();
    EXPECT_EQ(r.error().diagnostics[0].where.line, 2);
    EXPECT_EQ(r.error().diagnostics[0].where.column, 5);
    EXPECT_NE(r.error().diagnostics[1].message.find("invalid host \"h;rm\""), std::string::npos);
    EXPECT_NE(r.error().diagnostics[2].message.find("allowed after the host: slots=N"), std::string::npos);
    EXPECT_NE(r.error().diagnostics[3].message.find("invalid port"), std::string::npos);
}

TEST(Hostfile, EmptyFileIsAnError) {
    EXPECT_FALSE(ptd::parse_hostfile("# nothing\n\n", "hosts"));
}

TEST(Hostfile, ResolveHostsChecksCountAndSlots) {
    ptd::JobSpec job = ptd::default_job(ptd::embedded_presets());  // 4 nodes × 8
    auto local = ptd::resolve_hosts(job);
    ASSERT_TRUE(local) << local.error().str();
    EXPECT_EQ(local->size(), 4u);

    job.cluster.hosts = {"a", "b", "c", "d"};
    auto named = ptd::resolve_hosts(job);
    ASSERT_TRUE(named);
    EXPECT_EQ((*named)[3].host, "d");

    job.cluster.hosts.clear();
    job.launch.mode = ptd::LaunchMode::ssh;
    EXPECT_FALSE(ptd::resolve_hosts(job));  // ssh needs hosts

    std::string path = ::testing::TempDir() + "/ptd_hosts";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("a slots=8\nb slots=4\nc slots=8\nd slots=8\n", f);
    std::fclose(f);
    auto slots = ptd::resolve_hosts(job, path);
    std::remove(path.c_str());
    ASSERT_FALSE(slots);
    EXPECT_NE(slots.error().str().find("slots=4 but cluster.gpus_per_node = 8"), std::string::npos)
        << slots.error().str();
}

}  // namespace

// ---- issue 12: special files, byte-order marks, echoed values ------------------------

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ptd/common/file_read.h"

namespace {

namespace fs = std::filesystem;

// A directory given as hostfile said "lists no hosts"; /dev/zero grew memory without
// end; a FIFO hung. Each is refused by the shared reader with what it is.
TEST(Hostfile, SpecialAndHugeFilesAreRefused) {
    const fs::path dir = fs::temp_directory_path() / ("ptd_hostfile_special_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "folder");
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    std::ofstream(dir / "big");
    fs::resize_file(dir / "big", 2 * ptd::kMiB);
    const std::string folder = (dir / "folder").string(), fifo = (dir / "fifo").string(), big = (dir / "big").string();

    auto r = ptd::read_hostfile(folder);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(), folder + ": error: hostfile: is a directory; expected a regular file (a hostfile)\n");
    r = ptd::read_hostfile(fifo);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(), fifo + ": error: hostfile: is a FIFO (named pipe); expected a regular file (a hostfile)\n");
    r = ptd::read_hostfile("/dev/zero");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(), "/dev/zero: error: hostfile: is a character device; expected a regular file (a hostfile)\n");
    r = ptd::read_hostfile(big);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(), big + ": error: hostfile: is 2,097,152 bytes, more than a hostfile may be (at most 1 MiB)\n");

    // Through a job, too (launch.hostfile / --hosts).
    ptd::JobSpec job = ptd::default_job(ptd::embedded_presets());
    auto via_job = ptd::resolve_hosts(job, folder);
    ASSERT_FALSE(via_job);
    EXPECT_NE(via_job.error().str().find("is a directory"), std::string::npos) << via_job.error().str();
    fs::remove_all(dir);
}

// A UTF-8 byte-order mark is accepted; other invisible characters are shown escaped.
TEST(Hostfile, ByteOrderMarkIsAcceptedAndOddCharactersAreEscaped) {
    auto ok = ptd::parse_hostfile("\xEF\xBB\xBFnode1 slots=8\nnode2 slots=8\n", "hosts");
    ASSERT_TRUE(ok) << ok.error().str();
    EXPECT_EQ((*ok)[0].host, "node1");
    auto bad = ptd::parse_hostfile("node1 slots=8\nnode\xE2\x80\x8B" "2 slots=8\n", "hosts");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("invalid host \"node\\u{200B}2\""), std::string::npos) << bad.error().str();
    auto long_token = ptd::parse_hostfile("node1 slots=" + std::string(100000, '9') + "\n", "hosts");
    ASSERT_FALSE(long_token);
    EXPECT_NE(long_token.error().str().find("(100,000 bytes)"), std::string::npos);
    EXPECT_LT(long_token.error().str().size(), 300u);
}

}  // namespace
