-- train_ffn_udt.lua — module of train_ffn.cu.lua (VEC 8 builds): the glue of tiled U / dT: the
-- fused pipeline's phase-A slices summed per pair and stored at the entry's TwELL word.
return function(D)
    local S = D.S
    cuda [==[
/* Tiled U / dT: the fused inference pipeline's phase A (templates/ffn_fused.cu.lua) left, per
 * pair slot p of its (chunk, group) lists, the partial dot products of 64-column slices at
 * partial[s·pstride + p]. One warp per list (lane per slot): the slices summed in ascending
 * order (fp32, fixed), the slot's token m and neuron n decoded from desc (row in chunk << 7 |
 * key << 4 | token in group), the entry found in row-tile (m, n / T) by its column (the slots
 * ascend), and the sum stored at that word of out_ell ([M, N/C] f32, u_ell's layout). Pads (gate
 * bits 0) are skipped; nothing is written when flag[0] != 0 (the lists were not built). */
extern "C" __global__ void __launch_bounds__(256)
twell_train_udt(const tw_u32 *__restrict__ desc, const tw_u16 *__restrict__ gv,
                const tw_u32 *__restrict__ offsets, const tw_u32 *__restrict__ sizes,
                const float *__restrict__ partial, long long pstride, int nsl, int cn, int gt,
                int nc, const tw_u32 *__restrict__ packed, float *__restrict__ out_ell,
                long long M, const tw_u32 *__restrict__ flag) {
    if (flag[0] != 0u)
        return;
    const int lane = (int)(threadIdx.x & 31u);
    const long long ng = (M + gt - 1) / gt, nl = ng * nc;
    for (long long l = tw_gwarp(); l < nl; l += tw_nwarps()) {
        const long long c = l / ng, g = l - c * ng;
        const tw_u32 o = offsets[l], sz = sizes[l];
        for (tw_u32 q = (tw_u32)lane; q < sz; q += 32u) {
            const tw_u32 p = o + q;
            if (gv[p] == 0)
                continue;
            const tw_u32 d = desc[p];
            const long long m = g * gt + (long long)(d & 15u);
            const tw_u32 n = (tw_u32)c * (tw_u32)cn + (d >> 7);
            if (m >= M || n >= ${S.N}u)
                continue;
            const long long wb = m * ${S.NW} + (long long)(n / ${S.T}u) * ${S.W};
            const tw_u32 cnt = packed[wb];
            int lo = 0, hi = (int)(cnt < ${S.SLOTS}u ? cnt : ${S.SLOTS}u) - 1;
            while (lo < hi) { /* the first slot whose column is >= n */
                const int mid = (lo + hi) >> 1;
                if ((packed[wb + 1 + mid] & 0xffffu) < n)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (hi < 0 || (packed[wb + 1 + lo] & 0xffffu) != n)
                continue;
            float v = 0.0f;
            for (int sl = 0; sl < nsl; sl++)
                v += partial[(long long)sl * pstride + p];
            out_ell[wb + 1 + lo] = v;
        }
    }
}
]==]
end
