-- train_ffn_bwd.lua — module of train_ffn.cu.lua: the backward kernels: dT / dU / dP per entry,
-- dx per K slice, the column histogram and stable scatter (transpose), dW per neuron chunk and
-- the neuron-chunk reduction.
return function(D)
    local S, VEC, WPB, G, NS, LB2, LBW, SC_P = D.S, D.VEC, D.WPB, D.G, D.NS, D.LB2, D.LBW, D.SC_P
    cuda [==[
/* ---- backward ---- */

/* dT = dy·Wd_n + l1c·sign(U), dU = dT·P, dP = dT·U per entry (lane per entry). */
extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_bwd_ent(const tw_u16 *__restrict__ dy, const tw_u16 *__restrict__ wd,
                    const tw_u32 *__restrict__ packed, float *u_ell,
                    const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *u_spill,
                    const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                    const tw_u32 *__restrict__ chunk_row, tw_u64 E, float l1c,
                    float *__restrict__ e_du, float *__restrict__ e_dp, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *ds = tw_sm + warp * ${S.K};
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        if (e0 < e1)
            tw_row_to_smem(ds, dy + m * ${S.K}, lane);
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            if (e < e1) {
                tw_u32 word;
                float *up;
                tw_locate(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, word, up);
                const float u = *up, p = tw_to_f32((tw_u16)(word >> 16));
                const float sgn = tw_sign_nan(u); /* NaN for a NaN u, as the dense gradient */
                const float dt =
                    __fadd_rn(tw_dot_ref(ds, wd + (long long)(word & 0xffffu) * ${S.K}),
                              __fmul_rn(l1c, sgn));
                e_du[e] = __fmul_rn(dt, p);
                e_dp[e] = __fmul_rn(dt, u);
            }
        }
        __syncwarp();
    }
}

/* dx (or a partial row) of one (row chunk, K slice): Σ dU·Wu_n + dP·Wg_n. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_bwd_dx(const tw_u16 *__restrict__ wu, const tw_u16 *__restrict__ wg,
                   const tw_u32 *__restrict__ e_col, const float *__restrict__ e_du,
                   const float *__restrict__ e_dp, const tw_u64 *__restrict__ row_off,
                   const tw_u64 *__restrict__ chunk_off, const tw_u64 *__restrict__ pslot_off,
                   const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u16 *__restrict__ dx,
                   float *__restrict__ partial, long long M) {
]==]
    D.chunk_sum_open()
    cuda [==[
            const float ul = e < e1 ? e_du[e] : 0.0f, pl = e < e1 ? e_dp[e] : 0.0f;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            for (int q0 = 0; q0 < nb; q0 += ${LB2}) {
                tw_raw wa[${LB2}], wb[${LB2}];
                float du[${LB2}], dp[${LB2}];
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    const long long n = __shfl_sync(TW_FULL, nl, (q0 + i) & 31);
                    du[i] = __shfl_sync(TW_FULL, ul, (q0 + i) & 31);
                    dp[i] = __shfl_sync(TW_FULL, pl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G}) {
                        wa[i] = tw_ldraw(wu + n * ${S.K}, g);
                        wb[i] = tw_ldraw(wg + n * ${S.K}, g);
                    }
                }
#pragma unroll
                for (int i = 0; i < ${LB2}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float a[${VEC}], b2[${VEC}];
                        tw_cvt(wa[i], a);
                        tw_cvt(wb[i], b2);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++)
                            acc[v] = __fadd_rn(
                                acc[v], __fadd_rn(__fmul_rn(du[i], a[v]), __fmul_rn(dp[i], b2[v])));
                    }
                }
            }
]==]
    D.chunk_sum_close("dx")
    cuda [==[

/* Per row block b (rows [b·R, b·R + R)): hist[n·B + b] = its entries of neuron n (integer
 * atomics: the counts are exact whatever the order). hist must be zero. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_hist(const tw_u64 *__restrict__ row_off, const tw_u32 *__restrict__ e_col,
                 long long M, long long R, long long B, tw_u32 *__restrict__ hist) {
    for (long long b = blockIdx.x; b < B; b += gridDim.x) {
        const long long r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        for (tw_u64 e = row_off[r0] + threadIdx.x; e < row_off[r1]; e += blockDim.x)
            atomicAdd(hist + (long long)e_col[e] * B + b, 1u);
    }
}

/* Stable placement: row block b visits its rows in order; entry e of row m (neuron n) goes to
 * slot cursor[n·B + b] + the number of the block's earlier rows with neuron n. ranked (dynamic
 * shared memory SC_SMEM): those numbers are counters in shared memory, advanced row by row (a
 * row's entries have distinct neurons: no race), and the cursors are only read, so the columns
 * and cursor values of a piece of SC_P entries are loaded at once before the row-ordered pass
 * (which then touches no global value it waits for). Else (N too large for the device's shared
 * memory) each row advances the cursors in global memory. Both give the same lists. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_scatter(const tw_u64 *__restrict__ row_off, const tw_u32 *__restrict__ e_col,
                    long long M, long long R, long long B, tw_u32 *__restrict__ cursor,
                    tw_u32 *__restrict__ col_row, tw_u32 *__restrict__ col_ent, int ranked) {
    extern __shared__ tw_u32 tw_sc[]; /* ranked: [N] counters, [SC_P] neurons, [SC_P] slots */
    tw_u32 *sn = tw_sc + ${S.N}, *sslot = sn + ${SC_P};
    for (long long b = blockIdx.x; b < B; b += gridDim.x) {
        const long long r0 = b * R, r1 = r0 + R < M ? r0 + R : M;
        if (!ranked) {
            for (long long m = r0; m < r1; m++) {
                for (tw_u64 e = row_off[m] + threadIdx.x; e < row_off[m + 1]; e += blockDim.x) {
                    tw_u32 *cur = cursor + (long long)e_col[e] * B + b;
                    const tw_u32 at = *cur;
                    *cur = at + 1u;
                    col_row[at] = (tw_u32)m;
                    col_ent[at] = (tw_u32)e;
                }
                __syncthreads();
            }
            continue;
        }
        for (int n = (int)threadIdx.x; n < ${S.N}; n += (int)blockDim.x)
            tw_sc[n] = 0u;
        const tw_u64 end = row_off[r1];
        long long m = r0;
        for (tw_u64 p0 = row_off[r0]; p0 < end; p0 += ${SC_P}ull) {
            const tw_u64 p1 = p0 + ${SC_P}ull < end ? p0 + ${SC_P}ull : end;
            for (tw_u64 e = p0 + threadIdx.x; e < p1; e += blockDim.x) {
                const tw_u32 n = e_col[e];
                sn[e - p0] = n;
                sslot[e - p0] = cursor[(long long)n * B + b];
            }
            __syncthreads(); /* the piece loaded, the counters zeroed (first piece) */
            /* the rows that start in this piece; one that continues into the next stays m */
            for (; m < r1 && row_off[m] < p1; m++) {
                const tw_u64 a0 = row_off[m] > p0 ? row_off[m] : p0;
                const tw_u64 a1 = row_off[m + 1] < p1 ? row_off[m + 1] : p1;
                for (tw_u64 e = a0 + threadIdx.x; e < a1; e += blockDim.x) {
                    const tw_u32 n = sn[e - p0], r = tw_sc[n];
                    tw_sc[n] = r + 1u;
                    const tw_u32 at = sslot[e - p0] + r;
                    col_row[at] = (tw_u32)m;
                    col_ent[at] = (tw_u32)e;
                }
                __syncthreads();
                if (row_off[m + 1] > p1)
                    break;
            }
        }
        __syncthreads(); /* the counters are reset by the next row block's pass */
    }
}

