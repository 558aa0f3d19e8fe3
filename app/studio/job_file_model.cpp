// job_file_model.cpp — open / save / recent files / the unsaved-changes prompt / HF import
// and the bandwidth, hosts and distributed-optimizer fields (job_file_model.h). Paths are
// made absolute once, at the edge, so the recent list and the "is this the same file"
// checks compare like with like.
#include "job_file_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "ptd/spec/hf_import.h"
#include "studio_state.h"

namespace ptd::studio {

namespace fs = std::filesystem;

namespace {

std::string trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
}

// `path` made absolute against `base` (the working folder when empty), normalised.
std::string absolute_path(const std::string& path, const std::string& base = {}) {
    fs::path p(path);
    if (p.is_relative()) {
        std::error_code ec;
        p = (base.empty() ? fs::current_path(ec) : fs::path(base)) / p;
    }
    std::string out = p.lexically_normal().string();
    if (out.size() > 1 && out.back() == '/') out.pop_back();
    return out;
}

std::string base_name(const std::string& path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string folder_of(const std::string& path) { return fs::path(path).parent_path().string(); }

// A file the job came from: a real path, not "<default>" or "@tiny".
bool is_real_file(const std::string& f) {
    if (f.empty() || f.front() == '<' || f.front() == '@') return false;
    std::error_code ec;
    return fs::is_regular_file(f, ec);
}

std::string errno_text(int e) { return std::strerror(e); }

// Write `text` to `path` through `path`.tmp renamed into place: a failed write never
// leaves half a file behind.
std::string write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return "cannot write " + path + ": " + errno_text(errno);
        out << text;
        out.flush();
        if (!out) {
            const int e = errno;
            std::error_code ec;
            fs::remove(tmp, ec);
            return "cannot write " + path + ": " + errno_text(e);
        }
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        fs::remove(tmp, ec);
        return "cannot write " + path + ": " + ec.message();
    }
    return {};
}

void remember_recent(StudioState& s, const std::string& path) {
    JobFileState& f = s.file;
    f.recent = push_recent(std::move(f.recent), path);
    if (!f.recent_store.empty())
        if (std::string e = write_recent(f.recent_store, f.recent); !e.empty()) f.message = e;
}

// Make `job`, as the file at `path` holds it, the job: edited, revert point, saved text, title.
void adopt_job(StudioState& s, JobSpec job, const std::string& path) {
    s.job = std::move(job);
    s.original = s.job;
    s.job_label = job_display_name(s.job);
    recompute(s);
    s.file.path = path;
    s.file.saved_text = save_job_toml(s.job);
}

// Make `job` (loaded from `path`) the job, and the file the last one opened.
void install_job(StudioState& s, JobSpec job, const std::string& path) {
    adopt_job(s, std::move(job), path);
    s.file.hf_error.clear();
    s.file.intra_error.clear();
    s.file.inter_error.clear();
    s.file.message = "opened " + path;
    remember_recent(s, path);
}

// Carry out what waited for the prompt.
void carry_out(StudioState& s) {
    JobFileState& f = s.file;
    const PendingAction a = f.pending;
    f.pending = PendingAction::none;
    f.prompt_error.clear();
    switch (a) {
        case PendingAction::open:
            if (f.pending_job) install_job(s, std::move(*f.pending_job), f.pending_path);
            break;
        case PendingAction::revert: revert(s); break;
        case PendingAction::quit: f.quit_now = true; break;
        case PendingAction::none: break;
    }
    f.pending_job.reset();
}

void refresh_listing(JobFileState& f) {
    std::string err;
    f.listing = list_folder(f.dialog_folder, &err);
    if (!err.empty()) f.dialog_error = err;
}

}  // namespace

// ---- Modified ----------------------------------------------------------------------------

void job_file_init(StudioState& s) {
    s.file.path = is_real_file(s.job.origin.file) ? absolute_path(s.job.origin.file) : std::string();
    s.file.saved_text = save_job_toml(s.job);
}

bool job_modified(const StudioState& s) { return save_job_toml(s.job) != s.file.saved_text; }

std::string job_title(const StudioState& s) { return s.job_label + (job_modified(s) ? "*" : ""); }

