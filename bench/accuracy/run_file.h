// run_file.h — opens a bench/accuracy data file (published_runs.toml, published_memory.toml)
// and hands back its [[run]] tables, for bench_accuracy and bench_memory alike. A file that is
// not TOML, has no [[run]] array or a [[run]] that is not a table stops the program with
// "file:line: message" and exit status 2, as every other error in these files does.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <toml++/toml.h>

// `doc` owns the tables; the returned pointers live as long as it does.
inline std::vector<const toml::table*> load_run_tables(const std::string& path, toml::table& doc) {
    try {
        doc = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        std::fprintf(stderr, "%s:%d:%d: invalid TOML: %s\n", path.c_str(), (int)e.source().begin.line,
                     (int)e.source().begin.column, std::string(e.description()).c_str());
        std::exit(2);
    }
    const toml::array* arr = doc["run"].as_array();
    if (!arr || arr->empty()) {
        std::fprintf(stderr, "%s: no [[run]] entries\n", path.c_str());
        std::exit(2);
    }
    std::vector<const toml::table*> tables;
    for (const toml::node& n : *arr) {
        if (!n.is_table()) {
            std::fprintf(stderr, "%s:%d: each [[run]] must be a table\n", path.c_str(), (int)n.source().begin.line);
            std::exit(2);
        }
        tables.push_back(n.as_table());
    }
    return tables;
}
