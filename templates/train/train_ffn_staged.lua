-- train_ffn_staged.lua — module of train_ffn.cu.lua (VEC 8 builds): the staged per-entry dot
-- products (weight rows through shared memory by cp.async) and fwd_ent_s / bwd_ent_s.
return function(D)
    local S, KC, KCP, PPR, RPI, STAGES = D.S, D.KC, D.KCP, D.PPR, D.RPI, D.STAGES
    local SWP, NKC, STW, NT = D.SWP, D.NKC, D.STW, D.NT
    cuda [==[
/* ---- staged per-entry dot products ---- */

__device__ __forceinline__ void tw_cp16(void *smem, const void *gmem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}

/* Chunk c of the nb rows base + n_r·K (n_r = __shfl of nrow from lane r) into st[r][0..KC). */
__device__ __forceinline__ void tw_stage_issue(tw_u16 *st, const tw_u16 *__restrict__ base,
                                               tw_u32 nrow, int nb, int c, int lane) {
    const int sub = lane / ${PPR}, piece = lane % ${PPR};
    for (int r0 = 0; r0 < nb; r0 += ${RPI}) {
        const int r = r0 + sub;
        const tw_u32 n = __shfl_sync(TW_FULL, nrow, r & 31);
        if (r < nb)
            tw_cp16(st + r * ${KCP} + piece * 8,
                    base + (long long)n * ${S.K} + c * ${KC} + piece * 8);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Lane l < nb: the reference dot product (cpu_ref.h order) of the token row xs (dtype, shared)
 * and row n_l (nrow of lane l); every lane of the warp must call it. st: STAGES·32·KCP elements of
 * this warp's shared memory. Chunk c waits in buffer c % STAGES; STAGES - 1 chunks are in flight
 * while one is summed (a commit group per chunk, empty past the end, so the count is uniform). */
typedef tw_u16 tw_xs;
__device__ __forceinline__ float tw_dot_staged(const tw_xs *xs, const tw_u16 *__restrict__ base,
                                               tw_u32 nrow, int nb, tw_u16 *st, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < ${STAGES - 1}; c++) {
        if (c < ${NKC})
            tw_stage_issue(st + c * ${32 * KCP}, base, nrow, nb, c, lane);
        else
            asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int c = 0; c < ${NKC}; c++) {
        const int cn = c + ${STAGES - 1};
        if (cn < ${NKC})
            tw_stage_issue(st + (cn % ${STAGES}) * ${32 * KCP}, base, nrow, nb, cn, lane);
        else
            asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group ${STAGES - 1};\n" ::);
        __syncwarp();
        if (lane < nb) {
            const uint4 *w = (const uint4 *)(st + (c % ${STAGES}) * ${32 * KCP} + lane * ${KCP});
            const uint4 *xv = (const uint4 *)(xs + c * ${KC});
#pragma unroll 4
            for (int g = 0; g < ${PPR}; g++) {
                const uint4 v = w[g], xq = xv[g];
                const tw_u32 u[4] = {v.x, v.y, v.z, v.w}, xw[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s = __fadd_rn(s, __fmul_rn(tw_to_f32((tw_u16)(xw[i] & 0xffffu)),
                                               tw_to_f32((tw_u16)(u[i] & 0xffffu))));
                    s = __fadd_rn(s, __fmul_rn(tw_to_f32((tw_u16)(xw[i] >> 16)),
                                               tw_to_f32((tw_u16)(u[i] >> 16))));
                }
            }
        }
        __syncwarp(); /* a later issue overwrites this buffer */
    }
    return s;
}

/* A token row (dtype) into this warp's shared copy, as is (then __syncwarp). */
__device__ __forceinline__ void tw_row_to_smem16(tw_xs *xs, const tw_u16 *__restrict__ row,
                                                 int lane) {
    for (int g = lane; g < ${S.K // 8}; g += 32)
        ((uint4 *)xs)[g] = ((const uint4 *)row)[g];
    __syncwarp();
}

/* The staged dot products of the lanes whose `need` is set, packed into the first lanes (the
 * others' rows are not read): returns this lane's value (0 where not needed). Warp-collective. */
__device__ __forceinline__ float tw_dot_need(const tw_xs *xs, const tw_u16 *__restrict__ base,
                                             tw_u32 nrow, bool need, tw_u32 need_m, tw_u16 *st,
                                             int lane) {
    const int nc = __popc(need_m);
    const int src = lane < nc ? (int)__fns(need_m, 0u, lane + 1) : 0;
    const tw_u32 nn = __shfl_sync(TW_FULL, nrow, src & 31);
    const float d = tw_dot_staged(xs, base, nn, nc, st, lane);
    const int rank = __popc(need_m & ((1u << lane) - 1u));
    const float v = __shfl_sync(TW_FULL, d, rank & 31);
    return need ? v : 0.0f;
}

/* Every entry's value precomputed (tiled U / dT with pre_all, the lists built): the lean
 * kernels twell_train_fwd_ent_p / bwd_ent_p do the whole pass, the staged ones return at once. */
__device__ __forceinline__ bool tw_pre_all_done(const tw_u32 *__restrict__ pre, int pre_all) {
    return pre != NULL && pre_all && pre[0] == 0u;
}

/* Entry e's forward outputs from its U (live: e < e1; warp-collective for the L1 sum): Tm = U·P,
 * its column and Tm stored, Σ|Tm| of the warp's nb entries added to l1 in entry order (as the
 * CPU). */
__device__ __forceinline__ void tw_fwd_entry_out(bool live, tw_u64 e, tw_u32 word, float u, int nb,
                                                 tw_u32 *__restrict__ e_col,
                                                 float *__restrict__ e_tm, double &l1) {
    float tm = 0.0f;
    if (live) {
        tm = __fmul_rn(u, tw_to_f32((tw_u16)(word >> 16)));
        e_col[e] = word & 0xffffu;
        e_tm[e] = tm;
    }
    for (int q = 0; q < nb; q++)
        l1 += fabs((double)__shfl_sync(TW_FULL, tm, q));
}

/* Entry e's backward values from its U and d = dy·Wd_n: dT = d + l1c·sign(U), dU = dT·P,
 * dP = dT·U. */
__device__ __forceinline__ void tw_bwd_entry_out(tw_u64 e, tw_u32 word, float u, float d, float l1c,
                                                 float *__restrict__ e_du,
                                                 float *__restrict__ e_dp) {
    const float p = tw_to_f32((tw_u16)(word >> 16));
    const float sgn = tw_sign_nan(u); /* NaN for a NaN u, as the dense gradient */
    const float dt = __fadd_rn(d, __fmul_rn(l1c, sgn));
    e_du[e] = __fmul_rn(dt, p);
    e_dp[e] = __fmul_rn(dt, u);
}

/* pre == NULL: every U computed here. Else (tiled U) entries of non-overflowing row-tiles take
 * the U twell_train_udt wrote into u_ell, and with pre_all those of overflowing ones the U
 * twell_train_ovf_udt wrote (u_ell, u_spill); only the others are computed (and the token row is
 * loaded only for them). */
extern "C" __global__ void __launch_bounds__(${32 * SWP})
twell_train_fwd_ent_s(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu,
                      const tw_u32 *__restrict__ packed, float *u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, float *u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u32 *__restrict__ e_col,
                      float *__restrict__ e_tm, double *__restrict__ chunk_l1, long long M,
                      const tw_u32 *__restrict__ pre, int pre_all) {
    if (tw_pre_all_done(pre, pre_all))
        return; /* twell_train_fwd_ent_p did every entry */
    extern __shared__ uint4 tw_sm4[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    tw_xs *xs = (tw_xs *)((char *)tw_sm4 + warp * ${STW});
    tw_u16 *st = (tw_u16 *)(xs + ${S.K});
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        double l1 = 0.0;
        bool have_row = false;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            tw_u32 word = 0;
            float *up = NULL;
            bool ok = false, sp = false;
            if (e < e1)
                tw_locate_pre(m, e, packed, tile_off + m * ${NT}, spill_off, spill, u_ell, u_spill,
                              pre, pre_all, word, up, ok, sp);
            const tw_u32 n = word & 0xffffu;
            const bool need = e < e1 && !ok;
            const tw_u32 need_m = __ballot_sync(TW_FULL, need);
            float u = 0.0f;
            if (need_m) {
                if (!have_row)
                    tw_row_to_smem16(xs, x + m * ${S.K}, lane);
                have_row = true;
                u = need_m == (nb == 32 ? TW_FULL : (1u << nb) - 1u)
                        ? tw_dot_staged(xs, wu, n, nb, st, lane)
                        : tw_dot_need(xs, wu, n, need, need_m, st, lane);
            }
            if (e < e1 && ok)
                u = *up;
            else if (e < e1)
                *up = u;
            tw_fwd_entry_out(e < e1, e, word, u, nb, e_col, e_tm, l1);
        }
        if (lane == 0)
            chunk_l1[c] = l1;
        __syncwarp();
    }
}

/* pre == NULL: every dy·Wd_n computed here. Else (tiled dT) entries of non-overflowing row-tiles
 * take dy·Wd_n from dt_ell (same word index as u_ell, written by twell_train_udt), and with
 * pre_all those of overflowing ones from dt_ell / dt_spill (twell_train_ovf_udt). */
extern "C" __global__ void __launch_bounds__(${32 * SWP})
twell_train_bwd_ent_s(const tw_u16 *__restrict__ dy, const tw_u16 *__restrict__ wd,
                      const tw_u32 *__restrict__ packed, float *u_ell,
                      const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                      const tw_u32 *__restrict__ spill, float *u_spill,
                      const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                      const tw_u32 *__restrict__ chunk_row, tw_u64 E, float l1c,
                      float *__restrict__ e_du, float *__restrict__ e_dp, long long M,
                      const tw_u32 *__restrict__ pre, const float *__restrict__ dt_ell,
                      int pre_all, const float *__restrict__ dt_spill) {
    if (tw_pre_all_done(pre, pre_all))
        return; /* twell_train_bwd_ent_p did every entry */
    extern __shared__ uint4 tw_sm4[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    tw_xs *ds = (tw_xs *)((char *)tw_sm4 + warp * ${STW});
    tw_u16 *st = (tw_u16 *)(ds + ${S.K});
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        bool have_row = false;
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            tw_u32 word = 0;
            float *up = NULL;
            bool ok = false, sp = false;
            if (e < e1)
                tw_locate_pre(m, e, packed, tile_off + m * ${NT}, spill_off, spill, u_ell, u_spill,
                              pre, pre_all, word, up, ok, sp);
            const bool need = e < e1 && !ok;
            const tw_u32 need_m = __ballot_sync(TW_FULL, need);
            float d = 0.0f;
            if (need_m) {
                if (!have_row)
                    tw_row_to_smem16(ds, dy + m * ${S.K}, lane);
                have_row = true;
                d = need_m == (nb == 32 ? TW_FULL : (1u << nb) - 1u)
                        ? tw_dot_staged(ds, wd, word & 0xffffu, nb, st, lane)
                        : tw_dot_need(ds, wd, word & 0xffffu, need, need_m, st, lane);
            }
            if (e < e1) {
                if (ok)
                    d = sp ? dt_spill[up - u_spill] : dt_ell[up - u_ell];
                tw_bwd_entry_out(e, word, *up, d, l1c, e_du, e_dp);
            }
        }
        __syncwarp();
    }
}

]==]
end
