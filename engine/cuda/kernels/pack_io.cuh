// pack_io.cuh — f32 views of a few consecutive elements of a 16-bit or f32 buffer, read
// and written as 16-byte packs (128-bit loads/stores) whenever the count is a multiple
// of the pack, element by element otherwise. The kernels of kernb (attention, xent,
// embedding) use it so that each of them states only "V elements per access" and keeps
// one code path for f32, bf16 and f16 storage.
#pragma once

#include <cstdint>

#include "../dialect.cuh"

namespace ptd::cuda::PTD_CUDA_NS {

// Elements of a 16-byte pack of T (4 f32, 8 bf16/f16).
template <class T>
constexpr int pack_elems = 16 / (int)sizeof(T);

// The widest per-thread access both A and B rows allow: a pack of the narrower type
// (a wider type then reads two packs).
template <class A, class B>
constexpr int pack_elems_of_both() {
    return pack_elems<A> > pack_elems<B> ? pack_elems<A> : pack_elems<B>;
}

// x[k] = p[k] for k < V, as f32. p must be 16-byte aligned when V is a multiple of the pack.
template <class T, int V>
__device__ __forceinline__ void load_f32(float (&x)[V], const T* p) {
    constexpr int pe = pack_elems<T>;
    if constexpr (V % pe == 0) {
        for (int q = 0; q < V / pe; q++) {
            const Pack128<T> pk = load128(p + q * pe);
            for (int k = 0; k < pe; k++) x[q * pe + k] = to_f32(pk[k]);
        }
    } else {
        for (int k = 0; k < V; k++) x[k] = to_f32(p[k]);
    }
}

// p[k] = x[k] for k < V, rounded to T (nearest even) once.
template <class T, int V>
__device__ __forceinline__ void store_f32(T* p, const float (&x)[V]) {
    constexpr int pe = pack_elems<T>;
    if constexpr (V % pe == 0) {
        for (int q = 0; q < V / pe; q++) {
            Pack128<T> pk;
            for (int k = 0; k < pe; k++) pk[k] = from_f32<T>(x[q * pe + k]);
            store128(p + q * pe, pk);
        }
    } else {
        for (int k = 0; k < V; k++) p[k] = from_f32<T>(x[k]);
    }
}

// True when rows of `cols` elements of `elem_bytes` each, starting at p, all start on a
// 16-byte boundary and split into whole groups of V: the condition of the packed path.
inline bool rows_packable(const void* p, int64_t cols, int elem_bytes, int V) {
    return (uintptr_t)p % 16 == 0 && (cols * elem_bytes) % 16 == 0 && cols % V == 0;
}

}  // namespace ptd::cuda::PTD_CUDA_NS
