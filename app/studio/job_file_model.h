// job_file_model.h — the file side of the job panel, and the job fields that came with it:
// open and save the same TOML the CLI reads (load_job_file / save_job_toml), the "modified"
// mark (the job's save_job_toml text against the text last opened or saved), the recent
// files list kept in the user's config folder, the Open / Save as popup's folder listing
// and path checks, the unsaved-changes prompt (Save / Discard / Cancel) before opening
// another file, reverting or quitting, the HF config.json import, and the bandwidth, hosts
// and distributed-optimizer fields. No ImGui here: panel_job.cpp draws it, and
// tests/test_studio_jobfile.cpp drives it without a window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/spec/job_spec.h"

namespace ptd::studio {

struct StudioState;

inline constexpr int kMaxRecent = 10;

// One entry of a folder listing: a sub-folder (or ".." for the parent) or a *.toml file.
struct FolderEntry {
    std::string name;
    bool folder = false;
    bool operator==(const FolderEntry&) const = default;
};

enum class FileDialog { none, open, save_as };
// What waits for the unsaved-changes prompt.
enum class PendingAction { none, open, revert, quit };
enum class PromptChoice { save, discard, cancel };

struct JobFileState {
    std::string path;          // absolute file the job was opened from / saved to; "" = never saved (built-in job)
    std::string saved_text;    // save_job_toml of the job when it was opened / saved
    std::vector<std::string> recent;  // absolute paths, most recent first, at most kMaxRecent
    std::string recent_store;  // where `recent` is kept; "" = not kept (tests, no HOME)
    std::string message;       // last file operation's result ("saved /x/job.toml"), for the panel

    // The Open / Save as popup.
    FileDialog dialog = FileDialog::none;
    bool dialog_opened = false;        // the panel has opened the popup for `dialog`
    std::string dialog_folder;         // folder listed (absolute)
    std::string dialog_path;           // the path field
    std::string dialog_error;          // shown in the popup, names the file
    std::vector<FolderEntry> listing;  // of dialog_folder
    bool overwrite_armed = false;      // save_as: the user was told the file exists

    // The unsaved-changes prompt.
    PendingAction pending = PendingAction::none;
    std::optional<JobSpec> pending_job;  // open: the file already loaded, installed on Discard/Save
    std::string pending_path;
    std::string prompt_error;            // Save failed: why
    bool quit_now = false;               // the window may close (set once a quit was confirmed)

