-- train_ffn_udt.lua — module of train_ffn.cu.lua (VEC 8 builds): the glue of tiled U / dT: the
-- fused pipeline's phase-A slices summed per pair and stored at the entry's TwELL word.
return function(D)
    local S, NT = D.S, D.NT
    -- the lean kernels' shared copy of a row's tile offsets: 8 warps x NT u64 (else global)
    local TOS = NT <= 512
    local TILES_BODY = TOS and string.format([[
    __syncwarp(); /* the previous chunk's reads are done */
    for (int t = lane; t < %d; t += 32)
        sto[t] = tile_off[m * %d + t];
    __syncwarp();
    return sto;
]], NT, NT) or string.format("    return tile_off + m * %d;\n", NT)
    local STO = TOS and string.format("__shared__ tw_u64 s_to[8][%d];\n    tw_u64 *sto = s_to[warp];", NT)
        or "tw_u64 *sto = NULL;"
    -- the lean kernels' opening: nothing when the lists were not built, then a warp per row chunk
    -- (m, entries [e0, e1)) with `to` its row's tile offsets; the caller closes the loop
    local ENT_P_OPEN = string.format([[
    if (pre[0] != 0u)
        return;
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    %s
    (void)warp;
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        const tw_u64 *to = tw_row_tiles(sto, tile_off, m, lane);
]], STO)
    cuda [==[
/* Tiled U / dT: the fused inference pipeline's phase A (templates/ffn/ffn_fused.cu.lua) left, per
 * pair slot p of its lists, the partial dot products of 64-column slices at
 * partial[s·pstride + p], and its build the index of each listed entry's word in packed
 * (eidx[p]). One thread per slot, flat over the total[0] slots (coalesced): the slices summed in
 * ascending order (fp32, fixed) and the sum stored at that word of out_ell ([M, N/C] f32, u_ell's
 * layout). Pads (gate bits 0) are skipped; nothing is written when flag[0] != 0 (the lists were
 * not built). */
extern "C" __global__ void __launch_bounds__(256)
twell_train_udt(const tw_u16 *__restrict__ gv, const tw_u32 *__restrict__ eidx,
                const float *__restrict__ partial, long long pstride,
                const tw_u32 *__restrict__ total, float *__restrict__ out_ell,
                const tw_u32 *__restrict__ flag) {
    if (flag[0] != 0u)
        return;
    const tw_u32 np = total[0];
    for (tw_u32 p = blockIdx.x * blockDim.x + threadIdx.x; p < np; p += gridDim.x * blockDim.x) {
        if (gv[p] == 0)
            continue;
        float v = 0.0f;
#pragma unroll 8
        for (int sl = 0; sl < ${S.K // 64}; sl++)
            v += partial[(long long)sl * pstride + p];
        out_ell[eidx[p]] = v;
    }
}

/* ---- tiled U / dT with pre_all: every entry's value precomputed ---- */

/* The row's NT tile offsets for tw_locate_pre: a shared copy of this warp's (TOS) or global. */
__device__ __forceinline__ const tw_u64 *tw_row_tiles(tw_u64 *sto, const tw_u64 *tile_off,
                                                      long long m, int lane) {
${TILES_BODY}}

/* As twell_train_fwd_ent_s where tw_pre_all_done (which then returns at once): U read for every
 * entry, Tm, columns and Σ|Tm| per chunk stored the same way (the same bits). No staging buffers,
 * so 256 threads and full occupancy: the pass is a chain of dependent loads per chunk. Returns
 * at once when the lists were not built (pre[0] != 0: the staged kernel computes then). */
extern "C" __global__ void __launch_bounds__(256)
twell_train_fwd_ent_p(const tw_u32 *__restrict__ packed, const float *__restrict__ u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, const float *__restrict__ u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u32 *__restrict__ e_col,
                      float *__restrict__ e_tm, double *__restrict__ chunk_l1, long long M,
                      const tw_u32 *__restrict__ pre) {
${ENT_P_OPEN}        double l1 = 0.0;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            tw_u32 word = 0;
            float u = 0.0f;
            if (e < e1) {
                float *up = NULL;
                bool ok, sp;
                tw_locate_pre(m, e, packed, to, spill_off, spill, (float *)u_ell,
                              (float *)u_spill, pre, 1, word, up, ok, sp);
                u = *up;
            }
            tw_fwd_entry_out(e < e1, e, word, u, nb, e_col, e_tm, l1);
        }
        if (lane == 0)
            chunk_l1[c] = l1;
    }
}

/* As twell_train_bwd_ent_s where tw_pre_all_done: dy·Wd_n read for every entry (dt_ell /
 * dt_spill), dU and dP stored the same way. Returns at once when the lists were not built. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_bwd_ent_p(const tw_u32 *__restrict__ packed, const float *__restrict__ u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, const float *__restrict__ u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, float l1c,
                      float *__restrict__ e_du, float *__restrict__ e_dp, long long M,
                      const tw_u32 *__restrict__ pre, const float *__restrict__ dt_ell,
                      const float *__restrict__ dt_spill) {
${ENT_P_OPEN}        for (tw_u64 e = e0 + (tw_u64)lane; e < e1; e += 32ull) {
            tw_u32 word = 0;
            float *up = NULL;
            bool ok, sp;
            tw_locate_pre(m, e, packed, to, spill_off, spill, (float *)u_ell, (float *)u_spill,
                          pre, 1, word, up, ok, sp);
            const float d = sp ? dt_spill[up - u_spill] : dt_ell[up - u_ell];
            tw_bwd_entry_out(e, word, *up, d, l1c, e_du, e_dp);
        }
    }
}
]==]
end
