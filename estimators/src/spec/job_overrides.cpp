// job_overrides.cpp — `--set section.key=value`: splitting and checking the override text,
// writing each override into the parsed TOML document, and afterwards re-pointing every
// diagnostic about an overridden key at the override. Loading itself is job_load.cpp's one
// pass, so overrides get the same type/range/cross-field checks and "did you mean" hints as
// a file.
#include "ptd/spec/job_overrides.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <toml++/toml.h>

#include "spec/job_toml_internal.h"

namespace ptd {

const std::vector<std::string>& override_sections() {
    static const std::vector<std::string> sections = {"model", "cluster", "parallel", "training", "launch", "paths", "estimate"};
    return sections;
}

static std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
    return out;
}

static std::string trim(std::string_view s) {
    const char* ws = " \t\r\n";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return "";
    size_t e = s.find_last_not_of(ws);
    return std::string(s.substr(b, e - b + 1));
}

// "--set parallel.tp=3", or quoted and shortened when the text is long or has characters
// that would not show (the location is echoed in every message about the override).
static SourceLoc override_loc(std::string_view text) {
    std::string shown = quote_input(text);
    if (shown != "\"" + std::string(text) + "\"") return SourceLoc{"--set " + shown, 0, 0};
    return SourceLoc{"--set " + std::string(text), 0, 0};
}

Result<JobOverride> parse_override(std::string_view text) {
    const SourceLoc where = override_loc(text);
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos)
        return fail(where, "", "expected section.key=value (e.g. parallel.tp=4); got no '='");
    JobOverride o;
    o.text = std::string(text);
    o.value = trim(text.substr(eq + 1));
    const std::string key = trim(text.substr(0, eq));
    size_t start = 0;
    while (true) {
        size_t dot = key.find('.', start);
        o.path.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    // The deepest job key has three parts (cluster.gpu.memory_gib); a path of thousands
    // would build as many nested tables.
    constexpr size_t kMaxParts = 8;
    if (o.path.size() > kMaxParts)
        return fail(where, "",
                    "the key has " + format_count(o.path.size()) + " dotted parts; allowed: at most " +
                        std::to_string(kMaxParts) + " (section.key, or cluster.gpu.key)");
    for (const std::string& part : o.path)
        if (part.empty())
            return fail(where, key, "expected section.key=value (e.g. parallel.tp=4); the key has an empty part");
    const auto& sections = override_sections();
    if (std::find(sections.begin(), sections.end(), o.path[0]) == sections.end()) {
        std::string hint = closest_match(o.path[0], sections);
        return fail(where, key,
                    "unknown section " + quote_input(o.path[0]) + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                        "; allowed: " + join(sections));
    }
    if (o.path.size() < 2)
        return fail(where, key,
                    "names the whole [" + o.path[0] + "] table; expected section.key=value, e.g. " +
                        (o.path[0] == "parallel" ? "parallel.tp=4" : o.path[0] + ".<key>=<value>"));
    return o;
}

// The value as a TOML node. "v = <text>" must parse to exactly that one key; otherwise
// (a bare word, a path, text with newlines) the text is a plain string.
static std::string dotted(const std::vector<std::string>& path, size_t n) {
    std::string out;
    for (size_t i = 0; i < n && i < path.size(); ++i) out += (i ? "." : "") + path[i];
    return out;
}

// Text that can only be meant as a decimal number: [sign] digits [. digits] [e [sign]
// digits], underscores allowed ("1e999", "-0.5", "3_000"). "1.2.3" or "2024-01" are not.
static bool looks_numeric(std::string_view v) {
    size_t i = 0;
    auto digits = [&] {
        const size_t start = i;
        while (i < v.size() && (std::isdigit((unsigned char)v[i]) || v[i] == '_')) ++i;
        return i > start;
    };
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
    if (i < v.size() && v[i] == '.') {
        ++i;
        if (!digits()) return false;
    }
    if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
        ++i;
        if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
        if (!digits()) return false;
    }
    return i == v.size();
}

// Why TOML refused a number-like value: out of range (1e999, 2^64), or not TOML's
// spelling of a number (a leading zero, a misplaced underscore).
static std::string number_problem(const std::string& value, const std::string& toml_says) {
    std::string plain;
    for (char c : value)
        if (c != '_') plain += c;
    const bool is_float = plain.find_first_of(".eE") != std::string::npos;
    errno = 0;
    const double d = std::strtod(plain.c_str(), nullptr);
    const bool out_of_range = is_float ? (std::isinf(d) || (errno == ERANGE && std::fabs(d) > 1))
                                       : std::fabs(d) >= 9.223372036854775807e18;
    if (out_of_range)
        return "got " + quote_input(value) + ", which is out of range for " +
               (is_float ? "a double (at most about 1.8e308)" : "a 64-bit integer") +
               "; give a number in the key's allowed range";
    return "got " + quote_input(value) + ", which is not a TOML number (" + toml_says +
           "); write numbers like 4, 0.5, 3e-4 or 1_000";
}

