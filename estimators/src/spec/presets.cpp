// presets.cpp — model and GPU presets from assets/presets/*.toml (or their embedded copy).
#include "ptd/spec/presets.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "spec/job_toml_internal.h"

namespace ptd {

namespace fs = std::filesystem;

const ModelSpec* PresetCatalog::find_model(std::string_view name) const {
    for (const ModelSpec& m : models)
        if (m.name == name) return &m;
    return nullptr;
}
const GpuSpec* PresetCatalog::find_gpu(std::string_view name) const {
    for (const GpuSpec& g : gpus)
        if (g.name == name) return &g;
    return nullptr;
}
std::vector<std::string> PresetCatalog::model_names() const {
    std::vector<std::string> out;
    for (const ModelSpec& m : models) out.push_back(m.name);
    return out;
}
std::vector<std::string> PresetCatalog::gpu_names() const {
    std::vector<std::string> out;
    for (const GpuSpec& g : gpus) out.push_back(g.name);
    return out;
}

const ClusterPreset* PresetCatalog::find_cluster(std::string_view name) const {
    for (const ClusterPreset& c : clusters)
        if (c.name == name) return &c;
    return nullptr;
}
std::vector<std::string> PresetCatalog::cluster_names() const {
    std::vector<std::string> out;
    for (const ClusterPreset& c : clusters) out.push_back(c.name);
    return out;
}
const ClusterPreset* PresetCatalog::default_cluster_for_gpu(std::string_view gpu) const {
    for (const ClusterPreset& c : clusters)
        if (c.gpu == gpu) return &c;
    return nullptr;
}

// Each top-level table of a preset document is one preset named by its key.
// toml++ keeps keys sorted, so presets are visited in source-line order to keep the file's
// order (families together, small to large).
template <class Parse>
static void read_preset_tables(TomlContext& ctx, const toml::table& doc, const char* kind, Parse parse) {
    std::vector<std::pair<const toml::key*, const toml::node*>> entries;
    for (const auto& [k, v] : doc) entries.push_back({&k, &v});
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        return a.second->source().begin.line < b.second->source().begin.line;
    });
    for (const auto& [kp, vp] : entries) {
        const toml::node& v = *vp;
        std::string name(kp->str());
        if (const toml::table* t = v.as_table()) parse(name, *t);
        else
            ctx.error(ctx.loc(v), name,
                      std::string("expected a table [") + name + "] describing a " + kind + " preset");
    }
}

Result<PresetCatalog> parse_presets(std::string_view models_toml, const std::string& models_file,
                                    std::string_view gpus_toml, const std::string& gpus_file) {
    PresetCatalog cat;
    std::vector<Diagnostic> problems;

    if (auto doc = parse_toml(models_toml, models_file); !doc) {
        problems = doc.error().diagnostics;
    } else {
        TomlContext ctx;
        ctx.file = models_file;
        read_preset_tables(ctx, *doc, "model", [&](const std::string& name, const toml::table& t) {
            TableReader r(ctx, t, name);
            ModelSpec m;
            ModelKeysGiven given;
            read_model_keys(r, m, given, /*from_scratch=*/true);
            fill_model_defaults(m, given);
            m.name = name;
            r.finish();
            cat.models.push_back(std::move(m));
        });
        problems.insert(problems.end(), ctx.diagnostics.begin(), ctx.diagnostics.end());
    }

    if (auto doc = parse_toml(gpus_toml, gpus_file); !doc) {
        problems.insert(problems.end(), doc.error().diagnostics.begin(), doc.error().diagnostics.end());
    } else {
        TomlContext ctx;
        ctx.file = gpus_file;
        read_preset_tables(ctx, *doc, "GPU", [&](const std::string& name, const toml::table& t) {
            TableReader r(ctx, t, name);
            GpuSpec g;
            read_gpu_keys(r, g, /*from_scratch=*/true);
            g.name = name;
            r.finish();
            cat.gpus.push_back(std::move(g));
        });
        problems.insert(problems.end(), ctx.diagnostics.begin(), ctx.diagnostics.end());
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));
    return cat;
}

