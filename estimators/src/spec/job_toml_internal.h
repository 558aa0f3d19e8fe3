// job_toml_internal.h — the typed TOML reading/writing helpers shared by the job reader
// (job_toml.cpp), the one-pass loader (job_load.cpp), the `--set` overrides
// (job_overrides.cpp), the preset loader (presets.cpp) and the exports. Not part of the
// public API.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "ptd/common/file_read.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

// Collects diagnostics and key locations for one file.
struct TomlContext {
    std::string file;
    std::vector<Diagnostic> diagnostics;
    std::map<std::string, SourceLoc> locations;

    SourceLoc loc(const toml::node& n) const;
    void error(SourceLoc where, std::string key, std::string message);
};

// Reads the keys of one table. Each read_* returns true when the key was present and
// valid (and writes `out`), false when absent (out untouched) or invalid (a diagnostic
// is recorded). finish() reports keys nobody asked for, with a "did you mean".
class TableReader {
public:
    TableReader(TomlContext& ctx, const toml::table& table, std::string prefix);

    bool read_int(std::string_view key, int& out, long long min, long long max);
    bool read_double(std::string_view key, double& out, double min, double max);
    // cost: a number > 0 and ≤ max (a price, a bandwidth, a power, a rate, a budget); 0, negatives
    // and non-finite values are refused as such, the message ending in "(unit)".
    bool read_positive(std::string_view key, double& out, double max, const char* unit);
    bool read_bool(std::string_view key, bool& out);
    bool read_string(std::string_view key, std::string& out);
    // A string that must be one of `words`; out = its index.
    bool read_word(std::string_view key, int& out, const std::vector<std::string>& words);
    // The same, also taking each alias (another name users give the same thing) for its word.
    using WordAliases = std::vector<std::pair<std::string, std::string>>;  // alias → word
    bool read_word(std::string_view key, int& out, const std::vector<std::string>& words, const WordAliases& aliases);
    bool read_string_array(std::string_view key, std::vector<std::string>& out);
    bool read_int_array(std::string_view key, std::vector<int>& out, long long min, long long max);
    const toml::table* subtable(std::string_view key);  // nullptr if absent or not a table
    const toml::array* subarray(std::string_view key);  // [[key]] tables; nullptr if absent or not an array

    bool has(std::string_view key) const;
    void require(std::string_view key, const char* what);
    SourceLoc where(std::string_view key) const;  // the key's value, else the table
    std::string full_key(std::string_view key) const { return full(key); }  // "prefix.key"
    void finish();

private:
    const toml::node* find(std::string_view key);
    // The key's node when it is a number (its value in x); nullptr when absent or not a number
    // (then a diagnostic is recorded).
    const toml::node* number(std::string_view key, double& x);
    std::string full(std::string_view key) const;
    void type_error(const toml::node& n, std::string_view key, const char* expected);

    TomlContext& ctx_;
    const toml::table& table_;
    std::string prefix_;
    std::vector<std::string> known_;
};

// Refuses structures deeper than any job uses (dotted keys, headers, nested arrays and
// inline tables) before toml++, whose recursive parser would overflow the stack on them.
Result<void> check_toml_depth(std::string_view text, const std::string& file);
// check_toml_depth, then toml++; a parse error keeps toml++'s line and column.
Result<toml::table> parse_toml(std::string_view text, const std::string& file);
// load_job_text on an already-parsed document (`file` names it in diagnostics and anchors
// relative hf_config paths).
Result<JobSpec> load_job_table(const toml::table& doc, const std::string& file, const PresetCatalog& presets);
// A job (or preset) file through the shared reader: regular files only, size-capped.
Result<std::string> read_text_file(const std::string& path, const FileKind& kind = file_kind::job_toml);

// ---- `--set` overrides on a parsed document (job_overrides.cpp) --------------------------
// parse_override on each text; every malformed one is reported, in order.
Result<std::vector<JobOverride>> parse_overrides(const std::vector<std::string>& texts);
// Writes the overrides into `doc`, in order (a later override of the same key wins).
Result<void> write_overrides(toml::table& doc, const std::vector<JobOverride>& overrides);
// Diagnostics and recorded key locations about an overridden key name the override (the
// last one wins, like the value). `from_saved_text`: the document was not a file the user
// can open, so other line numbers would mislead and are dropped.
void point_at_overrides(std::vector<Diagnostic>& ds, const std::vector<JobOverride>& os, bool from_saved_text);
void point_locations_at_overrides(JobSpec& job, const std::vector<JobOverride>& os, bool from_saved_text);

// The [model] keys (also the body of each model preset). from_scratch = no preset or HF
// config underneath, so arch/layers/hidden/heads/vocab/seq_len are required.
void read_model_keys(TableReader& r, ModelSpec& m, ModelKeysGiven& given, bool from_scratch);
// The [cluster.gpu] keys (also the body of each GPU preset).
void read_gpu_keys(TableReader& r, GpuSpec& g, bool from_scratch);

// Canonical TOML output.
class TomlWriter {
public:
    void header(std::string_view name);
    void comment(std::string_view text);
    void int_(std::string_view k, long long v, std::string_view comment = {});
    void dbl(std::string_view k, double v, std::string_view comment = {});
    void boolean(std::string_view k, bool v, std::string_view comment = {});
    void str(std::string_view k, std::string_view v, std::string_view comment = {});
    void strings(std::string_view k, const std::vector<std::string>& v);
    void ints(std::string_view k, const std::vector<int>& v);
    void string_lists(std::string_view k, const std::vector<std::vector<std::string>>& v);  // [["a", "b"], ["c"]]
    const std::string& text() const { return out_; }

private:
    void key(std::string_view k, std::string_view raw_value, std::string_view comment = {});
    std::string out_;
};

std::string toml_quote(std::string_view s);
std::string toml_double(double v);
void write_model_keys(TomlWriter& w, const ModelSpec& m, const ModelSpec* base);
void write_gpu_keys(TomlWriter& w, const GpuSpec& g, const GpuSpec* base);

}  // namespace ptd
