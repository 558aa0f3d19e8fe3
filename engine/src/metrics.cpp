// metrics.cpp — JSON metrics lines (metrics.h).
#include "ptd/engine/metrics.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "ptd/engine/failure.h"

namespace ptd::engine {

nlohmann::json metrics_event(const MetricsSource& src, const char* event) {
    nlohmann::json j;
    j["schema"] = kMetricsSchema;
    j["event"] = event;
    j["run_id"] = src.run_id;
    j["rank"] = src.rank;
    j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return j;
}

void emit_metrics_line(const nlohmann::json& j) {
    static std::mutex mu;
    // Invalid UTF-8 in a message (e.g. a path) is replaced rather than throwing.
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    static bool stdout_gone = false;
    bool lost = false;
    {
        std::lock_guard<std::mutex> lock(mu);
        if (stdout_gone) return;
        const bool ok = std::fwrite(line.data(), 1, line.size(), stdout) == line.size() && std::fflush(stdout) == 0;
        // Gloo makes the process ignore SIGPIPE, so a reader that went away (the launcher
        // died) shows up here: stop the run instead of training on with nobody listening.
        if (!ok && errno == EPIPE) lost = stdout_gone = true;
    }
    if (lost) fatal_run_error("stdout closed: whoever reads the metrics (the launcher) has gone away");
}

nlohmann::json memory_json(const MemStats& s, const double predicted[MEM_CATEGORY_COUNT], double predicted_total) {
    nlohmann::json j = nlohmann::json::object();
    for (int c = 0; c < MEM_CATEGORY_COUNT; ++c) {
        nlohmann::json e;
        e["current"] = s.current[c];
        e["peak"] = s.peak[c];
        e["predicted"] = predicted[c] < 0 ? nlohmann::json(nullptr) : nlohmann::json(predicted[c]);
        j[mem_category_name((MemCategory)c)] = e;
    }
    j["total"] = {{"current", s.total_current}, {"peak", s.total_peak},
                  {"predicted", predicted_total < 0 ? nlohmann::json(nullptr) : nlohmann::json(predicted_total)}};
    return j;
}

}  // namespace ptd::engine
