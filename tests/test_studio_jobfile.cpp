// test_studio_jobfile.cpp — the job panel's file side without a window: save → open round
// trips, the modified mark, the recent files list (dedupe, at most 10, missing files and
// bad lines dropped), the unsaved-changes prompt, the Open / Save as popup's listing and
// path checks, HF config.json import and its errors, and the bandwidth / hosts /
// distributed-optimizer fields, and the recompute the panel sets over a performance recipe's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "studio_state.h"
#include "studio_test_util.h"

#include "process_test_util.h"

using namespace ptd;
using namespace ptd::studio;
namespace fs = std::filesystem;

namespace {

StudioState default_state() { return ptd_test::default_studio_state(); }

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A fresh folder per test, removed at the end.
struct TempDir : ptd_test::TempDir {
    TempDir() : ptd_test::TempDir("ptd-studio-jobfile") {}
};

void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string kHfDir = std::string(PTD_SOURCE_DIR) + "/tests/data/hf/";

}  // namespace

TEST(StudioJobFile, SaveThenOpenRoundTrips) {
    TempDir dir;
    StudioState s = default_state();
    EXPECT_EQ(s.file.path, "") << "the built-in job has no file";
    EXPECT_FALSE(job_modified(s));
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    set_recompute(s, Recompute::selective);
    ASSERT_TRUE(set_bandwidth(s, "cluster.inter_gbps", 50));
    ASSERT_TRUE(job_valid(s));
    EXPECT_TRUE(job_modified(s));

    const std::string path = dir / "job.toml";
    ASSERT_EQ(save_job_file(s, path), "");
    EXPECT_EQ(read(path), save_job_toml(s.job)) << "the file is exactly what save_job_toml writes";
    EXPECT_FALSE(job_modified(s));
    EXPECT_EQ(s.file.path, path);
    EXPECT_EQ(s.job_label, "job.toml");
    EXPECT_EQ(job_title(s), "job.toml");
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    // The CLI's loader reads it back into the same job.
    StudioState t = default_state();
    ASSERT_EQ(open_job_file(t, path), "");
    EXPECT_EQ(save_job_toml(t.job), save_job_toml(s.job));
    EXPECT_EQ(t.job.parallel.tp, 8);
    EXPECT_EQ(t.job.parallel.recompute, Recompute::selective);
    EXPECT_EQ(t.job.cluster.inter_gbps, 50);
    EXPECT_FALSE(job_modified(t));
    EXPECT_EQ(t.file.path, path);
    EXPECT_EQ(t.job_label, "job.toml");
    ASSERT_FALSE(t.file.recent.empty());
    EXPECT_EQ(t.file.recent[0], path);
}

TEST(StudioJobFile, ModifiedFollowsTheSavedText) {
    TempDir dir;
    StudioState s = default_state();
    ASSERT_EQ(save_job_file(s, dir / "a.toml"), "");
    EXPECT_FALSE(job_modified(s));
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 2));
    EXPECT_TRUE(job_modified(s));
    EXPECT_EQ(job_title(s), "a.toml*");
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 1));
    EXPECT_FALSE(job_modified(s)) << "an edit undone by hand is not a change";
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));
    request_revert(s);  // modified: asks first
    EXPECT_TRUE(prompt_visible(s));
    EXPECT_FALSE(prompt_offers_save(s));
    prompt_answer(s, PromptChoice::discard);
    EXPECT_EQ(s.job.parallel.pp, 2);
    EXPECT_FALSE(job_modified(s));
    EXPECT_FALSE(prompt_visible(s));
}