/* dWu, dWg, dWd of one (neuron chunk, K slice): tokens ascending. Chunk 0 writes the outputs
 * (acc: adds its sum to what they hold, the heavy-row block's dense gradients, one rounding),
 * chunk j ≥ 1 its partial slot. Items go to warps from a queue (*work, zero at launch; integer
 * atomics): chunk lengths are uneven (empty and short neurons beside split hot ones), and a
 * fixed grid-stride share kept a block resident for its longest warp. Which warp takes an item
 * changes no arithmetic: the results are the same bits whatever the order. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_dw(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ dy,
               const tw_u64 *__restrict__ col_off, const tw_u32 *__restrict__ col_row,
               const tw_u32 *__restrict__ col_ent, const float *__restrict__ e_du,
               const float *__restrict__ e_dp, const float *__restrict__ e_tm,
               const tw_u64 *__restrict__ nchunk_off, const tw_u64 *__restrict__ nslot_off,
               const tw_u32 *__restrict__ nchunk_nrn, tw_u64 E2, float *__restrict__ dwg,
               float *__restrict__ dwu, float *__restrict__ dwd, float *__restrict__ npart,
               int acc, tw_u64 *__restrict__ work) {
    const int lane = (int)(threadIdx.x & 31u);
    const tw_u64 nch = nchunk_off[${S.N}], items = nch * ${NS};
    /* slice-major: the warps in flight share a K slice of x and dy (M·2·32·VEC·2 bytes, L2) */
    for (;;) {
        tw_u64 t = 0;
        if (lane == 0)
            t = atomicAdd(work, 1ull);
        const tw_u64 it = __shfl_sync(TW_FULL, t, 0);
        if (it >= items)
            break;
        const tw_u64 c = it % nch;
        const long long g = (long long)(it / nch) * 32 + lane;
        const long long n = nchunk_nrn[c];
        const tw_u64 j = c - nchunk_off[n];
        const tw_u64 i0 = col_off[n] + j * E2, end = col_off[n + 1];
        const tw_u64 i1 = i0 + E2 < end ? i0 + E2 : end;
        float gu[${VEC}], gg[${VEC}], gd[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            gu[q] = gg[q] = gd[q] = 0.0f;
        for (tw_u64 b = i0; b < i1; b += 32ull) {
            const tw_u64 i = b + (tw_u64)lane;
            tw_u32 ml = 0;
            float ul = 0.0f, pl = 0.0f, tl = 0.0f;
            if (i < i1) {
                const tw_u32 e = col_ent[i];
                ml = col_row[i];
                ul = e_du[e], pl = e_dp[e], tl = e_tm[e];
            }
            const int nb = (int)(i1 - b < 32ull ? i1 - b : 32ull);
            for (int q0 = 0; q0 < nb; q0 += ${LBW}) {
                tw_raw rx[${LBW}], rd[${LBW}];
                float du[${LBW}], dp[${LBW}], tm[${LBW}];
#pragma unroll
                for (int i = 0; i < ${LBW}; i++) {
                    const long long m = __shfl_sync(TW_FULL, ml, (q0 + i) & 31);
                    du[i] = __shfl_sync(TW_FULL, ul, (q0 + i) & 31);
                    dp[i] = __shfl_sync(TW_FULL, pl, (q0 + i) & 31);
                    tm[i] = __shfl_sync(TW_FULL, tl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G}) {
                        rx[i] = tw_ldraw(x + m * ${S.K}, g);
                        rd[i] = tw_ldraw(dy + m * ${S.K}, g);
                    }
                }
#pragma unroll
                for (int i = 0; i < ${LBW}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float xv[${VEC}], dv[${VEC}];
                        tw_cvt(rx[i], xv);
                        tw_cvt(rd[i], dv);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++) {
                            gu[v] = __fadd_rn(gu[v], __fmul_rn(du[i], xv[v]));
                            gg[v] = __fadd_rn(gg[v], __fmul_rn(dp[i], xv[v]));
                            gd[v] = __fadd_rn(gd[v], __fmul_rn(tm[i], dv[v]));
                        }
                    }
                }
            }
        }
        if (g < ${G}) {
            if (j == 0) {
                if (acc) { /* heavy block + this chunk, then the partials in chunk order */
                    float hu[${VEC}], hg[${VEC}], hd[${VEC}];
                    tw_ldf(dwu + n * ${S.K}, g, hu);
                    tw_ldf(dwg + n * ${S.K}, g, hg);
                    tw_ldf(dwd + n * ${S.K}, g, hd);
#pragma unroll
                    for (int v = 0; v < ${VEC}; v++) {
                        gu[v] = __fadd_rn(hu[v], gu[v]);
                        gg[v] = __fadd_rn(hg[v], gg[v]);
                        gd[v] = __fadd_rn(hd[v], gd[v]);
                    }
                }
                tw_stf(dwu + n * ${S.K}, g, gu);
                tw_stf(dwg + n * ${S.K}, g, gg);
                tw_stf(dwd + n * ${S.K}, g, gd);
            } else {
                float *p = npart + (long long)(nslot_off[n] + j - 1ull) * ${3 * S.K};
                tw_stf(p, g, gu);
                tw_stf(p + ${S.K}, g, gg);
                tw_stf(p + ${2 * S.K}, g, gd);
            }
        }
    }
}

