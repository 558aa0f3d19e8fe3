// ptd_main.cpp — the `ptd` command line: validate, layout, presets (more come with the
// estimators and the launcher). Exit codes: 0 ok, 2 usage/config error, 1 runtime failure.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
    CLI::App app{"ptd — plan, check and run hybrid-parallel (TP × PP × DP) training jobs.\n"
                 "JOB is a TOML job spec (docs/job-spec.md), or @default / @tiny for the built-in jobs."};
    app.set_version_flag("--version", std::string("ptd ") + PTD_VERSION);
    app.require_subcommand(1);
    app.fallthrough();

    ptd::ValidateArgs va;
    auto* validate = app.add_subcommand("validate", "Check job specs; print a summary, --json, or --print the canonical TOML");
    validate->add_option("JOB", va.jobs, "Job spec file(s)")->required();
    validate->add_flag("--json", va.json, "Machine-readable result (schema ptd.validate/1)");
    validate->add_flag("--print", va.print, "Print each valid job as canonical TOML (what saving writes)");

    ptd::LayoutArgs la;
    std::string color_by = "tp";
    auto* layout = app.add_subcommand("layout", "Draw the rank layout on the node grid");
    layout->add_option("JOB", la.job, "Job spec file")->required();
    layout->add_option("--color-by", color_by, "Colour cells by TP group, PP stage, DP replica or CP rank")
        ->check(CLI::IsMember({"tp", "pp", "dp", "cp"}));
    layout->add_option("--hosts", la.hosts, "DeepSpeed-style hostfile (overrides the job's hosts)");
    layout->add_flag("--json", la.json, "Every rank and group as JSON (schema ptd.layout/1)");
    layout->add_flag("--all", la.all, "Draw every node (default: elide the middle beyond 16 nodes)");

    ptd::PresetsArgs pa;
    auto* presets_cmd = app.add_subcommand("presets", "List model and GPU presets");
    presets_cmd->add_flag("--json", pa.json, "Machine-readable list (schema ptd.presets/1)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "ptd: error: %s\nRun 'ptd --help' for usage.\n", e.what());
        return ptd::kExitConfig;
    }

    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return ptd::kExitConfig;
    }
    if (*validate) return ptd::cmd_validate(va, *presets, stdout, stderr);
    if (*layout) {
        la.color_by = color_by == "pp" ? ptd::ColorBy::pp : color_by == "dp" ? ptd::ColorBy::dp
                    : color_by == "cp" ? ptd::ColorBy::cp : ptd::ColorBy::tp;
        return ptd::cmd_layout(la, *presets, stdout, stderr);
    }
    if (*presets_cmd) return ptd::cmd_presets(pa, *presets, stdout, stderr);
    return ptd::kExitConfig;
}
