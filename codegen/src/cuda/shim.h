// kiln's CUDA emulation shim: just enough of CUDA C for the generated kernels to compile
// with g++ (C++20) and run on the CPU, one std::thread per CUDA thread, one block at a time.
// The harness (`emulate.rs`) includes this header before the kernel source and calls
// `kiln_emu::launch` from a generated `main`.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

// ---- qualifiers -------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
// Blocks run one after another, so a function-local static is one block's shared memory.
#define __shared__ static

// ---- built-in variables -----------------------------------------------------------------

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

inline thread_local dim3 threadIdx = {0, 0, 0};
inline thread_local dim3 blockIdx = {0, 0, 0};
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

// CUDA's 16-byte vector type (loads and stores of four floats).
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// ---- synchronisation ----------------------------------------------------------------------

namespace kiln_emu {

// One warp's shuffle exchange: every lane writes its slot, waits, reads a slot, waits again.
struct Warp {
    explicit Warp(std::ptrdiff_t lanes) : lanes(lanes), bar(lanes) {}
    std::ptrdiff_t lanes;
    std::barrier<> bar;
    alignas(8) unsigned char slot[32][8];
};

inline std::barrier<>* block_barrier = nullptr;
inline thread_local Warp* warp = nullptr;
inline thread_local int lane = 0;

// Exchanges `v` within the warp: returns lane `src`'s value, or `v` itself where `src < 0`
// (a source lane outside the warp or the shuffle's width). All lanes must call it together.
template <class T>
T exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "warp shuffles of types wider than 8 bytes are not emulated");
    std::memcpy(warp->slot[lane], &v, sizeof(T));
    warp->bar.arrive_and_wait();
    T r = v;
    if (src >= 0 && src < warp->lanes) std::memcpy(&r, warp->slot[src], sizeof(T));
    warp->bar.arrive_and_wait();
    return r;
}

}  // namespace kiln_emu

inline void __syncthreads() { kiln_emu::block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kiln_emu::warp->bar.arrive_and_wait(); }

// The mask is ignored: the generated code only shuffles with all 32 lanes converged.
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = warpSize) {
    const int base = kiln_emu::lane / width * width;
    return kiln_emu::exchange(v, base + ((src % width) + width) % width);
}

template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = warpSize) {
    const int in_seg = kiln_emu::lane % width + static_cast<int>(delta);
    return kiln_emu::exchange(v, in_seg < width ? kiln_emu::lane + static_cast<int>(delta) : -1);
}

template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = warpSize) {
    const int in_seg = kiln_emu::lane % width - static_cast<int>(delta);
    return kiln_emu::exchange(v, in_seg >= 0 ? kiln_emu::lane - static_cast<int>(delta) : -1);
}

template <class T>
T __shfl_xor_sync(unsigned, T v, int lanemask, int width = warpSize) {
    const int src = kiln_emu::lane ^ lanemask;
    // CUDA: a lane may read earlier width-groups but gets its own value from later ones.
    const int seg_end = (kiln_emu::lane / width + 1) * width;
    return kiln_emu::exchange(v, src < seg_end ? src : -1);
}

// ---- math ---------------------------------------------------------------------------------
// expf, logf, erfcf, fma, ... come from <cmath> (glibc declares them globally).

using std::isinf;
using std::isnan;

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x / sqrtf(2.0f)); }
inline double normcdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}

// ---- host side ------------------------------------------------------------------------------

namespace kiln_emu {

[[noreturn]] inline void fail(const char* what, const char* path) {
    std::fprintf(stderr, "kiln emulation: %s %s\n", what, path);
    std::exit(3);
}

// Reads a whole file, padded by 64 bytes, so even an empty buffer has a valid pointer.
inline std::vector<unsigned char> read_file(const char* path, std::size_t& len) {
    std::FILE* f = std::fopen(path, "rb");
    if (!f) fail("cannot open", path);
    std::fseek(f, 0, SEEK_END);
    long end = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    if (end < 0) fail("cannot size", path);
    len = static_cast<std::size_t>(end);
    std::vector<unsigned char> bytes(len + 64, 0);
    if (std::fread(bytes.data(), 1, len, f) != len) fail("cannot read", path);
    std::fclose(f);
    return bytes;
}

inline void write_file(const char* path, const std::vector<unsigned char>& bytes, std::size_t len) {
    std::FILE* f = std::fopen(path, "wb");
    if (!f) fail("cannot create", path);
    if (std::fwrite(bytes.data(), 1, len, f) != len) fail("cannot write", path);
    if (std::fclose(f) != 0) fail("cannot close", path);
}

// Runs `kernel` over `grid` blocks of `block` threads: blocks one after another, each with
// a fresh block barrier and per-warp exchanges, and one std::thread per CUDA thread.
template <class F>
void launch(unsigned grid, unsigned block, F kernel) {
    blockDim = {block, 1, 1};
    gridDim = {grid, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(block);
        block_barrier = &bar;
        std::vector<std::unique_ptr<Warp>> warps;
        for (unsigned w = 0; w * 32 < block; ++w)
            warps.push_back(std::make_unique<Warp>(std::min(32u, block - w * 32)));
        std::vector<std::thread> threads;
        threads.reserve(block);
        try {
            for (unsigned t = 0; t < block; ++t)
                threads.emplace_back([&, b, t] {
                    threadIdx = {t, 0, 0};
                    blockIdx = {b, 0, 0};
                    lane = static_cast<int>(t % 32);
                    warp = warps[t / 32].get();
                    kernel();
                });
        } catch (const std::system_error& e) {
            std::fprintf(stderr, "kiln emulation: cannot start thread: %s\n", e.what());
            std::_Exit(4);
        }
        for (auto& th : threads) th.join();
        block_barrier = nullptr;
    }
}

}  // namespace kiln_emu
