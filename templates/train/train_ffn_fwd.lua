-- train_ffn_fwd.lua — module of train_ffn.cu.lua: entry location (tw_locate, row chunks) and the
-- forward kernels: U per entry, y = Σ Tm·Wd_n per K slice, the row-chunk reduction, L0 / L1.
return function(D)
    local S, VEC, WPB, NT, G, NS, LB = D.S, D.VEC, D.WPB, D.NT, D.G, D.NS, D.LB
    cuda [==[
/* The row-tile of entry e: the last of the row's NT tile offsets `to` (global or shared) at or
 * before e (non-empty by construction). */
__device__ __forceinline__ int tw_tile_of(const tw_u64 *to, tw_u64 e) {
    int lo = 0, hi = ${NT - 1};
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (to[mid] <= e)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Where entry e (global, of row m) lives: its TwELL word and the address of its U. */
__device__ __forceinline__ void tw_locate(long long m, tw_u64 e, const tw_u32 *__restrict__ packed,
                                          const tw_u64 *__restrict__ tile_off,
                                          const tw_u64 *__restrict__ spill_off,
                                          const tw_u32 *__restrict__ spill, float *u_ell,
                                          float *u_spill, tw_u32 &word, float *&up) {
    const int lo = tw_tile_of(tile_off + m * ${NT}, e);
    const tw_u64 i = e - tile_off[m * ${NT} + lo];
    if (i < ${S.SLOTS}ull) {
        const long long w = m * ${S.NW} + lo * ${S.W} + 1 + (long long)i;
        word = packed[w];
        up = u_ell + w;
    } else {
        const tw_u64 j = spill_off[m * ${NT} + lo] + (i - ${S.SLOTS}ull);
        word = spill[j];
        up = u_spill + j;
    }
}

/* tw_locate (`to`: the row's NT tile offsets, global or a shared copy), whether the entry is in
 * the spill (sp), and whether its value was precomputed by
 * the tiled U / dT route (ok): the lists were built (pre != NULL, pre[0] == 0: the pipeline's
 * capacity flag) and either its row-tile does not overflow (count <= slots: twell_train_udt
 * covers exactly those) or pre_all (twell_train_ovf_udt covered the overflowing ones). */
__device__ __forceinline__ void tw_locate_pre(long long m, tw_u64 e,
                                              const tw_u32 *__restrict__ packed,
                                              const tw_u64 *to,
                                              const tw_u64 *__restrict__ spill_off,
                                              const tw_u32 *__restrict__ spill, float *u_ell,
                                              float *u_spill, const tw_u32 *__restrict__ pre,
                                              int pre_all, tw_u32 &word, float *&up, bool &ok,
                                              bool &sp) {
    const int lo = tw_tile_of(to, e);
    const tw_u64 i = e - to[lo];
    const bool valid = pre != NULL && pre[0] == 0u;
    sp = i >= ${S.SLOTS}ull;
    if (!sp) {
        const long long w = m * ${S.NW} + lo * ${S.W} + 1 + (long long)i;
        word = packed[w];
        up = u_ell + w;
        ok = valid && (pre_all || packed[m * ${S.NW} + lo * ${S.W}] <= ${S.SLOTS}u);
    } else {
        const tw_u64 j = spill_off[m * ${NT} + lo] + (i - ${S.SLOTS}ull);
        word = spill[j];
        up = u_spill + j;
        ok = valid && pre_all;
    }
}

/* Entries [e0, e1) of row chunk c of a row-chunk table. */
__device__ __forceinline__ long long tw_row_chunk(long long c, const tw_u32 *__restrict__ chunk_row,
                                                  const tw_u64 *__restrict__ chunk_off,
                                                  const tw_u64 *__restrict__ row_off, tw_u64 E,
                                                  tw_u64 &j, tw_u64 &e0, tw_u64 &e1) {
    const long long m = chunk_row[c];
    j = (tw_u64)c - chunk_off[m];
    e0 = row_off[m] + j * E;
    const tw_u64 end = row_off[m + 1];
    e1 = e0 + E < end ? e0 + E : end;
    return m;
}

/* ---- forward: U on the support, Tm = U·P, Σ|Tm| per chunk ---- */

extern "C" __global__ void __launch_bounds__(${32 * WPB})
twell_train_fwd_ent(const tw_u16 *__restrict__ x, const tw_u16 *__restrict__ wu,
                    const tw_u32 *__restrict__ packed, float *u_ell,
                    const tw_u64 *__restrict__ tile_off, const tw_u64 *__restrict__ spill_off,
                    const tw_u32 *__restrict__ spill, float *u_spill,
                    const tw_u64 *__restrict__ row_off, const tw_u64 *__restrict__ chunk_off,
                    const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u32 *__restrict__ e_col,
                    float *__restrict__ e_tm, double *__restrict__ chunk_l1, long long M) {
    extern __shared__ float tw_sm[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    float *xs = tw_sm + warp * ${S.K};
    const long long nch = (long long)chunk_off[M];
    for (long long c = tw_gwarp(); c < nch; c += tw_nwarps()) {
        tw_u64 j, e0, e1;
        const long long m = tw_row_chunk(c, chunk_row, chunk_off, row_off, E, j, e0, e1);
        double l1 = 0.0;
        if (e0 < e1)
            tw_row_to_smem(xs, x + m * ${S.K}, lane);
        for (tw_u64 b = e0; b < e1; b += 32ull) {
            const tw_u64 e = b + (tw_u64)lane;
            float tm = 0.0f;
            if (e < e1) {
                tw_u32 word;
                float *up;
                tw_locate(m, e, packed, tile_off, spill_off, spill, u_ell, u_spill, word, up);
                const tw_u32 n = word & 0xffffu;
                const float u = tw_dot_ref(xs, wu + (long long)n * ${S.K});
                tm = __fmul_rn(u, tw_to_f32((tw_u16)(word >> 16)));
                *up = u;
                e_col[e] = n;
                e_tm[e] = tm;
            }
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            for (int q = 0; q < nb; q++) /* Σ|Tm| in entry order, as the CPU */
                l1 += fabs((double)__shfl_sync(TW_FULL, tm, q));
        }
        if (lane == 0)
            chunk_l1[c] = l1;
        __syncwarp();
    }
}

/* y (or a partial row) of one (row chunk, K slice): Σ Tm·Wd_n over the chunk's entries. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_fwd_y(const tw_u16 *__restrict__ wd, const tw_u32 *__restrict__ e_col,
                  const float *__restrict__ e_tm, const tw_u64 *__restrict__ row_off,
                  const tw_u64 *__restrict__ chunk_off, const tw_u64 *__restrict__ pslot_off,
                  const tw_u32 *__restrict__ chunk_row, tw_u64 E, tw_u16 *__restrict__ y,
                  float *__restrict__ partial, long long M) {
]==]
    D.chunk_sum_open()
    cuda [==[
            const float tl = e < e1 ? e_tm[e] : 0.0f;
            const int nb = (int)(e1 - b < 32ull ? e1 - b : 32ull);
            /* LB loads in flight, then the sums in entry order */
            for (int q0 = 0; q0 < nb; q0 += ${LB}) {
                tw_raw w[${LB}];
                float tm[${LB}];
#pragma unroll
                for (int i = 0; i < ${LB}; i++) {
                    const long long n = __shfl_sync(TW_FULL, nl, (q0 + i) & 31);
                    tm[i] = __shfl_sync(TW_FULL, tl, (q0 + i) & 31);
                    if (q0 + i < nb && g < ${G})
                        w[i] = tw_ldraw(wd + n * ${S.K}, g);
                }
#pragma unroll
                for (int i = 0; i < ${LB}; i++) {
                    if (q0 + i < nb && g < ${G}) {
                        float f[${VEC}];
                        tw_cvt(w[i], f);
#pragma unroll
                        for (int v = 0; v < ${VEC}; v++)
                            acc[v] = __fadd_rn(acc[v], __fmul_rn(tm[i], f[v]));
                    }
                }
            }
]==]
    D.chunk_sum_close("y")
    cuda [==[

/* Rows with several chunks: out = Σ partials in chunk order, rounded once. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_row_reduce(const float *__restrict__ partial, const tw_u64 *__restrict__ chunk_off,
                       const tw_u64 *__restrict__ pslot_off, tw_u16 *__restrict__ out,
                       long long M) {
    const int lane = (int)(threadIdx.x & 31u);
    const long long items = M * ${NS};
    for (long long it = tw_gwarp(); it < items; it += tw_nwarps()) {
        const long long m = it / ${NS};
        const long long g = (it % ${NS}) * 32 + lane;
        const tw_u64 nch = chunk_off[m + 1] - chunk_off[m];
        if (nch <= 1ull || g >= ${G})
            continue;
        float acc[${VEC}];
#pragma unroll
        for (int q = 0; q < ${VEC}; q++)
            acc[q] = 0.0f;
        for (tw_u64 j = 0; j < nch; j++) {
            float f[${VEC}];
            tw_ldf(partial + (long long)(pslot_off[m] + j) * ${S.K}, g, f);
#pragma unroll
            for (int q = 0; q < ${VEC}; q++)
                acc[q] = __fadd_rn(acc[q], f[q]);
        }
        tw_sth(out + m * ${S.K}, g, acc);
    }
}

/* stats[0] = nnz/M, stats[1] = Σ chunk_l1 / M: contiguous per-thread sums, then a fixed tree. */
extern "C" __global__ void __launch_bounds__(256)
twell_train_stats(const double *__restrict__ chunk_l1, const tw_u64 *__restrict__ chunk_off,
                  const tw_u64 *__restrict__ row_off, long long M, float *__restrict__ stats) {
    __shared__ double sh[256];
    const tw_u64 n = chunk_off[M], t = threadIdx.x;
    double s = 0.0;
    for (tw_u64 c = n * t / 256ull; c < n * (t + 1ull) / 256ull; c++)
        s += chunk_l1[c];
    sh[t] = s;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if ((int)t < h)
            sh[t] += sh[t + h];
        __syncthreads();
    }
    if (t == 0) {
        stats[0] = (float)((double)row_off[M] / (double)M);
        stats[1] = (float)(sh[0] / (double)M);
    }
}

]==]
end