// ---- Open / save -------------------------------------------------------------------------

std::string check_open_path(const std::string& path) {
    if (trim(path).empty()) return "choose a job file (.toml) to open";
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return path + ": no such file";
    if (fs::is_directory(st)) return path + " is a folder; allowed: a job file (.toml)";
    if (!fs::is_regular_file(st)) return path + " is not a regular file";
    return {};
}

std::string check_save_path(const std::string& path) {
    if (trim(path).empty()) return "enter a file name to save the job as";
    const fs::path p(path);
    std::error_code ec;
    if (fs::is_directory(p, ec)) return path + " is a folder; allowed: a file name ending in .toml";
    if (p.extension() != ".toml") return path + ": allowed: a file name ending in .toml";
    const fs::path parent = p.parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec)) return "folder " + parent.string() + " does not exist";
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) return path + " exists and is not a regular file";
    return {};
}

std::string normalise_save_path(const std::string& path, const std::string& folder) {
    const std::string t = trim(path);
    if (t.empty()) return {};
    std::string abs = absolute_path(t, folder);
    if (!fs::path(abs).has_extension()) abs += ".toml";
    return abs;
}

std::string open_job_file(StudioState& s, const std::string& path) {
    const std::string abs = absolute_path(trim(path));
    if (std::string e = check_open_path(abs); !e.empty()) return e;
    auto job = load_job_file(abs, s.presets);
    if (!job) return job.error().str();
    install_job(s, std::move(*job), abs);
    return {};
}

std::string save_job_file(StudioState& s, const std::string& path) {
    const std::string abs = absolute_path(trim(path));
    if (std::string e = check_save_path(abs); !e.empty()) return e;
    JobSpec job = s.job;
    // hf_config paths are read relative to the job file's folder: keep them pointing at the
    // same config when the job moves to another folder.
    if (std::string& hf = job.origin.model_hf_config; !hf.empty() && fs::path(hf).is_relative()) {
        const std::string old_folder = is_real_file(job.origin.file) ? folder_of(absolute_path(job.origin.file)) : "";
        const std::string resolved = absolute_path(hf, old_folder);
        if (old_folder != folder_of(abs)) hf = resolved;
    }
    const std::string text = save_job_toml(job);
    if (std::string e = write_file_atomically(abs, text); !e.empty()) return e;
    job.origin.file = abs;
    job.origin.locations.clear();  // they were lines of the old file
    adopt_job(s, std::move(job), abs);
    s.file.message = "saved " + abs;
    if (!job_valid(s))
        s.file.message += " (with " + std::to_string(s.diagnostics.size()) +
                          " problem(s): ptd and Open refuse the file until they are fixed)";
    remember_recent(s, abs);
    return {};
}

std::string save_job(StudioState& s) {
    if (s.file.path.empty()) {
        file_dialog_show(s, FileDialog::save_as);
        return {};
    }
    return save_job_file(s, s.file.path);
}

// ---- Unsaved-changes prompt --------------------------------------------------------------

std::string request_open(StudioState& s, const std::string& path) {
    const std::string abs = absolute_path(trim(path));
    if (std::string e = check_open_path(abs); !e.empty()) return e;
    auto job = load_job_file(abs, s.presets);
    if (!job) return job.error().str();
    if (!job_modified(s)) {
        install_job(s, std::move(*job), abs);
        return {};
    }
    s.file.pending = PendingAction::open;
    s.file.pending_job = std::move(*job);
    s.file.pending_path = abs;
    s.file.prompt_error.clear();
    return {};
}

void request_revert(StudioState& s) {
    if (!job_modified(s)) {
        revert(s);
        return;
    }
    s.file.pending = PendingAction::revert;
    s.file.prompt_error.clear();
}

bool request_quit(StudioState& s) {
    if (s.file.quit_now || !job_modified(s)) {
        s.file.quit_now = true;
        return true;
    }
    s.file.pending = PendingAction::quit;
    s.file.prompt_error.clear();
    return false;
}

bool prompt_visible(const StudioState& s) {
    return s.file.pending != PendingAction::none && s.file.dialog == FileDialog::none;
}

