// studio_test_util.h — the studio's view-model as the tests drive it without a window: the
// state ptd-studio opens with (the built-in default job), optionally laid out at a window size.
#pragma once

#include "studio_state.h"

namespace ptd_test {

// The state ptd-studio starts in: the embedded presets and their default job.
inline ptd::studio::StudioState default_studio_state() {
    const ptd::PresetCatalog& presets = ptd::embedded_presets();
    return ptd::studio::make_state(presets, ptd::default_job(presets));
}

// The same state laid out in a `w` × `h` window.
inline ptd::studio::StudioState default_studio_state(float w, float h) {
    ptd::studio::StudioState s = default_studio_state();
    ptd::studio::layout_resize(s, w, h);
    return s;
}

}  // namespace ptd_test
