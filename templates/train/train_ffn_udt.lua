-- train_ffn_udt.lua — module of train_ffn.cu.lua (VEC 8 builds): the glue of tiled U / dT: the
-- fused pipeline's phase-A slices summed per pair and stored at the entry's TwELL word.
return function(D)
    local S = D.S
    cuda [==[
/* Tiled U / dT: the fused inference pipeline's phase A (templates/ffn_fused.cu.lua) left, per
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
]==]
end