bool prompt_offers_save(const StudioState& s) { return s.file.pending != PendingAction::revert; }

std::string prompt_text(const StudioState& s) {
    const std::string name = s.job_label;
    switch (s.file.pending) {
        case PendingAction::open:
            return name + " has unsaved changes. Save them before opening " + base_name(s.file.pending_path) + "?";
        case PendingAction::quit: return name + " has unsaved changes. Save them before quitting?";
        case PendingAction::revert:
            return "Discard every change to " + name + " since it was " +
                   (s.file.path.empty() ? "started" : "opened or saved") + "?";
        case PendingAction::none: break;
    }
    return {};
}

void prompt_answer(StudioState& s, PromptChoice choice) {
    JobFileState& f = s.file;
    if (f.pending == PendingAction::none) return;
    switch (choice) {
        case PromptChoice::cancel:
            f.pending = PendingAction::none;
            f.pending_job.reset();
            f.prompt_error.clear();
            return;
        case PromptChoice::discard: carry_out(s); return;
        case PromptChoice::save:
            if (f.path.empty()) {
                file_dialog_show(s, FileDialog::save_as);  // carry_out follows a successful save
                return;
            }
            if (std::string e = save_job_file(s, f.path); !e.empty()) {
                f.prompt_error = e;
                return;
            }
            carry_out(s);
            return;
    }
}

// ---- The Open / Save as popup ------------------------------------------------------------

void file_dialog_show(StudioState& s, FileDialog kind) {
    JobFileState& f = s.file;
    f.dialog = kind;
    f.dialog_opened = false;
    f.dialog_error.clear();
    f.overwrite_armed = false;
    std::error_code ec;
    f.dialog_folder = f.path.empty() ? absolute_path(fs::current_path(ec).string()) : folder_of(f.path);
    if (kind == FileDialog::save_as) {
        std::string name = s.job.model.name.empty() ? "job" : s.job.model.name;
        for (char& c : name)
            if (c == '/' || c == ' ') c = '-';
        f.dialog_path = f.path.empty() ? (fs::path(f.dialog_folder) / (name + ".toml")).string() : f.path;
    } else {
        f.dialog_path.clear();
    }
    refresh_listing(f);
}

void file_dialog_set_folder(StudioState& s, const std::string& folder) {
    JobFileState& f = s.file;
    const std::string abs = absolute_path(trim(folder), f.dialog_folder);
    std::error_code ec;
    if (!fs::is_directory(abs, ec)) {
        f.dialog_error = abs + " is not a folder";
        return;
    }
    f.dialog_folder = abs;
    f.dialog_error.clear();
    refresh_listing(f);
}

void file_dialog_click(StudioState& s, const FolderEntry& e) {
    JobFileState& f = s.file;
    if (e.folder) {
        file_dialog_set_folder(s, e.name == ".." ? folder_of(f.dialog_folder)
                                                 : (fs::path(f.dialog_folder) / e.name).string());
        return;
    }
    file_dialog_set_path(s, (fs::path(f.dialog_folder) / e.name).string());
}

void file_dialog_set_path(StudioState& s, const std::string& path) {
    s.file.dialog_path = path;
    s.file.overwrite_armed = false;
    s.file.dialog_error.clear();
}

bool file_dialog_accept(StudioState& s) {
    JobFileState& f = s.file;
    const std::string typed = trim(f.dialog_path);
    std::error_code ec;
    if (!typed.empty() && fs::is_directory(absolute_path(typed, f.dialog_folder), ec)) {
        file_dialog_set_folder(s, typed);  // a folder typed into the path field: go there
        if (f.dialog == FileDialog::open) f.dialog_path.clear();
        return false;
    }
    if (f.dialog == FileDialog::open) {
        const std::string path = typed.empty() ? std::string() : absolute_path(typed, f.dialog_folder);
        if (std::string e = request_open(s, path); !e.empty()) {
            f.dialog_error = e;
            return false;
        }
        file_dialog_close(s);
        return true;
    }
    if (f.dialog != FileDialog::save_as) return false;
    const std::string path = normalise_save_path(typed, f.dialog_folder);
    if (std::string e = check_save_path(path); !e.empty()) {
        f.dialog_error = e;
        return false;
    }
    if (fs::exists(path, ec) && path != f.path && !f.overwrite_armed) {
        f.dialog_error = path + " already exists: Save again to replace it";
        f.overwrite_armed = true;
        return false;
    }
    if (std::string e = save_job_file(s, path); !e.empty()) {
        f.dialog_error = e;
        return false;
    }
    file_dialog_close(s);
    if (f.pending != PendingAction::none) carry_out(s);  // the prompt's Save, for a job without a file
    return true;
}