Result<void> parse_cluster_presets(PresetCatalog& cat, std::string_view clusters_toml, const std::string& file) {
    auto doc = parse_toml(clusters_toml, file);
    if (!doc) return std::unexpected(doc.error());
    TomlContext ctx;
    ctx.file = file;
    std::vector<ClusterPreset> out;
    read_preset_tables(ctx, *doc, "cluster", [&](const std::string& name, const toml::table& t) {
        TableReader r(ctx, t, name);
        ClusterPreset c;
        c.name = name;
        for (const char* key : {"description", "gpu", "gpus_per_node", "nics_per_node", "nic_gbps", "rail_optimized",
                                "nvls", "intra_gbps", "host_memory_gib", "pcie_gbps", "cpu_adam_params_per_s"})
            r.require(key, "every cluster preset writes all its keys (see the file's header)");
        r.read_string("description", c.description);
        if (r.read_string("gpu", c.gpu) && !cat.find_gpu(c.gpu))
            ctx.error(r.where("gpu"), name + ".gpu",
                      "unknown GPU preset \"" + c.gpu + "\"; allowed: a preset of gpus.toml");
        r.read_int("gpus_per_node", c.gpus_per_node, 1, 1024);
        r.read_int("nics_per_node", c.nics_per_node, 1, 64);
        r.read_double("nic_gbps", c.nic_gbps, 1e-3, 1e5);
        r.read_bool("rail_optimized", c.rail_optimized);
        r.read_bool("nvls", c.nvls);
        r.read_double("intra_gbps", c.intra_gbps, 1e-6, 1e7);
        r.read_double("host_memory_gib", c.host_memory_gib, 1e-3, 1e9);
        r.read_double("pcie_gbps", c.pcie_gbps, 1e-3, 1e6);
        r.read_double("cpu_adam_params_per_s", c.cpu_adam_params_per_s, 1e6, 1e13);  // bits
        r.read_double("host_op_us", c.host_op_us, 0.01, 1e5);  // hostov: optional
        // gb200: optional — a domain of several nodes (GB200 NVL72), made of whole nodes.
        if (r.read_int("nvlink_domain", c.nvlink_domain, 1, 1 << 20) && c.nvlink_domain % c.gpus_per_node != 0)
            ctx.error(r.where("nvlink_domain"), name + ".nvlink_domain",
                      "got " + std::to_string(c.nvlink_domain) + " with gpus_per_node " +
                          std::to_string(c.gpus_per_node) + "; allowed: a multiple of gpus_per_node");
        r.finish();
        out.push_back(std::move(c));
    });
    if (!ctx.diagnostics.empty()) return std::unexpected(Error(std::move(ctx.diagnostics)));
    cat.clusters = std::move(out);
    return {};
}

static fs::path executable_dir() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

std::string find_assets_dir() {
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("PTD_ASSETS"); env && *env) candidates.emplace_back(env);
    if (fs::path exe = executable_dir(); !exe.empty()) {
        candidates.push_back(exe / ".." / "share" / "ptd" / "assets");
        candidates.push_back(exe / ".." / "assets");
        candidates.push_back(exe / ".." / ".." / "assets");
    }
#ifdef PTD_SOURCE_ASSETS_DIR
    candidates.emplace_back(PTD_SOURCE_ASSETS_DIR);
#endif
    for (const fs::path& dir : candidates) {
        std::error_code ec;
        if (fs::is_regular_file(dir / "presets" / "models.toml", ec) &&
            fs::is_regular_file(dir / "presets" / "gpus.toml", ec))
            return fs::weakly_canonical(dir, ec).string();
    }
    return {};
}

Result<PresetCatalog> load_presets() {
    // PTD_ASSETS=embedded forces the compiled-in copy; any other value must be a folder
    // holding presets/ (the user asked for it, so falling back would hide a mistake).
    if (const char* env = std::getenv("PTD_ASSETS"); env && *env) {
        std::string want = env;
        if (want == "embedded") return embedded_presets();
        std::error_code ec;
        if (!fs::is_regular_file(fs::path(want) / "presets" / "models.toml", ec) ||
            !fs::is_regular_file(fs::path(want) / "presets" / "gpus.toml", ec))
            return fail(SourceLoc{"environment"}, "PTD_ASSETS",
                        "got \"" + want + "\", which has no presets/models.toml and presets/gpus.toml; allowed: an "
                        "assets folder, \"embedded\", or unset");
    }
    std::string dir = find_assets_dir();
    if (dir.empty()) return embedded_presets();
    std::string models_file = dir + "/presets/models.toml";
    std::string gpus_file = dir + "/presets/gpus.toml";
    auto models = read_text_file(models_file, file_kind::preset_toml);
    if (!models) return std::unexpected(models.error());
    auto gpus = read_text_file(gpus_file, file_kind::preset_toml);
    if (!gpus) return std::unexpected(gpus.error());
    auto cat = parse_presets(*models, models_file, *gpus, gpus_file);
    if (!cat) return cat;
    cat->origin = dir;
    // nccl: clusters.toml is newer than the other two; an assets folder without it (an older
    // copy) gets the embedded cluster presets, a malformed one is an error.
    std::string clusters_file = dir + "/presets/clusters.toml";
    std::error_code ec;
    if (fs::exists(clusters_file, ec)) {
        auto text = read_text_file(clusters_file, file_kind::preset_toml);
        if (!text) return std::unexpected(text.error());
        if (auto ok = parse_cluster_presets(*cat, *text, clusters_file); !ok) return std::unexpected(ok.error());
    } else {
        // The embedded cluster presets whose GPU this folder's gpus.toml has.
        for (const ClusterPreset& c : embedded_presets().clusters)
            if (cat->find_gpu(c.gpu)) cat->clusters.push_back(c);
    }
    return cat;
}

const PresetCatalog& embedded_presets() {
    static const PresetCatalog cat = [] {
        auto parsed = parse_presets(embedded_models_toml(), "<embedded>/presets/models.toml",
                                    embedded_gpus_toml(), "<embedded>/presets/gpus.toml");
        // The embedded files are checked by test_presets; a failure here is a build bug.
        if (!parsed) {
            std::fprintf(stderr, "ptd: internal error: embedded presets do not parse:\n%s",
                         parsed.error().str().c_str());
            std::abort();
        }
        if (parsed) {
            if (auto ok = parse_cluster_presets(*parsed, embedded_clusters_toml(), "<embedded>/presets/clusters.toml");
                !ok) {
                std::fprintf(stderr, "ptd: internal error: embedded cluster presets do not parse:\n%s",
                             ok.error().str().c_str());
                std::abort();
            }
        }
        parsed->origin = "<embedded>";
        return *parsed;
    }();
    return cat;
}

}  // namespace ptd