TEST(StudioJobFile, OpenErrorsNameTheFileAndChangeNothing) {
    TempDir dir;
    StudioState s = default_state();
    const std::string before = save_job_toml(s.job);
    std::string e = open_job_file(s, dir / "missing.toml");
    EXPECT_TRUE(contains(e, "missing.toml")) << e;
    write(dir / "bad.toml", "[model]\npreset = \"llama2-7b\"\n[cluster]\nnodes = 4\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                            "[parallel]\ntp = 3\n");
    e = open_job_file(s, dir / "bad.toml");
    EXPECT_TRUE(contains(e, "bad.toml")) << e;
    EXPECT_TRUE(contains(e, "parallel.tp")) << e;
    write(dir / "junk.toml", "this is = = not toml");
    e = open_job_file(s, dir / "junk.toml");
    EXPECT_TRUE(contains(e, "junk.toml")) << e;
    e = open_job_file(s, dir.path.string());
    EXPECT_TRUE(contains(e, "is a folder")) << e;
    EXPECT_EQ(save_job_toml(s.job), before);
    EXPECT_EQ(s.file.path, "");
}

TEST(StudioJobFile, RecentList) {
    TempDir dir;
    std::vector<std::string> files;
    for (int i = 0; i < 13; ++i) {
        files.push_back(dir / ("j" + std::to_string(i) + ".toml"));
        write(files.back(), "x");
    }
    std::vector<std::string> list;
    for (const std::string& f : files) list = push_recent(list, f);
    ASSERT_EQ((int)list.size(), kMaxRecent);
    EXPECT_EQ(list[0], files[12]);
    EXPECT_EQ(list[9], files[3]);
    list = push_recent(list, files[7]);  // again: moves to the front, no duplicate
    ASSERT_EQ((int)list.size(), kMaxRecent);
    EXPECT_EQ(list[0], files[7]);
    EXPECT_EQ(std::count(list.begin(), list.end(), files[7]), 1);
    // Relative paths are made absolute.
    const fs::path cwd = fs::current_path();
    fs::current_path(dir.path);
    list = push_recent(list, "j0.toml");
    fs::current_path(cwd);
    EXPECT_EQ(list[0], files[0]);

    const std::string store = dir / "config/ptd-studio/recent";
    ASSERT_EQ(write_recent(store, list), "");
    EXPECT_EQ(read_recent(store), list);

    // A store with junk: relative paths, duplicates, missing files, binary bytes, blank lines.
    fs::remove(files[7]);
    write(store, files[1] + "\n\nrelative/path.toml\n" + files[1] + "\n" + files[7] + "\n\x01\x02\xff\xfe binary\n" +
                     files[2] + "\r\n" + std::string("\0/x\n", 4) + files[3] + "\n");
    EXPECT_EQ(read_recent(store), (std::vector<std::string>{files[1], files[2], files[3]}));
    EXPECT_TRUE(read_recent(dir / "no-such-store").empty());

    // Opening and saving keep the list, persisted in the store.
    StudioState s = default_state();
    recent_load(s, store);
    EXPECT_EQ(s.file.recent.size(), 3u);
    ASSERT_EQ(save_job_file(s, dir / "saved.toml"), "");
    EXPECT_EQ(s.file.recent[0], dir / "saved.toml");
    EXPECT_EQ(read_recent(store)[0], dir / "saved.toml");
}

TEST(StudioJobFile, RecentStoreFollowsXdg) {
    const char* old_xdg = std::getenv("XDG_CONFIG_HOME");
    const std::string keep = old_xdg ? old_xdg : "";
    ::setenv("XDG_CONFIG_HOME", "/tmp/xdg-test", 1);
    EXPECT_EQ(recent_store_path(), "/tmp/xdg-test/ptd-studio/recent");
    ::unsetenv("XDG_CONFIG_HOME");
    if (const char* home = std::getenv("HOME"); home && *home == '/') {
        EXPECT_EQ(recent_store_path(), std::string(home) + "/.config/ptd-studio/recent");
    }
    if (old_xdg) ::setenv("XDG_CONFIG_HOME", keep.c_str(), 1);
}

TEST(StudioJobFile, UnsavedChangesPrompt) {
    TempDir dir;
    StudioState other = default_state();
    ASSERT_TRUE(edit_int(other, "parallel.tp", 2));
    ASSERT_EQ(save_job_file(other, dir / "other.toml"), "");

    StudioState s = default_state();
    ASSERT_EQ(save_job_file(s, dir / "mine.toml"), "");
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 2));

    // Cancel: nothing happens.
    ASSERT_EQ(request_open(s, dir / "other.toml"), "");
    EXPECT_TRUE(prompt_visible(s));
    EXPECT_TRUE(prompt_offers_save(s));
    EXPECT_TRUE(contains(prompt_text(s), "other.toml")) << prompt_text(s);
    EXPECT_EQ(s.job.parallel.tp, 4) << "nothing is opened before the answer";
    prompt_answer(s, PromptChoice::cancel);
    EXPECT_FALSE(prompt_visible(s));
    EXPECT_EQ(s.job.training.micro_batch, 2);
    EXPECT_EQ(s.file.path, dir / "mine.toml");

    // Save: the edit goes to mine.toml, then other.toml opens.
    ASSERT_EQ(request_open(s, dir / "other.toml"), "");
    prompt_answer(s, PromptChoice::save);
    EXPECT_FALSE(prompt_visible(s));
    EXPECT_EQ(s.file.path, dir / "other.toml");
    EXPECT_EQ(s.job.parallel.tp, 2);
    EXPECT_TRUE(contains(read(dir / "mine.toml"), "micro_batch = 2"));

    // Discard: the edit is lost.
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));
    ASSERT_EQ(request_open(s, dir / "mine.toml"), "");
    prompt_answer(s, PromptChoice::discard);
    EXPECT_EQ(s.file.path, dir / "mine.toml");
    EXPECT_EQ(s.job.parallel.pp, 2);
    EXPECT_FALSE(contains(read(dir / "other.toml"), "pp = 4"));

    // Not modified: no prompt at all.
    ASSERT_EQ(request_open(s, dir / "other.toml"), "");
    EXPECT_FALSE(prompt_visible(s));
    EXPECT_EQ(s.file.path, dir / "other.toml");

    // Quitting.
    EXPECT_TRUE(request_quit(s));
    s.file.quit_now = false;
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));
    EXPECT_FALSE(request_quit(s));
    EXPECT_TRUE(prompt_visible(s));
    prompt_answer(s, PromptChoice::cancel);
    EXPECT_FALSE(s.file.quit_now);
    EXPECT_FALSE(request_quit(s));
    prompt_answer(s, PromptChoice::discard);
    EXPECT_TRUE(s.file.quit_now);
    EXPECT_TRUE(request_quit(s));
}

