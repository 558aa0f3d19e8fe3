// screenshot.cpp — glReadPixels → flip → stb_image_write PNG (libstb provides the
// implementation, so only the declarations are included here).
#include "screenshot.h"

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include <GLFW/glfw3.h>  // brings <GL/gl.h>
#include <stb_image_write.h>

namespace ptd::studio {

Image read_back_buffer(int width, int height) {
    Image img;
    img.width = width;
    img.height = height;
    std::vector<uint8_t> raw((size_t)width * height * 3);
    glReadBuffer(GL_BACK);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, raw.data());
    // OpenGL's first row is the bottom one.
    img.rgb.resize(raw.size());
    const size_t row = (size_t)width * 3;
    for (int y = 0; y < height; ++y)
        std::memcpy(img.rgb.data() + (size_t)y * row, raw.data() + (size_t)(height - 1 - y) * row, row);
    return img;
}

size_t distinct_colours(const Image& img) {
    std::unordered_set<uint32_t> seen;
    for (size_t i = 0; i + 2 < img.rgb.size(); i += 3)
        seen.insert((uint32_t)img.rgb[i] << 16 | (uint32_t)img.rgb[i + 1] << 8 | img.rgb[i + 2]);
    return seen.size();
}

bool write_png(const std::string& path, const Image& img, std::string* error) {
    errno = 0;
    if (!stbi_write_png(path.c_str(), img.width, img.height, 3, img.rgb.data(), img.width * 3)) {
        if (error) *error = "cannot write " + path + (errno ? std::string(": ") + std::strerror(errno) : std::string());
        return false;
    }
    return true;
}

}  // namespace ptd::studio
