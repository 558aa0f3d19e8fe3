// residual_file.h — the check both benches run on the error-bar table they generate
// (bench_accuracy --residuals-check, bench_memory --residuals-check): the committed file is
// what the bench computes now, or the first line that differs is named with its row.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

// 0 when `file` holds exactly `computed`; else 1 with "file:line: the residual table is stale
// (row …)" and how to regenerate it on stderr; 2 when the file cannot be read.
inline int check_residual_file(const char* bench, const std::string& computed, const std::string& file) {
    std::FILE* f = std::fopen(file.c_str(), "rb");
    if (!f) {
        std::fprintf(stderr, "%s: --residuals-check: cannot read %s\n", bench, file.c_str());
        return 2;
    }
    std::string committed;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) committed.append(buf, n);
    std::fclose(f);
    if (committed == computed) {
        std::printf("%s is current\n", file.c_str());
        return 0;
    }
    auto lines = [](const std::string& t) {
        std::vector<std::string> out;
        size_t at = 0;
        while (at < t.size()) {
            size_t nl = t.find('\n', at);
            if (nl == std::string::npos) nl = t.size();
            out.push_back(t.substr(at, nl - at));
            at = nl + 1;
        }
        return out;
    };
    const std::vector<std::string> a = lines(committed), b = lines(computed);
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    std::string row = "the header";
    for (size_t k = 0; k < std::min(i + 1, b.size()); ++k) {
        if (b[k] == "[pooled]" || b[k] == "[[model]]" || b[k] == "[[generation]]") row = b[k];
        else if (b[k].rfind("name = ", 0) == 0 || b[k].rfind("model = ", 0) == 0) row += " " + b[k];
    }
    std::fprintf(stderr,
                 "%s:%zu: the residual table is stale (row %s): committed \"%s\", %s computes \"%s\"; "
                 "regenerate it: %s --residuals > %s\n",
                 file.c_str(), i + 1, row.c_str(), i < a.size() ? a[i].c_str() : "<end of file>", bench,
                 i < b.size() ? b[i].c_str() : "<end of table>", bench, file.c_str());
    return 1;
}