TEST(StudioJobFile, PromptSaveWithoutAFileAsksForOne) {
    TempDir dir;
    StudioState other = default_state();
    ASSERT_EQ(save_job_file(other, dir / "other.toml"), "");
    StudioState s = default_state();  // the built-in job: no file yet
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    EXPECT_FALSE(request_quit(s));
    prompt_answer(s, PromptChoice::save);
    ASSERT_EQ(s.file.dialog, FileDialog::save_as);
    EXPECT_FALSE(prompt_visible(s)) << "the popup asks for a name first";
    file_dialog_set_path(s, dir / "named");
    ASSERT_TRUE(file_dialog_accept(s)) << s.file.dialog_error;
    EXPECT_TRUE(fs::exists(dir / "named.toml")) << "'.toml' is added";
    EXPECT_TRUE(s.file.quit_now) << "the quit goes on once saved";
}

TEST(StudioJobFile, FileDialogListsFoldersAndTomlFiles) {
    TempDir dir;
    fs::create_directories(dir / "sub/deeper");
    fs::create_directories(dir / ".hidden");
    write(dir / "b.toml", "x");
    write(dir / "a.toml", "x");
    write(dir / "notes.txt", "x");
    write(dir / ".secret.toml", "x");
    std::string err;
    const auto list = list_folder(dir.path.string(), &err);
    EXPECT_EQ(err, "");
    EXPECT_EQ(list, (std::vector<FolderEntry>{{"..", true}, {"sub", true}, {"a.toml", false}, {"b.toml", false}}));
    EXPECT_TRUE(list_folder(dir / "nope", &err).empty());
    EXPECT_TRUE(contains(err, "nope")) << err;
    EXPECT_EQ(list_folder("/", nullptr).at(0).name == "..", false) << "no parent above the root";

    StudioState s = default_state();
    file_dialog_show(s, FileDialog::open);
    file_dialog_set_folder(s, dir.path.string());
    EXPECT_EQ(s.file.dialog_folder, dir.path.string());
    file_dialog_click(s, {"sub", true});
    EXPECT_EQ(s.file.dialog_folder, dir / "sub");
    EXPECT_EQ(s.file.listing, (std::vector<FolderEntry>{{"..", true}, {"deeper", true}}));
    file_dialog_click(s, {"..", true});
    EXPECT_EQ(s.file.dialog_folder, dir.path.string());
    file_dialog_click(s, {"a.toml", false});
    EXPECT_EQ(s.file.dialog_path, dir / "a.toml");
    EXPECT_FALSE(file_dialog_accept(s)) << "a.toml is not a job";
    EXPECT_TRUE(contains(s.file.dialog_error, "a.toml")) << s.file.dialog_error;
    EXPECT_EQ(s.file.dialog, FileDialog::open) << "the popup stays open with the error";
    // A folder typed in the path field is entered.
    file_dialog_set_path(s, "sub");
    EXPECT_FALSE(file_dialog_accept(s));
    EXPECT_EQ(s.file.dialog_folder, dir / "sub");

    // Save as: an existing file needs a second Save; relative names land in the listed folder.
    ASSERT_EQ(save_job_file(s, dir / "b2.toml"), "");
    file_dialog_show(s, FileDialog::save_as);
    EXPECT_EQ(s.file.dialog_folder, dir.path.string());
    EXPECT_EQ(s.file.dialog_path, dir / "b2.toml");
    file_dialog_set_path(s, "b.toml");
    EXPECT_FALSE(file_dialog_accept(s));
    EXPECT_TRUE(contains(s.file.dialog_error, "already exists")) << s.file.dialog_error;
    EXPECT_EQ(read(dir / "b.toml"), "x");
    EXPECT_TRUE(file_dialog_accept(s)) << s.file.dialog_error;
    EXPECT_EQ(read(dir / "b.toml"), save_job_toml(s.job));
    EXPECT_EQ(s.file.dialog, FileDialog::none);
}