static Result<void> set_value(toml::table& t, const JobOverride& o) {
    const std::string& key = o.path.back();
    const std::string& value = o.value;
    if (value.find_first_of("\r\n") == std::string::npos) {
        const std::string text = "v = " + value;
        std::string why;
        if (auto deep = check_toml_depth(text, "--set"); !deep) {
            why = deep.error().diagnostics.front().message;
        } else {
            try {
                toml::table doc = toml::parse(std::string_view(text), std::string_view("--set"));
                if (doc.size() == 1)
                    if (const toml::node* n = doc.get("v")) {
                        t.insert_or_assign(key, *n);
                        return {};
                    }
            } catch (const toml::parse_error& e) {
                why = std::string(e.description());
            }
        }
        if (looks_numeric(value))  // toml++ refused a number: say why, never "got string"
            return fail(override_loc(o.text), dotted(o.path, o.path.size()), number_problem(value, why));
        if (!why.empty() && (value.front() == '[' || value.front() == '{'))
            return fail(override_loc(o.text), dotted(o.path, o.path.size()),
                        "got " + quote_input(value) + ", which is not a TOML value: " + why);
        // not TOML value syntax: a bare string
    }
    t.insert_or_assign(key, value);
    return {};
}


static const char* node_kind(const toml::node& n) {
    switch (n.type()) {
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a float";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::array: return "an array";
        default: return "a value";
    }
}

static Result<void> apply_one(toml::table& doc, const JobOverride& o) {
    // A new model source replaces the model: keys written for the old preset / HF config
    // (or a whole explicit model) would otherwise silently override the new one. Later
    // `--set model.<key>=...` overrides still apply on top.
    if (o.path.size() == 2 && o.path[0] == "model" && (o.path[1] == "preset" || o.path[1] == "hf_config")) {
        doc.insert_or_assign("model", toml::table{});
    }
    toml::table* t = &doc;
    for (size_t i = 0; i + 1 < o.path.size(); ++i) {
        const std::string& part = o.path[i];
        toml::node* n = t->get(part);
        if (!n) {
            t->insert(part, toml::table{});
            n = t->get(part);
        } else if (!n->is_table()) {
            if (i == 1 && o.path[0] == "cluster" && part == "gpu" && n->is_string()) {
                // `gpu = "a100-80gb"` plus --set cluster.gpu.memory_gib=40: the same GPU
                // written as a [cluster.gpu] table on that preset, with the one key changed.
                toml::table gpu;
                gpu.insert("preset", n->as_string()->get());
                t->insert_or_assign(part, std::move(gpu));
                n = t->get(part);
            } else {
                return fail(override_loc(o.text), dotted(o.path, i + 1),
                            std::string("is ") + node_kind(*n) + " in the job, not a table; cannot set " +
                                dotted(o.path, o.path.size()));
            }
        }
        t = n->as_table();
    }
    return set_value(*t, o);
}

static bool key_under(std::string_view key, std::string_view prefix) {
    if (!key.starts_with(prefix)) return false;
    return key.size() == prefix.size() || key[prefix.size()] == '.' || key[prefix.size()] == '[';
}

void point_at_overrides(std::vector<Diagnostic>& ds, const std::vector<JobOverride>& os, bool from_saved_text) {
    for (Diagnostic& d : ds) {
        const JobOverride* hit = nullptr;
        for (const JobOverride& o : os) {
            const std::string k = dotted(o.path, o.path.size());
            // A table the override created (no source line) is reported under its own key.
            if (key_under(d.key, k) || (d.where.line == 0 && !d.key.empty() && key_under(k, d.key))) hit = &o;
        }
        if (hit) d.where = override_loc(hit->text);
        else if (from_saved_text) d.where.line = d.where.column = 0;
    }
}

void point_locations_at_overrides(JobSpec& job, const std::vector<JobOverride>& os, bool from_saved_text) {
    for (auto& [key, loc] : job.origin.locations) {
        const JobOverride* hit = nullptr;
        for (const JobOverride& o : os)
            if (key_under(key, dotted(o.path, o.path.size()))) hit = &o;
        if (hit) loc = override_loc(hit->text);
        else if (from_saved_text) loc.line = loc.column = 0;
    }
}

Result<std::vector<JobOverride>> parse_overrides(const std::vector<std::string>& texts) {
    std::vector<JobOverride> out;
    std::vector<Diagnostic> problems;
    for (const std::string& t : texts) {
        auto o = parse_override(t);
        if (o) out.push_back(std::move(*o));
        else for (Diagnostic& d : o.error().diagnostics) problems.push_back(std::move(d));
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));
    return out;
}

Result<void> write_overrides(toml::table& doc, const std::vector<JobOverride>& overrides) {
    for (const JobOverride& o : overrides)
        if (auto r = apply_one(doc, o); !r) return std::unexpected(r.error());
    return {};
}

}  // namespace ptd
