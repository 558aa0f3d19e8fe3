// json_describe.h — a JSON value as words for error messages ("a string (\"abc\")", "2.5",
// "an object"), shared by the metrics-line parser and the manifest reader.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ptd {

inline std::string describe_json(const nlohmann::json& v) {
    using json = nlohmann::json;
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
        case json::value_t::number_integer: return std::to_string(v.get<std::int64_t>());
        case json::value_t::number_unsigned: return std::to_string(v.get<std::uint64_t>());
        case json::value_t::number_float: return v.dump();  // shortest form that reads back
        case json::value_t::string: {
            std::string s = v.get_ref<const std::string&>();
            if (s.size() > 40) s = s.substr(0, 37) + "...";
            return "a string (\"" + s + "\")";
        }
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        default: return "an unsupported value";
    }
}

}  // namespace ptd
