-- train_ffn_base.lua — module of train_ffn.cu.lua: the kernels' shared definitions (integer
-- types, the 16-bit activation, grid-stride warp indices), the VEC-specific group loads and
-- stores, a token row into shared fp32, the reference dot product (runtime/cpu/cpu_ref.h's order)
-- and the row-chunk frame of the y and dx kernels (D.chunk_sum_open / D.chunk_sum_close).
return function(D)
    local S, VEC, NT, G = D.S, D.VEC, D.NT, D.G
    cuda [==[
typedef unsigned long long tw_u64;
typedef unsigned int tw_u32;
typedef unsigned short tw_u16;
#define TW_FULL 0xffffffffu
#define TW_NT ${NT}
#define TW_NW ${S.NW}
#define TW_W ${S.W}
#define TW_SLOTS ${S.SLOTS}u

/* The 16-bit activation of a pre-activation: tw_act16 (round_to_dtype(relu(pre)), a NaN active
 * as the canonical NaN, +0 when not positive), and whether a stored one is active. */
__device__ __forceinline__ tw_u16 tw_act(float pre) { return tw_act16(pre); }
__device__ __forceinline__ bool tw_active(tw_u16 v) { return v != 0 && (v & 0x8000u) == 0; }

/* Global warp index and warp count of a grid-stride kernel. */
__device__ __forceinline__ long long tw_gwarp(void) {
    return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}
__device__ __forceinline__ long long tw_nwarps(void) {
    return ((long long)gridDim.x * blockDim.x) >> 5;
}
]==]

    -- VEC-specific loads and stores of one group (VEC consecutive elements) of a row.
    if VEC == 8 then
        cuda [==[
__device__ __forceinline__ void tw_ldg(const tw_u16 *__restrict__ row, long long g, float (&f)[8]) {
    const uint4 v = *((const uint4 *)row + g);
    const tw_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = tw_to_f32((tw_u16)(w[i] & 0xffffu));
        f[2 * i + 1] = tw_to_f32((tw_u16)(w[i] >> 16));
    }
}
/* Raw group loads (kept packed in registers while more loads are in flight), converted later. */
typedef uint4 tw_raw;
__device__ __forceinline__ tw_raw tw_ldraw(const tw_u16 *__restrict__ row, long long g) {
    return *((const uint4 *)row + g);
}
__device__ __forceinline__ void tw_cvt(const tw_raw &v, float (&f)[8]) {
    const tw_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = tw_to_f32((tw_u16)(w[i] & 0xffffu));
        f[2 * i + 1] = tw_to_f32((tw_u16)(w[i] >> 16));
    }
}
__device__ __forceinline__ void tw_ldf(const float *row, long long g, float (&f)[8]) {
    const float4 a = *((const float4 *)row + 2 * g), b = *((const float4 *)row + 2 * g + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void tw_stf(float *row, long long g, const float (&f)[8]) {
    *((float4 *)row + 2 * g) = make_float4(f[0], f[1], f[2], f[3]);
    *((float4 *)row + 2 * g + 1) = make_float4(f[4], f[5], f[6], f[7]);
}
__device__ __forceinline__ void tw_sth(tw_u16 *row, long long g, const float (&f)[8]) {
    tw_u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (tw_u32)tw_from_f32(f[2 * i]) | ((tw_u32)tw_from_f32(f[2 * i + 1]) << 16);
    *((uint4 *)row + g) = make_uint4(w[0], w[1], w[2], w[3]);
}
]==]
    else
        cuda [==[
__device__ __forceinline__ void tw_ldg(const tw_u16 *__restrict__ row, long long g, float (&f)[1]) {
    f[0] = tw_to_f32(row[g]);
}
typedef tw_u16 tw_raw;
__device__ __forceinline__ tw_raw tw_ldraw(const tw_u16 *__restrict__ row, long long g) {
    return row[g];
}
__device__ __forceinline__ void tw_cvt(const tw_raw &v, float (&f)[1]) { f[0] = tw_to_f32(v); }
__device__ __forceinline__ void tw_ldf(const float *row, long long g, float (&f)[1]) { f[0] = row[g]; }
__device__ __forceinline__ void tw_stf(float *row, long long g, const float (&f)[1]) { row[g] = f[0]; }
__device__ __forceinline__ void tw_sth(tw_u16 *row, long long g, const float (&f)[1]) {
    row[g] = tw_from_f32(f[0]);
}
]==]
    end

    cuda [==[
/* A token row of dtype into this warp's shared fp32 copy (then __syncwarp). */
__device__ __forceinline__ void tw_row_to_smem(float *xs, const tw_u16 *__restrict__ row, int lane) {
    for (int g = lane; g < ${G}; g += 32) {
        float f[${VEC}];
        tw_ldg(row, g, f);
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            xs[g * ${VEC} + q] = f[q];
    }
    __syncwarp();
}

/* The reference dot product of cpu_ref.h, by one lane: xs (shared, fp32) · w (a weight row). */
__device__ __forceinline__ float tw_dot_ref(const float *xs, const tw_u16 *__restrict__ w) {
    float s = 0.0f;
#pragma unroll 4
    for (int g = 0; g < ${G}; g++) {
        float f[${VEC}];
        tw_ldg(w, g, f);
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            s = __fadd_rn(s, __fmul_rn(xs[g * ${VEC} + q], f[q]));
    }
    return s;
}

]==]

    -- The frame twell_train_fwd_y and twell_train_bwd_dx share (after their signatures): a warp
    -- per (row chunk, K slice of 32·VEC elements), items slice-major. After chunk_sum_open the
    -- caller emits the body of the loop over the chunk's entries in batches of 32 (entry
    -- e = b + lane, its neuron nl), summing into acc[VEC] for group g of row m; chunk_sum_close
    -- ends the loop and the kernel, storing acc into row m of out (the name of the kernel's
    -- output: the row's only chunk) or into the chunk's partial slot.
    function D.chunk_sum_open()
        local NS, VEC = D.NS, D.VEC
        cuda [==[
    const int lane = (int)(threadIdx.x & 31u);
    const long long nch = (long long)chunk_off[M], items = nch * ${NS};
    /* slice-major: the warps in flight share a K slice, whose rows stay in L2 */
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long c = it % nch;
        const long long g = (it / nch) * 32 + lane;
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        float acc[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            acc[q] = 0.0f;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const tw_u32 nl = e < e1 ? e_col[e] : 0u;
]==]
    end
    function D.chunk_sum_close(out)
        local S, G = D.S, D.G
        cuda [==[
        }
        if (g < ${G}) {
            if (chunk_off[m + 1] - chunk_off[m] == 1ull)
                tw_sth(${out} + m * ${S.K}, g, acc);
            else
                tw_stf(partial + (long long)(pslot_off[m] + j) * ${S.K}, g, acc);
        }
    }
}
]==]
    end
end
