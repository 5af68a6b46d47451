-- gate_pack_simt.cu.lua — portable gate-pack: packed = TwELL(relu(x · wᵀ)) with plain FP32 SIMT
-- arithmetic (any sm_75+ architecture, no tensor cores). Simple and exact rather than fast; the
-- Hopper wgmma kernel is gate_pack_sm90.cu.lua.
--
-- Parameters: K, N, T, C (shape, see twellrt.h), dtype ("bf16" | "fp16"),
--             BM (rows per CTA, default 32), THREADS (threads per CTA, default 256).
-- ABI (fixed; the CUDA backend launches it):
--   extern "C" __global__ void twell_gate_pack_simt(const unsigned short *x,  // [M, K] dtype
--                                                   const unsigned short *w,  // [N, K] dtype
--                                                   unsigned int *packed,     // [M, N/C]
--                                                   int M)
--   grid = (N/T, ceil(M/BM), 1), block = (THREADS, 1, 1), no dynamic shared memory
--   (static shared memory below 48 KB).
-- Contract: CTA (bx, by) owns rows [by·BM, by·BM + BM) ∩ [0, M) and columns [bx·T, bx·T + T),
-- and writes every word of those row-tiles. Each pre-activation is the reference dot product of
-- runtime/cpu/cpu_ref.h: products rounded to fp32 (__fmul_rn), added to one fp32 accumulator that
-- starts at +0 with k ascending (__fadd_rn, never contracted into an FMA). The stored value is
-- tw_act16(pre): round_to_dtype(pre) (nearest even) when pre > 0, the canonical NaN when pre is
-- NaN (active), else +0, so packed is
-- bit-identical to tw_gate_pack_ref for every input. Entries go in ascending column order
-- (warp ballots and prefix popcounts, no atomics); unused slots are 0; count is exact even when
-- it exceeds the slots.

local common = import "twell_common"
local S = common.shape()
local BM = param("BM", 32)
local THREADS = param("THREADS", 256)
check(math.type(BM) == "integer" and BM >= 1 and BM <= 128, "BM=%s must be in 1..128",
    tostring(BM))
check(math.type(THREADS) == "integer" and THREADS >= 32 and THREADS <= 1024 and
    THREADS % 32 == 0, "THREADS=%s must be a multiple of 32 in 32..1024", tostring(THREADS))
check((BM * S.T) % THREADS == 0, "BM*T=%d must be a multiple of THREADS=%d", BM * S.T, THREADS)

-- Accumulators per thread; output (r, c) of the CTA tile is handled by thread idx % THREADS
-- where idx = r·T + c, so consecutive threads take consecutive columns.
local OUT = BM * S.T // THREADS
if OUT > 64 then
    unsupported("BM*T/THREADS=%d accumulators per thread is too many (max 64)", OUT)
end

-- K step: the largest of 32 and 16 that divides K and keeps the static shared memory under
-- 48 KB. Rows are padded by one float so a warp reading column kk of 32 rows hits 32 banks.
local SMEM_LIMIT = 48 * 1024
local function smem_bytes(kt)
    local inputs = (BM + S.T) * (kt + 1) * 4
    local vals = BM * S.T * 2
    return math.max(inputs, vals)
end
local KT
for _, kt in ipairs({ 32, 16 }) do
    if not KT and S.K % kt == 0 and smem_bytes(kt) < SMEM_LIMIT then
        KT = kt
    end
end
if not KT then
    unsupported("BM=%d, T=%d need more than 48 KB of static shared memory", BM, S.T)
end
local KP = KT + 1

common.conversions(S.dtype)
common.pack_row_tile_warp(S)

cuda [==[

extern "C" __global__ void __launch_bounds__(${THREADS})
twell_gate_pack_simt(const unsigned short *__restrict__ x, const unsigned short *__restrict__ w,
                     unsigned int *__restrict__ packed, int M) {
    /* The input tiles are dead once the K loop ends; the rounded outputs reuse their space. */
    __shared__ union {
        struct {
            float x[${BM}][${KP}]; /* x[m0 + r][k0 + kk] */
            float w[${S.T}][${KP}]; /* w[n0 + c][k0 + kk] */
        } in;
        unsigned short vals[${BM}][${S.T}]; /* activations of the CTA tile, 16-bit patterns */
    } sm;

    const int tid = (int)threadIdx.x;
    const int n0 = (int)blockIdx.x * ${S.T};
    const int m0 = (int)blockIdx.y * ${BM};

    float acc[${OUT}];
#pragma unroll
    for (int i = 0; i < ${OUT}; i++)
        acc[i] = 0.0f;

    for (int k0 = 0; k0 < ${S.K}; k0 += ${KT}) {
        for (int idx = tid; idx < ${BM * KT}; idx += ${THREADS}) {
            const int r = idx / ${KT}, kk = idx % ${KT};
            const int m = m0 + r;
            sm.in.x[r][kk] = m < M ? tw_to_f32(x[(unsigned long long)m * ${S.K} + k0 + kk]) : 0.0f;
        }
        for (int idx = tid; idx < ${S.T * KT}; idx += ${THREADS}) {
            const int c = idx / ${KT}, kk = idx % ${KT};
            sm.in.w[c][kk] = tw_to_f32(w[(unsigned long long)(n0 + c) * ${S.K} + k0 + kk]);
        }
        __syncthreads();
        for (int kk = 0; kk < ${KT}; kk++) {
#pragma unroll
            for (int i = 0; i < ${OUT}; i++) {
                const int idx = tid + i * ${THREADS};
                const float p = __fmul_rn(sm.in.x[idx / ${S.T}][kk], sm.in.w[idx % ${S.T}][kk]);
                acc[i] = __fadd_rn(acc[i], p);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < ${OUT}; i++) {
        const int idx = tid + i * ${THREADS};
        sm.vals[idx / ${S.T}][idx % ${S.T}] = tw_act16(acc[i]);
    }
    __syncthreads();

    /* One warp per row-tile; the row test is warp-uniform, as the ballots require. */
    for (int r = tid >> 5; r < ${BM}; r += ${THREADS // 32}) {
        const int m = m0 + r;
        if (m < M)
            tw_pack_row_tile_warp(sm.vals[r],
                                  packed + (unsigned long long)m * ${S.NW} + blockIdx.x * ${S.W},
                                  (unsigned int)n0);
    }
}
]==]