    // HF config.json import (model section).
    std::string hf_path;
    std::string hf_error;                // the importer's diagnostics, naming the file
    // Bandwidth fields: a rejected value's message, by key; cleared by the next good edit.
    std::string intra_error, inter_error;
    // cluster.hosts as edited: one host per line. hosts_synced is the list the text was made
    // from or parsed into; when the job's list differs (open, revert) the text is rebuilt.
    std::string hosts_text;
    std::vector<std::string> hosts_synced;
    std::string hosts_error;             // a line that is not a host name
};

// ---- Modified ----------------------------------------------------------------------------

// Take the current job as the saved one (make_state calls it): `path` from the job's
// origin when it names a file, saved_text its TOML. No disk access.
void job_file_init(StudioState& s);
// The job differs from what was last opened or saved: save_job_toml(job) != saved_text.
// Computed on each call (a few microseconds), so edits that bypass recompute() count too.
bool job_modified(const StudioState& s);
// "job.toml" or "job.toml*" when modified; the built-in job's label otherwise.
std::string job_title(const StudioState& s);

// ---- Open / save -------------------------------------------------------------------------

// Load `path` (the strict loader the CLI uses) and make it the job: the edited job, the
// saved text, the revert point, the title and the recent list all follow. Returns "" or
// the loader's diagnostics ("/x/job.toml:3:7: error: parallel.tp: ..."); on error nothing
// changes. Does not ask about unsaved changes: request_open does.
std::string open_job_file(StudioState& s, const std::string& path);
// Write save_job_toml(job) to `path` (through a temporary file renamed into place), make
// it the job's file and the revert point. An hf_config path written relative to the old
// file's folder is rewritten to stay valid. Returns "" or why not, naming the file.
std::string save_job_file(StudioState& s, const std::string& path);
// Save to the job's own file; without one (built-in job), opens the Save as popup and
// returns "".
std::string save_job(StudioState& s);

// Why `path` cannot be saved to / opened, "" when fine: empty, a folder, a missing parent
// folder, not a .toml file (save: ".toml" is added by normalise_save_path).
std::string check_save_path(const std::string& path);
std::string check_open_path(const std::string& path);
// Absolute, with ".toml" appended when the name has no extension.
std::string normalise_save_path(const std::string& path, const std::string& folder);

// ---- Unsaved-changes prompt --------------------------------------------------------------

// Open `path`, asking first when the job is modified: loads it at once (errors returned,
// nothing changes), then installs it or leaves it pending for the prompt.
std::string request_open(StudioState& s, const std::string& path);
// Revert to the revert point, asking first when modified.
void request_revert(StudioState& s);
// The window wants to close: true when it may (nothing unsaved, or already confirmed),
// else the prompt is raised and false returned.
bool request_quit(StudioState& s);
// Whether the prompt is up, and what it offers: Save is not offered for a revert.
bool prompt_visible(const StudioState& s);
bool prompt_offers_save(const StudioState& s);
// The prompt's question, e.g. "job.toml has unsaved changes. Save them before opening x.toml?"
std::string prompt_text(const StudioState& s);
// The user's answer. Save writes the job (or opens Save as when it has no file; the pending
// action continues once that save succeeds), then carries out the pending action; Discard
// carries it out; Cancel drops it.
void prompt_answer(StudioState& s, PromptChoice choice);

// ---- The Open / Save as popup ------------------------------------------------------------

// Show the popup: the folder of the job's file (else the working folder) listed, the path
// field empty (open) or the job's file (save as).
void file_dialog_show(StudioState& s, FileDialog kind);
// Click on a listing entry: a folder is entered, a file is put in the path field.
void file_dialog_click(StudioState& s, const FolderEntry& e);
// List another folder (absolute, or relative to the listed one).
void file_dialog_set_folder(StudioState& s, const std::string& folder);
void file_dialog_set_path(StudioState& s, const std::string& path);
// The popup's OK: open (through request_open) or save as. True when the popup may close.
bool file_dialog_accept(StudioState& s);
void file_dialog_close(StudioState& s);

// The sub-folders ("..", unless at the root, first) and *.toml files of `folder`, each
// group sorted by name, hidden entries left out. Empty with `error` set when unreadable.
std::vector<FolderEntry> list_folder(const std::string& folder, std::string* error);

// ---- Recent files ------------------------------------------------------------------------

// $XDG_CONFIG_HOME/ptd-studio/recent, else $HOME/.config/ptd-studio/recent, else "".
std::string recent_store_path();
// The list in `store`: one absolute path per line; lines that are not absolute paths,
// duplicates, files that no longer exist and anything past kMaxRecent are dropped.
std::vector<std::string> read_recent(const std::string& store);
// Write `list` to `store` (creating its folder). "" or why not.
std::string write_recent(const std::string& store, const std::vector<std::string>& list);
// `path` (made absolute) moved to the front; duplicates removed; at most kMaxRecent.
std::vector<std::string> push_recent(std::vector<std::string> list, const std::string& path);
// Read the list from `store` into the state and keep it there from now on; the job's own
// file (opened with --job) goes to its front.
void recent_load(StudioState& s, const std::string& store);

// ---- Fields ------------------------------------------------------------------------------

// Import a Hugging Face config.json as the model (import_hf_config_file): the job's
// seq_len is kept, the config becomes the model's base (saving writes hf_config = path).
// Returns "" or the importer's diagnostics; on error the model is unchanged.
std::string import_hf_model(StudioState& s, const std::string& path);
// cluster.intra_gbps / cluster.inter_gbps, GB/s per GPU, as the loader accepts (1e-6 ..
// 1e7). False (and the field's error set) for an unknown key or a value out of range.
bool set_bandwidth(StudioState& s, std::string_view key, double gbps);
std::string bandwidth_error(const StudioState& s, std::string_view key);
// intra_gbps from the GPU preset's link bandwidth (true) or as given (false).
bool intra_is_auto(const StudioState& s);
void set_intra_auto(StudioState& s, bool on);
void set_distributed_optimizer(StudioState& s, bool on);
// Parse `text` (one host per line; blank lines and surrounding spaces ignored) into
// cluster.hosts. A line with a space, tab, '#' or quote inside is not a host: hosts_error
// says which line and the job keeps its previous list. Returns whether it was applied.
bool set_hosts_text(StudioState& s, const std::string& text);
// Rebuild the hosts text when the job's list changed behind the editor's back.
void sync_hosts_text(StudioState& s);

}  // namespace ptd::studio
