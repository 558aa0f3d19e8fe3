// dtype.h — element types of ptd-engine buffers, shared by the compute backend
// (backend.h) and the communicator (comm.h), and the scalar conversions of the 16-bit
// storage types. bf16 and f16 are storage only: every kernel widens them to f32 for the
// arithmetic and rounds the result back to nearest even, as the GPU kernels will.
// Kept free of <expected> and the project headers so CUDA-facing code can include it.
#pragma once

#include <cstdint>
#include <cstring>

namespace ptd::engine {

// f32, f64, bf16 (bfloat16), f16 (IEEE half), i32 (token ids, counters).
enum class DType : uint8_t { f32, f64, bf16, f16, i32 };

// Bytes of one element (4, 8, 2, 2, 4).
constexpr int dtype_bytes(DType t) {
    return t == DType::f64 ? 8 : (t == DType::bf16 || t == DType::f16) ? 2 : 4;
}

inline float bf16_bits_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// Round to nearest even; NaN stays a (quiet) NaN, overflow becomes ±inf.
inline uint16_t f32_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float f16_bits_to_f32(uint16_t h) {
    _Float16 x;
    std::memcpy(&x, &h, 2);
    return (float)x;
}
// IEEE conversion: round to nearest even; beyond 65504 becomes ±inf.
inline uint16_t f32_to_f16_bits(float f) {
    const _Float16 x = (_Float16)f;
    uint16_t h;
    std::memcpy(&h, &x, 2);
    return h;
}

// Byte offset of element `n` of a buffer of type t (activation buffers are type-erased).
inline void* dtype_offset(void* p, int64_t n, DType t) { return (char*)p + n * dtype_bytes(t); }
inline const void* dtype_offset(const void* p, int64_t n, DType t) { return (const char*)p + n * dtype_bytes(t); }

}  // namespace ptd::engine