void file_dialog_close(StudioState& s) {
    s.file.dialog = FileDialog::none;
    s.file.dialog_opened = false;
    s.file.dialog_error.clear();
    s.file.overwrite_armed = false;
}

std::vector<FolderEntry> list_folder(const std::string& folder, std::string* error) {
    std::vector<FolderEntry> folders, files;
    std::error_code ec;
    fs::directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec);
    if (ec) {
        if (error) *error = "cannot list " + folder + ": " + ec.message();
        return {};
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const std::string name = it->path().filename().string();
        if (name.empty() || name.front() == '.') continue;
        std::error_code e2;
        if (it->is_directory(e2)) folders.push_back({name, true});
        else if (it->is_regular_file(e2) && it->path().extension() == ".toml") files.push_back({name, false});
    }
    auto by_name = [](const FolderEntry& a, const FolderEntry& b) { return a.name < b.name; };
    std::sort(folders.begin(), folders.end(), by_name);
    std::sort(files.begin(), files.end(), by_name);
    std::vector<FolderEntry> out;
    if (fs::path(folder).has_relative_path()) out.push_back({"..", true});  // not at "/"
    out.insert(out.end(), folders.begin(), folders.end());
    out.insert(out.end(), files.begin(), files.end());
    return out;
}

// ---- Recent files ------------------------------------------------------------------------

std::string recent_store_path() {
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    if (xdg && *xdg == '/') return std::string(xdg) + "/ptd-studio/recent";
    const char* home = std::getenv("HOME");
    if (home && *home == '/') return std::string(home) + "/.config/ptd-studio/recent";
    return {};
}

std::vector<std::string> read_recent(const std::string& store) {
    std::vector<std::string> out;
    std::ifstream in(store, std::ios::binary);
    if (!in) return out;
    std::string line;
    int lines = 0;
    while (std::getline(in, line) && (int)out.size() < kMaxRecent && ++lines <= 1000) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.front() != '/' || line.size() > 4096) continue;
        if (std::any_of(line.begin(), line.end(), [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; })) continue;
        const std::string p = absolute_path(line);
        std::error_code ec;
        if (!fs::is_regular_file(p, ec)) continue;  // moved or deleted since
        if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    return out;
}

std::string write_recent(const std::string& store, const std::vector<std::string>& list) {
    std::error_code ec;
    const fs::path folder = fs::path(store).parent_path();
    if (!folder.empty()) fs::create_directories(folder, ec);
    if (ec) return "cannot create " + folder.string() + ": " + ec.message();
    std::string text;
    for (size_t i = 0; i < list.size() && i < (size_t)kMaxRecent; ++i) text += list[i] + "\n";
    return write_file_atomically(store, text);
}

std::vector<std::string> push_recent(std::vector<std::string> list, const std::string& path) {
    const std::string abs = absolute_path(path);
    std::erase(list, abs);
    list.insert(list.begin(), abs);
    if (list.size() > (size_t)kMaxRecent) list.resize(kMaxRecent);
    return list;
}

void recent_load(StudioState& s, const std::string& store) {
    s.file.recent_store = store;
    s.file.recent = store.empty() ? std::vector<std::string>{} : read_recent(store);
    if (!s.file.path.empty()) remember_recent(s, s.file.path);  // opened from the command line
}

// ---- Fields ------------------------------------------------------------------------------

