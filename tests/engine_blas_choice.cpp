// engine_blas_choice.cpp (test_device_select) — ptd-engine's choice of OpenBLAS kernels (engine/cpu/blas_core.cpp):
// core-type levels and candidates by instruction set, every branch of the decision (a
// generic pick replaced, a name OpenBLAS does not take, kernels that compute wrong results,
// the way back, a user's own OPENBLAS_CORETYPE), the GEMM check on this machine's BLAS, and
// the real engine process re-executing itself onto better kernels.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "process_test_util.h"
#include "ptd/engine/blas_core.h"

using namespace ptd::engine;

namespace {

CpuIsa isa_of(int level) {
    CpuIsa isa;
    isa.avx = level >= 1;
    isa.fma = isa.avx2 = level >= 2;
    isa.avx512 = level >= 3;
    isa.avx512_bf16 = level >= 4;
    return isa;
}

// The first process on an AVX-512-BF16 CPU where OpenBLAS picked `running` on its own.
BlasState first_process(const std::string& running, int cpu_level = 4) {
    BlasState st;
    st.library = "OpenBLAS 0.3.21";
    st.isa = isa_of(cpu_level);
    st.running = running;
    return st;
}

// The process ptd-engine started again with the environment `d` asked for, where OpenBLAS
// now runs `running` and the GEMM check says `check`.
BlasState next_process(const BlasDecision& d, const std::string& running, const std::string& check = "") {
    BlasState st = first_process(running);
    for (const auto& [name, value] : d.set_env) {
        if (name == "OPENBLAS_CORETYPE") st.coretype_env = value;
        if (name == "PTD_BLAS_CORETYPE") st.ours_env = value;
        if (name == "PTD_BLAS_DEFAULT") st.default_env = value;
        if (name == "PTD_BLAS_TRIED") st.tried_env = value;
    }
    st.check = check;
    return st;
}

std::string env_value(const BlasDecision& d, const std::string& name) {
    for (const auto& [n, v] : d.set_env)
        if (n == name) return v;
    return "";
}

// One rank's --describe line (it reports the BLAS choice), under extra environment.
nlohmann::json describe_blas(const std::string& env) {
    const std::string cmd = "env -u OPENBLAS_CORETYPE -u PTD_BLAS_CORETYPE -u PTD_BLAS_DEFAULT -u PTD_BLAS_TRIED " + env +
                            " RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
                            std::string(PTD_BIN_DIR) + "/ptd-engine --job " + std::string(PTD_SOURCE_DIR) +
                            "/assets/jobs/tiny-local.toml --set cluster.gpus_per_node=1 --set parallel.tp=1 "
                            "--set parallel.pp=1 --describe";
    ptd_test::Proc p = ptd_test::run_captured(cmd, "ptd_blas_choice");
    EXPECT_EQ(p.rc, 0) << cmd << "\n" << p.out << p.err;
    auto j = nlohmann::json::parse(p.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << p.out;
    return j.is_discarded() ? nlohmann::json() : j.value("blas", nlohmann::json());
}

}  // namespace

TEST(BlasCoreLevels, NamesMapToTheirInstructionSets) {
    EXPECT_EQ(blas_core_level("Cooperlake"), 4);
    EXPECT_EQ(blas_core_level("SAPPHIRERAPIDS"), 4);
    EXPECT_EQ(blas_core_level("SkylakeX"), 3);
    EXPECT_EQ(blas_core_level("haswell"), 2);
    EXPECT_EQ(blas_core_level("Zen"), 2);
    EXPECT_EQ(blas_core_level("Sandybridge"), 1);
    EXPECT_EQ(blas_core_level("Prescott"), 0);
    EXPECT_EQ(blas_core_level("Nehalem"), 0);
    EXPECT_EQ(blas_core_level("not a core"), 0);
}

TEST(BlasCoreLevels, CandidatesAreTheCpusLevelsAboveTheFloorBestFirst) {
    EXPECT_EQ(better_blas_cores(isa_of(4), 0), (std::vector<std::string>{"Cooperlake", "SkylakeX", "Haswell", "Sandybridge"}));
    EXPECT_EQ(better_blas_cores(isa_of(3), 1), (std::vector<std::string>{"SkylakeX", "Haswell"}));
    EXPECT_EQ(better_blas_cores(isa_of(2), 2), std::vector<std::string>{});
    EXPECT_EQ(better_blas_cores(isa_of(0), -1), std::vector<std::string>{});
    // AVX2 without FMA is not Haswell's level.
    CpuIsa no_fma = isa_of(2);
    no_fma.fma = false;
    EXPECT_EQ(isa_level(no_fma), 1);
}

TEST(BlasCoreDecision, GenericPickOnAModernCpuRunsAgainWithTheBestCore) {
    BlasDecision d = decide_blas_core(first_process("Prescott"));
    ASSERT_TRUE(d.reexec);
    EXPECT_EQ(env_value(d, "OPENBLAS_CORETYPE"), "Cooperlake");
    EXPECT_EQ(env_value(d, "PTD_BLAS_CORETYPE"), "Cooperlake");
    EXPECT_EQ(env_value(d, "PTD_BLAS_DEFAULT"), "Prescott");
    EXPECT_EQ(env_value(d, "PTD_BLAS_TRIED"), "Prescott,Cooperlake");

    BlasDecision second = decide_blas_core(next_process(d, "Cooperlake"));
    EXPECT_FALSE(second.reexec);
    EXPECT_TRUE(second.error.empty());
    EXPECT_EQ(second.choice.core, "Cooperlake");
    EXPECT_EQ(second.choice.chosen_by, "ptd-engine");
    EXPECT_EQ(second.choice.openblas_default, "Prescott");
    EXPECT_EQ(second.choice.check, "passed");
    EXPECT_NE(second.choice.note.find("OpenBLAS chose Prescott (sse only kernels)"), std::string::npos)
        << second.choice.note;
}

TEST(BlasCoreDecision, BestPickIsKept) {
    BlasDecision d = decide_blas_core(first_process("SkylakeX", 3));
    EXPECT_FALSE(d.reexec);
    EXPECT_TRUE(d.set_env.empty());
    EXPECT_EQ(d.choice.chosen_by, "openblas");
    EXPECT_EQ(d.choice.core, "SkylakeX");
}

TEST(BlasCoreDecision, NameOpenBlasDoesNotTakeMovesToTheNext) {
    BlasDecision d = decide_blas_core(first_process("Prescott"));
    // OpenBLAS ran its own pick again instead of Cooperlake.
    BlasDecision second = decide_blas_core(next_process(d, "Prescott"));
    ASSERT_TRUE(second.reexec);
    EXPECT_EQ(env_value(second, "OPENBLAS_CORETYPE"), "SkylakeX");
    EXPECT_EQ(env_value(second, "PTD_BLAS_TRIED"), "Prescott,Cooperlake,SkylakeX");
}

TEST(BlasCoreDecision, WrongResultsTryTheNextCore) {
    BlasDecision d = decide_blas_core(first_process("Prescott"));
    BlasDecision second = decide_blas_core(next_process(d, "Cooperlake", "sgemm NN 37x29x67: C[0][0] = 5, expected 1"));
    ASSERT_TRUE(second.reexec);
    EXPECT_EQ(env_value(second, "OPENBLAS_CORETYPE"), "SkylakeX");
}

TEST(BlasCoreDecision, EveryCoreWrongGoesBackOnceThenStops) {
    const std::string bad = "sgemm NN 37x29x67: C[0][0] = 5, expected 1";
    BlasDecision d = decide_blas_core(first_process("Prescott"));  // → Cooperlake
    std::vector<std::string> order;
    for (int guard = 0; guard < 10 && d.reexec; ++guard) {
        order.push_back(env_value(d, "OPENBLAS_CORETYPE"));
        d = decide_blas_core(next_process(d, order.back(), bad));
    }
    // Every better core computes wrong results: the way back to OpenBLAS's own pick, once;
    // it is wrong too, so the engine stops rather than train on wrong GEMMs.
    EXPECT_EQ(order, (std::vector<std::string>{"Cooperlake", "SkylakeX", "Haswell", "Sandybridge", "Prescott"}));
    EXPECT_FALSE(d.reexec);
    EXPECT_NE(d.error.find("wrong GEMM results on this CPU with every core type tried"), std::string::npos) << d.error;
    EXPECT_NE(d.error.find(bad), std::string::npos) << d.error;
}

TEST(BlasCoreDecision, BetterCoresWrongButDefaultCorrectKeepsTheDefault) {
    const std::string bad = "sgemm TN 70x33x520: C[3][1] = nan, expected 0.5";
    BlasDecision d = decide_blas_core(first_process("Prescott"));
    std::string last;
    for (int guard = 0; guard < 10 && d.reexec; ++guard) {
        last = env_value(d, "OPENBLAS_CORETYPE");
        d = decide_blas_core(next_process(d, last, last == "Prescott" ? "" : bad));
    }
    EXPECT_EQ(last, "Prescott");
    EXPECT_FALSE(d.reexec);
    EXPECT_TRUE(d.error.empty()) << d.error;
    EXPECT_EQ(d.choice.core, "Prescott");
}

TEST(BlasCoreDecision, UsersOwnCoreTypeIsHonouredAndChecked) {
    BlasState st = first_process("Prescott");
    st.coretype_env = "Prescott";
    BlasDecision d = decide_blas_core(st);
    EXPECT_FALSE(d.reexec);
    EXPECT_TRUE(d.error.empty());
    EXPECT_EQ(d.choice.chosen_by, "user (OPENBLAS_CORETYPE)");

    st.check = "sgemm NT 37x29x67: C[1][2] = 9, expected 2";
    d = decide_blas_core(st);
    EXPECT_FALSE(d.reexec);
    EXPECT_NE(d.error.find("OPENBLAS_CORETYPE=Prescott) compute wrong results"), std::string::npos) << d.error;
}

TEST(BlasCoreDecision, NoBetterLevelKeepsGenericKernelsOnAnOldCpu) {
    BlasDecision d = decide_blas_core(first_process("Prescott", 0));
    EXPECT_FALSE(d.reexec);
    EXPECT_TRUE(d.error.empty());
    EXPECT_EQ(d.choice.chosen_by, "openblas");
}

TEST(BlasGemmCheck, ThisMachinesBlasPasses) {
    EXPECT_EQ(check_blas_gemm(), "");
}

TEST(EngineBlasChoice, EngineReplacesAGenericPickWithTheBestCorrectCore) {
    const int best = isa_level(read_cpu_isa());
    if (best == 0) GTEST_SKIP() << "this CPU has no AVX: generic kernels are its best";
    // The state of a process whose OpenBLAS runs generic kernels not of the user's asking.
    nlohmann::json blas = describe_blas("OPENBLAS_CORETYPE=Prescott PTD_BLAS_CORETYPE=Prescott");
    EXPECT_EQ(blas_core_level(blas.value("core", "")), best) << blas.dump();
    EXPECT_EQ(blas.value("chosen_by", ""), "ptd-engine") << blas.dump();
    EXPECT_EQ(blas.value("openblas_default", ""), "Prescott") << blas.dump();
    EXPECT_EQ(blas.value("check", ""), "passed") << blas.dump();
}

TEST(EngineBlasChoice, EngineHonoursTheUsersCoreType) {
    nlohmann::json blas = describe_blas("OPENBLAS_CORETYPE=Prescott");
    EXPECT_EQ(blas.value("core", ""), "Prescott") << blas.dump();
    EXPECT_EQ(blas.value("chosen_by", ""), "user (OPENBLAS_CORETYPE)") << blas.dump();
}
