-- ffn_fused_reduce.lua — module of ffn_fused.cu.lua (gated): tw_k_reduce, between the phases:
-- h = g * (sum of phase A's slice partials, fixed order) stored as hi|lo words paired over slots.
-- Returns a function of D (the template's constants; this part reads none of them).
return function(D)
    cuda [==[

// Between the phases (gated): h = g * (sum of the slices' partial u, fixed order), stored as
// a hi|lo word (bf16: the two terms; fp16: of h * 2^(141 - ex), ex per aligned 16-slot round in
// rexp), paired over slots (2i, 2i + 1): the hi halves in word 2i, the lo halves in 2i + 1.
// Pads have g = 0, so h = 0.
template <int DT>
TW_KERNEL((256)) tw_k_reduce(const tw_u16 *__restrict__ gv, const float *__restrict__ partial,
                              tw_u32 pstride, int nslices, const tw_u32 *__restrict__ total_p,
                              tw_u32 *__restrict__ hl, tw_u32 *__restrict__ rexp,
                              const tw_u32 *__restrict__ flag) {
    if (flag[0])
        return;
    const tw_u32 total = *total_p, lane = threadIdx.x & 31u;
    const tw_u32 stride = gridDim.x * blockDim.x;
    for (tw_u32 p0 = blockIdx.x * blockDim.x + (threadIdx.x & ~31u); p0 < total; p0 += stride) {
        const tw_u32 p = p0 + lane;
        float h = 0.0f;
        if (p < total) {
            float u = 0.0f;
            for (int s = 0; s < nslices; s++)
                u += partial[(long long)s * pstride + p];
            h = tw_h2f<DT>(gv[p]) * u;
        }
        tw_u32 ex = 0;
        if constexpr (DT == 1) { /* total is a multiple of 16 here: 16-lane groups are whole */
            float am = tw_abs_fin(h); /* the scale from finite values only */
#pragma unroll
            for (int o = 1; o < 16; o <<= 1)
                am = fmaxf(am, __shfl_xor_sync(TW_FULL, am, o));
            ex = tw_scale_ex(__float_as_uint(am));
            if ((lane & 15u) == 0 && p < total)
                rexp[p >> 4] = ex;
        }
        tw_u32 w = tw_split_hl<DT>(h, ex);
        /* paired: slot 2i gets hi(2i) | hi(2i+1) << 16, slot 2i+1 the lo halves (total is a
           multiple of 8: pairs never straddle it) */
        const tw_u32 o = __shfl_xor_sync(TW_FULL, w, 1);
        w = (lane & 1u) ? tw_prmt2(o, w, 0x5410u) : tw_prmt2(w, o, 0x7632u);
        if (p < total)
            hl[p] = w;
    }
}

]==]
end