std::string import_hf_model(StudioState& s, const std::string& path) {
    JobFileState& f = s.file;
    const std::string t = trim(path);
    if (t.empty()) {
        f.hf_error = "model.hf_config: enter the path of a Hugging Face config.json";
        return f.hf_error;
    }
    const std::string abs = absolute_path(t);
    auto imported = import_hf_config_file(abs);
    if (!imported) {
        f.hf_error = imported.error().str();
        return f.hf_error;
    }
    ModelSpec m = imported->model;
    const int config_seq = m.seq_len;
    // Keep the job's sequence length: the config's is the longest the model supports, not
    // what one trains with. Saving writes it as an override next to hf_config.
    if (s.job.model.seq_len > 0) m.seq_len = s.job.model.seq_len;
    s.job.model = m;
    s.job.origin.model_preset.clear();
    s.job.origin.model_hf_config = abs;
    s.job.origin.model_base = imported->model;
    s.job.origin.notes.clear();
    for (const std::string& n : imported->notes) s.job.origin.notes.push_back("hf_config: " + n);
    f.hf_error.clear();
    f.hf_path = abs;
    f.message = "imported " + abs + " (" + m.name + ")";
    if (m.seq_len != config_seq)
        f.message += "; seq_len kept at " + std::to_string(m.seq_len) + " (the config allows " +
                     std::to_string(config_seq) + ")";
    recompute(s);
    return {};
}

bool set_bandwidth(StudioState& s, std::string_view key, double gbps) {
    std::string* err = key == "cluster.intra_gbps" ? &s.file.intra_error
                       : key == "cluster.inter_gbps" ? &s.file.inter_error
                                                     : nullptr;
    if (!err) return false;
    if (!std::isfinite(gbps) || gbps < 1e-6 || gbps > 1e7) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", gbps);
        *err = "got " + std::string(buf) + " GB/s; allowed: 1e-06 .. 1e+07 GB/s per GPU";
        return false;
    }
    err->clear();
    if (key == "cluster.intra_gbps") {
        s.job.cluster.intra_gbps = gbps;
        s.job.origin.intra_given = true;
    } else {
        s.job.cluster.inter_gbps = gbps;
    }
    recompute(s);
    return true;
}

std::string bandwidth_error(const StudioState& s, std::string_view key) {
    const std::string& own = key == "cluster.intra_gbps" ? s.file.intra_error : s.file.inter_error;
    return own.empty() ? field_error(s, key) : own;
}

bool intra_is_auto(const StudioState& s) { return !s.job.origin.intra_given; }

void set_intra_auto(StudioState& s, bool on) {
    s.job.origin.intra_given = !on;
    s.file.intra_error.clear();
    recompute(s);  // derive_job_defaults takes the GPU's link_gbps when not given
}

void set_distributed_optimizer(StudioState& s, bool on) {
    s.job.parallel.distributed_optimizer = on;
    s.job.origin.stack_keys_written |= stack_key_bit(StackKey::distributed_optimizer);  // chosen now, not the stack's
    recompute(s);
}

bool set_hosts_text(StudioState& s, const std::string& text) {
    JobFileState& f = s.file;
    f.hosts_text = text;
    std::vector<std::string> hosts;
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        const std::string h = trim(line);
        if (h.empty()) continue;
        const auto bad = std::find_if(h.begin(), h.end(), [](char c) {
            return c == ' ' || c == '\t' || c == '#' || c == '"' || c == '\'' || (unsigned char)c < 0x20;
        });
        if (bad != h.end()) {
            const char* what = *bad == ' ' || *bad == '\t' ? "a space"
                               : *bad == '#'                 ? "'#'"
                                                             : "a quote or control character";
            f.hosts_error = "line " + std::to_string(n) + ": \"" + h + "\" is not a host name (it contains " + what +
                            "); allowed: one host name or address per line";
            return false;
        }
        hosts.push_back(h);
    }
    f.hosts_error.clear();
    f.hosts_synced = hosts;
    if (hosts != s.job.cluster.hosts) {
        s.job.cluster.hosts = std::move(hosts);
        recompute(s);
    }
    return true;
}

void sync_hosts_text(StudioState& s) {
    JobFileState& f = s.file;
    if (s.job.cluster.hosts == f.hosts_synced) return;
    f.hosts_synced = s.job.cluster.hosts;
    f.hosts_text.clear();
    for (const std::string& h : f.hosts_synced) f.hosts_text += h + "\n";
    f.hosts_error.clear();
}

}  // namespace ptd::studio
