// epdoctor's intranode expert-parallel workload: layout/notify, dispatch, combine and an IPC
// barrier, in the spirit of DeepEP's intranode kernels (written from the algorithm, not the code).
//
// Every rank owns two IPC-exported allocations:
//   data:   recv_x [W*T][H] bf16, then recv_src [W*T] int (source token index of each row)
//   signal: SignalLayout (counts, expert counts, notify and barrier flags)
// `peer_data[r]` / `peer_signal[r]` hold rank r's allocations as mapped in this process (the
// rank's own pointers at index `me`). Ranks may share one GPU: all waits are bounded by a timeout
// because contexts of different processes only time-slice.
#include "ep_common.cuh"

// Layout + notify. One block of 1024 threads (W <= 32).
//   mask[T]            scratch: bit r set if token t has a top-k expert on rank r
//   pos[T][W]          position of token t within this rank's chunk for rank r, or -1
//   meta[0..W)         send_base: where this rank's chunk starts in rank r's recv buffer
//   meta[W..2W)        recv_base: where rank s's chunk starts in this rank's recv buffer
//   meta[2W]           recv_total
//   meta[2W+1 ..+EL)   tokens received per local expert
extern "C" __global__ void __launch_bounds__(1024) ep_notify(
    const int* __restrict__ topk_idx, int T, int K, int W, int EL, int me, const u64* __restrict__ peer_signal,
    u32* __restrict__ mask, int* __restrict__ pos, int* __restrict__ meta, u32 epoch, u64 timeout_ns,
    u32* __restrict__ status) {
    extern __shared__ int smem[];
    const int E = W * EL;
    int* s_ecount = smem;      // [E]
    int* s_rcount = smem + E;  // [W]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const SignalLayout L(W, EL);
    const int par = (int)(epoch & 1u);

    for (int i = tid; i < E; i += blockDim.x) s_ecount[i] = 0;
    __syncthreads();

    // Per token: which ranks it goes to; per expert: how many tokens chose it.
    for (int t = tid; t < T; t += blockDim.x) {
        u32 m = 0;
        for (int k = 0; k < K; ++k) {
            int e = topk_idx[t * K + k];
            if (e >= 0 && e < E) {
                m |= 1u << (e / EL);
                atomicAdd(&s_ecount[e], 1);
            }
        }
        mask[t] = m;
    }
    __syncthreads();

    // Exclusive prefix sums: warp r scans rank r's bit; each lane owns a contiguous slice of tokens.
    if (warp < W) {
        const int r = warp;
        const int chunk = (T + 31) / 32;
        const int t0 = min(T, lane * chunk), t1 = min(T, t0 + chunk);
        int cnt = 0;
        for (int t = t0; t < t1; ++t) cnt += (mask[t] >> r) & 1u;
        int incl = cnt;
        for (int d = 1; d < 32; d <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += v;
        }
        int run = incl - cnt;
        for (int t = t0; t < t1; ++t) pos[t * W + r] = ((mask[t] >> r) & 1u) ? run++ : -1;
        int total = __shfl_sync(0xffffffffu, incl, 31);
        if (lane == 0) s_rcount[r] = total;
    }
    __syncthreads();

    // Publish this rank's row of the count matrix (and expert counts) into every peer's signal.
    for (int i = tid; i < W * W; i += blockDim.x) {
        int p = i / W, r = i % W;
        u32* sig = (u32*)peer_signal[p];
        sig[L.counts + par * W * W + me * W + r] = (u32)s_rcount[r];
    }
    for (int i = tid; i < W * EL; i += blockDim.x) {
        int p = i / EL, el = i % EL;
        u32* sig = (u32*)peer_signal[p];
        sig[L.ecounts + par * W * EL + me * EL + el] = (u32)s_ecount[p * EL + el];
    }
    __threadfence_system();
    __syncthreads();
    u32* mine = (u32*)peer_signal[me];
    if (tid < W) st_release_sys((u32*)peer_signal[tid] + L.nflag + me, epoch);
    if (tid < W) wait_flag(mine + L.nflag + tid, epoch, timeout_ns, status, EP_STATUS_NOTIFY_TIMEOUT);
    __syncthreads();

    const u32* cnt = mine + L.counts + par * W * W;
    if (tid < W) {
        int r = tid;
        int send_base = 0, recv_base = 0;
        for (int s = 0; s < me; ++s) send_base += (int)ld_volatile(cnt + s * W + r);
        for (int s = 0; s < r; ++s) recv_base += (int)ld_volatile(cnt + s * W + me);
        meta[r] = send_base;
        meta[W + r] = recv_base;
    }
    if (tid == 0) {
        int total = 0;
        for (int s = 0; s < W; ++s) total += (int)ld_volatile(cnt + s * W + me);
        meta[2 * W] = total;
    }
    const u32* ec = mine + L.ecounts + par * W * EL;
    for (int el = tid; el < EL; el += blockDim.x) {
        int total = 0;
        for (int s = 0; s < W; ++s) total += (int)ld_volatile(ec + s * EL + el);
        meta[2 * W + 1 + el] = total;
    }
}

#define EP_DISPATCH_UNROLL 4

