// cli_parse.h — how ptd and ptd-studio end their command-line parsing, so both answer a bad
// command line the same way: --help, --help-all and --version print and stop with status 0;
// anything CLI11 rejects prints "<program>: error: <why>" with a pointer to --help and stops
// with kExitConfig. Header-only: app_core itself does not link CLI11, its two programs do.
#pragma once

#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>

#include "commands.h"

namespace ptd {

// Parses argv into `app`. nullopt: go on; otherwise the status the program exits with.
inline std::optional<int> parse_command_line(CLI::App& app, const char* program, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // CallForHelp, CallForAllHelp, CallForVersion
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for usage.\n", program, e.what(), program);
        return kExitConfig;
    }
    return std::nullopt;
}

}  // namespace ptd
