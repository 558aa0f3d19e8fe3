// screenshot.h — read the rendered frame back from OpenGL and save it as a PNG
// (`ptd-studio --screenshot`, used by tests/studio_screenshot.sh and the docs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptd::studio {

struct Image {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;  // top row first, 3 bytes per pixel
};

// The current GL back buffer (call after rendering, before swapping), flipped so the top
// row comes first.
Image read_back_buffer(int width, int height);

// How many different RGB values the image holds (a blank or failed render has 1 or 2).
size_t distinct_colours(const Image& img);

// Write `img` as a PNG; false with `error` set when the file cannot be written.
bool write_png(const std::string& path, const Image& img, std::string* error);

}  // namespace ptd::studio