// Dispatch: one warp per token. The warp reads the token's hidden vector once, 16 bytes per lane
// per step, and writes it straight into the receive buffer of every rank that owns one of its
// top-k experts, plus the source token index.
extern "C" __global__ void __launch_bounds__(256) ep_dispatch(
    const uint4* __restrict__ x, const int* __restrict__ pos, const int* __restrict__ meta, int T, int H, int W,
    const u64* __restrict__ peer_data, u64 src_offset_bytes) {
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int vpr = H / 8;  // 16-byte vectors per row
    const u64 row_bytes = (u64)H * 2u;
    for (int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; t < T; t += warps) {
        int row = -1;
        if (lane < W) {
            int p = pos[t * W + lane];
            if (p >= 0) row = meta[lane] + p;
        }
        const u32 dests = __ballot_sync(0xffffffffu, row >= 0);
        const uint4* src = x + (u64)t * vpr;
        for (int c = 0; c < vpr; c += 32 * EP_DISPATCH_UNROLL) {
            uint4 v[EP_DISPATCH_UNROLL];
#pragma unroll
            for (int u = 0; u < EP_DISPATCH_UNROLL; ++u) {
                int i = c + u * 32 + lane;
                if (i < vpr) v[u] = ld_nc_v4(src + i);
            }
            for (u32 m = dests; m != 0; m &= m - 1) {
                const int r = __ffs(m) - 1;
                const int dst_row = __shfl_sync(0xffffffffu, row, r);
                char* base = (char*)peer_data[r];
                uint4* dst = (uint4*)(base + (u64)dst_row * row_bytes);
#pragma unroll
                for (int u = 0; u < EP_DISPATCH_UNROLL; ++u) {
                    int i = c + u * 32 + lane;
                    if (i < vpr) dst[i] = v[u];
                }
                if (c == 0 && lane == 0) ((int*)(base + src_offset_bytes))[dst_row] = t;
            }
        }
    }
    __threadfence_system();
}

#define EP_COMBINE_UNROLL 4

// Combine: one warp per own token. For every rank the token went to, the warp reads that rank's
// copy of the row (the expert output; identity here) through the IPC mapping and accumulates it
// weighted by the sum of the token's top-k weights on that rank; the result is written as bf16.
extern "C" __global__ void __launch_bounds__(256) ep_combine(
    const int* __restrict__ topk_idx, const float* __restrict__ topk_w, const int* __restrict__ pos,
    const int* __restrict__ meta, int T, int H, int K, int W, int EL, const u64* __restrict__ peer_data,
    uint4* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int vpr = H / 8;
    const u64 row_bytes = (u64)H * 2u;
    for (int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; t < T; t += warps) {
        int row = -1;
        float w = 0.f;
        if (lane < W) {
            int p = pos[t * W + lane];
            if (p >= 0) {
                row = meta[lane] + p;
                for (int k = 0; k < K; ++k) {
                    int e = topk_idx[t * K + k];
                    if (e >= 0 && e / EL == lane) w += topk_w[t * K + k];
                }
            }
        }
        const u32 srcs = __ballot_sync(0xffffffffu, row >= 0);
        for (int c = 0; c < vpr; c += 32 * EP_COMBINE_UNROLL) {
            float acc[EP_COMBINE_UNROLL][8];
#pragma unroll
            for (int u = 0; u < EP_COMBINE_UNROLL; ++u)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[u][j] = 0.f;
            for (u32 m = srcs; m != 0; m &= m - 1) {
                const int r = __ffs(m) - 1;
                const int src_row = __shfl_sync(0xffffffffu, row, r);
                const float wr = __shfl_sync(0xffffffffu, w, r);
                const uint4* src = (const uint4*)((const char*)peer_data[r] + (u64)src_row * row_bytes);
                uint4 v[EP_COMBINE_UNROLL];
#pragma unroll
                for (int u = 0; u < EP_COMBINE_UNROLL; ++u) {
                    int i = c + u * 32 + lane;
                    if (i < vpr) v[u] = ld_cg_v4(src + i);
                }
#pragma unroll
                for (int u = 0; u < EP_COMBINE_UNROLL; ++u) {
                    const u32 wd[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        acc[u][2 * j] = fmaf(wr, bf16_to_f32((bf16_t)(wd[j] & 0xffffu)), acc[u][2 * j]);
                        acc[u][2 * j + 1] = fmaf(wr, bf16_to_f32((bf16_t)(wd[j] >> 16)), acc[u][2 * j + 1]);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < EP_COMBINE_UNROLL; ++u) {
                int i = c + u * 32 + lane;
                if (i < vpr) {
                    uint4 o;
                    o.x = (u32)f32_to_bf16(acc[u][0]) | ((u32)f32_to_bf16(acc[u][1]) << 16);
                    o.y = (u32)f32_to_bf16(acc[u][2]) | ((u32)f32_to_bf16(acc[u][3]) << 16);
                    o.z = (u32)f32_to_bf16(acc[u][4]) | ((u32)f32_to_bf16(acc[u][5]) << 16);
                    o.w = (u32)f32_to_bf16(acc[u][6]) | ((u32)f32_to_bf16(acc[u][7]) << 16);
                    out[(u64)t * vpr + i] = o;
                }
            }
        }
    }
}

// Intranode barrier on IPC flags: every rank writes the epoch into its slot of every peer's
// signal buffer, then waits for all slots of its own. One warp.
extern "C" __global__ void ep_barrier(const u64* __restrict__ peer_signal, int W, int EL, int me, u32 epoch,
                                      u64 timeout_ns, u32* __restrict__ status) {
    const SignalLayout L(W, EL);
    const int tid = threadIdx.x;
    __threadfence_system();
    if (tid < W) st_release_sys((u32*)peer_signal[tid] + L.bflag + me, epoch);
    if (tid < W) wait_flag((const u32*)peer_signal[me] + L.bflag + tid, epoch, timeout_ns, status,
                           EP_STATUS_BARRIER_TIMEOUT);
}
