// test_hostfile.cpp — DeepSpeed-style hostfiles and resolving a job's hosts.
#include <gtest/gtest.h>

#include "ptd/hostfile.h"
#include "ptd/presets.h"

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
    ASSERT_FALSE(slots);
    EXPECT_NE(slots.error().str().find("slots=4 but cluster.gpus_per_node = 8"), std::string::npos)
        << slots.error().str();
}

}  // namespace