/* Neurons with several chunks: outputs += partials in chunk order. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_dw_reduce(const tw_u64 *__restrict__ nchunk_off, const tw_u64 *__restrict__ nslot_off,
                      const float *__restrict__ npart, float *__restrict__ dwg,
                      float *__restrict__ dwu, float *__restrict__ dwd) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long items = (long long)${S.N} * ${NS};
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long n = it / ${NS};
        const long long g = (it % ${NS}) * 32 + lane;
        const tw_u64 nch = nchunk_off[n + 1] - nchunk_off[n];
        if (nch <= 1ull || g >= ${G})
            continue;
        float *outs[3] = {dwu + n * ${S.K}, dwg + n * ${S.K}, dwd + n * ${S.K}};
        for (int o = 0; o < 3; o++) {
            float acc[${VEC}];
            tw_ldf(outs[o], g, acc);
            for (tw_u64 j = 1; j < nch; j++) {
                float f[${VEC}];
                tw_ldf(npart + (long long)(nslot_off[n] + j - 1ull) * ${3 * S.K} + o * ${S.K}, g,
                       f);
#pragma unroll
                for (int q = 0; q < ${VEC}; q++)
                    acc[q] = __fadd_rn(acc[q], f[q]);
            }
            tw_stf(outs[o], g, acc);
        }
    }
}
]==]
end
