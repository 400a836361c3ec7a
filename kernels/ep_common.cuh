// Shared helpers for the epdoctor intranode kernels. Compiled by NVRTC with no CUDA headers on the
// include path, so bf16 is a raw 16-bit pattern and every fixed-width type is spelled out here.
#pragma once

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

// Status bits the kernels set when a wait gives up (read back by the host).
#define EP_STATUS_NOTIFY_TIMEOUT 1u
#define EP_STATUS_BARRIER_TIMEOUT 2u

// Signal buffer layout (u32 words), one per rank, exported over CUDA IPC. Must match
// `SignalLayout` in src/worker/workload.rs.
//   counts  [2][W][W]   tokens rank s sends to rank r, double-buffered by epoch parity
//   ecounts [2][W][EL]  tokens rank s sends to each local expert of the owning rank
//   nflag   [W]         notify epoch written by each rank
//   bflag   [W]         barrier epoch written by each rank
struct SignalLayout {
    int counts, ecounts, nflag, bflag;
    __device__ SignalLayout(int W, int EL)
        : counts(0), ecounts(2 * W * W), nflag(2 * W * W + 2 * W * EL), bflag(2 * W * W + 2 * W * EL + W) {}
};

__device__ __forceinline__ float bf16_to_f32(bf16_t v) { return __uint_as_float(((u32)v) << 16); }

// Round to nearest even, NaN kept quiet (same rule as the CPU reference).
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0u) return (bf16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Flags and counts are written by other processes: system-scope acquire/release, no L1.
__device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u32 ld_volatile(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_sys(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// 16-byte loads: read-only input through the non-coherent path; peer data at L2 only (it is
// rewritten by other processes between kernels).
__device__ __forceinline__ uint4 ld_nc_v4(const uint4* p) {
    uint4 v;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ld_cg_v4(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Wait until `*p >= epoch`, or give up after `timeout_ns` and set `bit` in `*status`.
__device__ __forceinline__ bool wait_flag(const u32* p, u32 epoch, u64 timeout_ns, u32* status, u32 bit) {
    u64 start = global_ns();
    while ((int)(ld_acquire_sys(p) - epoch) < 0) {
        if (global_ns() - start > timeout_ns) {
            atomicOr(status, bit);
            return false;
        }
    }
    return true;
}
