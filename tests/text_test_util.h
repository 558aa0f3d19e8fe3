// text_test_util.h — checking text a test got back (a message, a command's output, an export):
// whether it contains a part, and that it contains each (or none) of several, naming the one
// missing (or found).
#pragma once

#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

namespace ptd_test {

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Expects `text` to contain each of `parts`, naming the missing one.
inline void expect_mentions(const std::string& text, std::initializer_list<std::string> parts) {
    for (const std::string& part : parts) EXPECT_TRUE(contains(text, part)) << "no \"" << part << "\" in:\n" << text;
}

// Expects `text` to contain none of `parts`, naming the one found.
inline void expect_no_mention(const std::string& text, std::initializer_list<std::string> parts) {
    for (const std::string& part : parts) EXPECT_FALSE(contains(text, part)) << "\"" << part << "\" in:\n" << text;
}

}  // namespace ptd_test
