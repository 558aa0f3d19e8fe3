// group_colours.h — one palette for rank groups, shared by `ptd layout` (xterm-256
// backgrounds) and ptd-studio (RGB), so a rank has the same colour in both.
#pragma once

#include <cstdint>

#include "ptd/layout/layout.h"

namespace ptd {

enum class ColorBy { tp, pp, dp, cp };

inline constexpr int kGroupPaletteSize = 24;

// xterm-256 colour-cube entries readable with black text (CIELAB lightness 62-88, chroma
// 25-75), picked farthest-point first from 110: each entry is the candidate farthest (in
// CIELAB) from all entries before it. So neighbouring groups, which get neighbouring
// indices, differ most (adjacent entries >= 41 apart, any two >= 21; the hand-picked 12 of
// before had neighbours 32 and pairs 12 apart), and colours repeat only after 24.
inline constexpr uint8_t kGroupPaletteXterm[kGroupPaletteSize] = {110, 172, 42,  205, 141, 186, 217, 44,
                                                                   142, 209, 219, 108, 113, 147, 221, 36,
                                                                   39,  180, 175, 213, 45,  71,  215, 204};

// Palette entry for any index (cycles; negative indices wrap).
inline uint8_t group_xterm_colour(int index) {
    return kGroupPaletteXterm[(index % kGroupPaletteSize + kGroupPaletteSize) % kGroupPaletteSize];
}

// RGB of an xterm-256 colour-cube entry (16..231): 6 levels per channel.
struct Rgb {
    uint8_t r, g, b;
};
inline Rgb xterm_cube_rgb(uint8_t xterm) {
    static constexpr uint8_t level[6] = {0, 95, 135, 175, 215, 255};
    const int i = xterm - 16;
    return Rgb{level[(i / 36) % 6], level[(i / 6) % 6], level[i % 6]};
}
inline Rgb group_rgb(int index) { return xterm_cube_rgb(group_xterm_colour(index)); }

// The palette index a rank gets when colouring by `by`: its TP group for tp (each group
// its own colour), its coordinate (stage, replica, CP rank) otherwise.
inline int group_colour_key(const RankLayout& L, ColorBy by, int rank) {
    switch (by) {
        case ColorBy::tp: return L.groups[DIM_TP].group_of[rank];
        case ColorBy::pp: return L.ranks[rank].coord[DIM_PP];
        case ColorBy::dp: return L.ranks[rank].coord[DIM_DP];
        case ColorBy::cp: return L.ranks[rank].coord[DIM_CP];
    }
    return 0;
}

}  // namespace ptd