TEST(StudioJobFile, SavePathChecks) {
    TempDir dir;
    EXPECT_NE(check_save_path(""), "");
    EXPECT_TRUE(contains(check_save_path(dir.path.string()), "is a folder"));
    EXPECT_TRUE(contains(check_save_path(dir / "x.txt"), ".toml"));
    EXPECT_TRUE(contains(check_save_path(dir / "missing/x.toml"), "does not exist"));
    EXPECT_EQ(check_save_path(dir / "x.toml"), "");
    EXPECT_EQ(normalise_save_path("x", dir.path.string()), dir / "x.toml");
    EXPECT_EQ(normalise_save_path(" ./y.toml ", dir.path.string()), dir / "y.toml");
    StudioState s = default_state();
    const std::string e = save_job_file(s, dir / "missing/x.toml");
    EXPECT_TRUE(contains(e, "missing")) << e;
    EXPECT_EQ(s.file.path, "");
}

TEST(StudioJobFile, ImportsAnHfConfigAndSavesIt) {
    TempDir dir;
    StudioState s = default_state();
    const int seq = s.job.model.seq_len;
    ASSERT_EQ(import_hf_model(s, kHfDir + "llama-3-8b.json"), "");
    EXPECT_EQ(s.job.model.hidden, 4096);
    EXPECT_EQ(s.job.model.layers, 32);
    EXPECT_EQ(s.job.model.kv_heads, 8);
    EXPECT_EQ(s.job.model.vocab, 128256);
    EXPECT_EQ(s.job.model.seq_len, seq) << "the job's sequence length is kept";
    EXPECT_EQ(s.job.origin.model_hf_config, kHfDir + "llama-3-8b.json");
    EXPECT_TRUE(s.job.origin.model_preset.empty());
    EXPECT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_TRUE(job_modified(s));

    // Saved elsewhere, it loads back the same (the config path stays valid).
    ASSERT_EQ(save_job_file(s, dir / "hf.toml"), "");
    EXPECT_TRUE(contains(read(dir / "hf.toml"), "hf_config = "));
    StudioState t = default_state();
    ASSERT_EQ(open_job_file(t, dir / "hf.toml"), "");
    EXPECT_EQ(t.job.model, s.job.model);
    EXPECT_EQ(save_job_toml(t.job), save_job_toml(s.job));
}

TEST(StudioJobFile, HfImportErrorsLeaveTheModel) {
    TempDir dir;
    StudioState s = default_state();
    const ModelSpec before = s.job.model;
    std::string e = import_hf_model(s, dir / "none.json");
    EXPECT_TRUE(contains(e, "none.json")) << e;
    EXPECT_EQ(s.file.hf_error, e);
    write(dir / "broken.json", "{ \"model_type\": \"llama\", ");
    e = import_hf_model(s, dir / "broken.json");
    EXPECT_TRUE(contains(e, "broken.json")) << e;
    write(dir / "alien.json", "{ \"model_type\": \"not-a-transformer\" }");
    e = import_hf_model(s, dir / "alien.json");
    EXPECT_TRUE(contains(e, "model_type")) << e;
    EXPECT_FALSE(import_hf_model(s, "  ").empty());
    EXPECT_EQ(s.job.model, before);
    ASSERT_EQ(import_hf_model(s, kHfDir + "gpt2.json"), "");
    EXPECT_EQ(s.file.hf_error, "");
}

TEST(StudioJobFile, BandwidthHostsAndDistributedOptimizer) {
    StudioState s = default_state();
    ASSERT_TRUE(set_bandwidth(s, "cluster.intra_gbps", 300));
    EXPECT_EQ(s.job.cluster.intra_gbps, 300);
    EXPECT_TRUE(s.job.origin.intra_given);
    EXPECT_TRUE(contains(save_job_toml(s.job), "intra_gbps = 300"));
    EXPECT_FALSE(intra_is_auto(s));
    set_intra_auto(s, true);
    EXPECT_EQ(s.job.cluster.intra_gbps, s.job.cluster.gpu.link_gbps);
    EXPECT_FALSE(contains(save_job_toml(s.job), "intra_gbps"));
    ASSERT_TRUE(set_bandwidth(s, "cluster.intra_gbps", 300));
    EXPECT_FALSE(set_bandwidth(s, "cluster.inter_gbps", 0));
    EXPECT_TRUE(contains(bandwidth_error(s, "cluster.inter_gbps"), "allowed")) << bandwidth_error(s, "cluster.inter_gbps");
    EXPECT_EQ(s.job.cluster.inter_gbps, 50);
    ASSERT_TRUE(set_bandwidth(s, "cluster.inter_gbps", 25));
    EXPECT_EQ(bandwidth_error(s, "cluster.inter_gbps"), "");
    EXPECT_FALSE(set_bandwidth(s, "cluster.nodes", 3));

    // Hosts: one per line; blank lines and spaces around are ignored.
    ASSERT_TRUE(set_hosts_text(s, "node01\n node02 \n\nnode03\nnode04\n"));
    EXPECT_EQ(s.job.cluster.hosts, (std::vector<std::string>{"node01", "node02", "node03", "node04"}));
    EXPECT_TRUE(job_valid(s));
    EXPECT_FALSE(set_hosts_text(s, "node01\nnode02 slots=8\n"));
    EXPECT_TRUE(contains(s.file.hosts_error, "line 2")) << s.file.hosts_error;
    EXPECT_EQ(s.job.cluster.hosts.size(), 4u) << "the last good list stays";
    ASSERT_TRUE(set_hosts_text(s, "a\nb\nc\n"));  // 3 hosts for 4 nodes
    EXPECT_FALSE(job_valid(s));
    EXPECT_FALSE(field_error(s, "cluster.hosts").empty());
    EXPECT_TRUE(is_panel_key("cluster.hosts"));
    // The editor's text follows the job when the list changes elsewhere (revert, open).
    revert(s);
    sync_hosts_text(s);
    EXPECT_EQ(s.file.hosts_text, "");
    s.job.cluster.hosts = {"x1", "x2", "x3", "x4"};
    recompute(s);
    sync_hosts_text(s);
    EXPECT_EQ(s.file.hosts_text, "x1\nx2\nx3\nx4\n");

    // The distributed optimizer excludes ZeRO (the default job has zero 1); the error is
    // placed on its field.
    ASSERT_TRUE(edit_int(s, "parallel.zero", 0));
    set_distributed_optimizer(s, true);
    EXPECT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    ASSERT_TRUE(edit_int(s, "parallel.zero", 1));
    EXPECT_FALSE(field_error(s, "parallel.distributed_optimizer").empty());
    EXPECT_TRUE(is_panel_key("parallel.distributed_optimizer"));
    set_distributed_optimizer(s, false);
    EXPECT_TRUE(job_valid(s));
}

// The recompute the panel sets is the job's own: a performance recipe's (here DeepSeek-V3's
// selective ["mla_up_proj"]) no longer takes its place when the defaults are derived again.
TEST(StudioJobFile, TheRecomputeChosenOverridesTheRecipes) {
    const auto job = ptd::load_job_text(R"(
[model]
preset = "deepseek-v3"
seq_len = 4096
[cluster]
nodes = 32
gpus_per_node = 8
gpu = "gb200"
[parallel]
tp = 1
pp = 4
vpp = 4
ep = 64
expert_tp = 1
[training]
framework = "nemo"
recipe = "deepseek_v3_pretrain_256gpu_gb200_bf16"
micro_batch = 1
global_batch = 4096
)",
                                        "recipe.toml", ptd::embedded_presets());
    ASSERT_TRUE(job.has_value()) << job.error().str();
    StudioState s = make_state(ptd::embedded_presets(), *job);
    EXPECT_EQ(s.job.parallel.recompute, Recompute::selective);
    EXPECT_EQ(s.job.parallel.recompute_modules, (uint32_t)kRecomputeMlaUpProj);
    set_recompute(s, Recompute::full);
    EXPECT_EQ(s.job.parallel.recompute, Recompute::full);
    EXPECT_EQ(s.job.parallel.recompute_modules, (uint32_t)kRecomputeCoreAttn);
    EXPECT_TRUE(job_valid(s));
    EXPECT_TRUE(contains(ptd::save_job_toml(s.job), "recompute = \"full\""));
}
