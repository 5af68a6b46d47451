// fused_layout_check.cpp — host check of the v5 index arithmetic of fused_kernels.cuh (no GPU):
// the list layout the build kernel writes (same helpers, same algorithm: sort by class with bit 2
// alternating, deal into 4-sets, pads take missing classes), and one round of phase A and of
// phase B emulated lane by lane with the mma.m16n8k16 / m16n8k8 fragment layouts of the PTX ISA,
// against direct sums. Also counts shared-memory wavefronts of the 16-byte loads.
//   g++ -std=c++17 -O2 -o /tmp/flc bench/dev/fused_layout_check.cpp && /tmp/flc
#define TW_LAYOUT_ONLY
#define TW_HD static inline
#include "fused_kernels.cuh"

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static int g_fail = 0;
#define EXPECT(c, ...)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            if (g_fail++ < 20) {                                                                   \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t lo16(uint32_t w) { return (uint16_t)(w & 0xffff); }
static uint16_t hi16(uint32_t w) { return (uint16_t)(w >> 16); }
static uint32_t prmt2(uint32_t a, uint32_t b, uint32_t sel) {
    uint8_t by[8];
    for (int i = 0; i < 4; i++)
        by[i] = (uint8_t)(a >> (8 * i)), by[4 + i] = (uint8_t)(b >> (8 * i));
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)by[(sel >> (4 * i)) & 7] << (8 * i);
    return r;
}

// A list: entries (row, tok, g); build the slot arrays exactly as tw_k_build5 does.
struct Entry {
    uint32_t row, tok;
    uint16_t g;
};
static void build_list(const std::vector<Entry> &e, uint32_t size, std::vector<uint32_t> &desc,
                       std::vector<uint16_t> &gv) {
    const uint32_t n = (uint32_t)e.size();
    desc.assign(size, 0xdeadbeefu);
    gv.assign(size, 0xdead);
    uint32_t cnt8[8] = {0};
    for (auto &x : e)
        cnt8[tw_bucket(x.row)]++;
    uint32_t CS[4], MC[4], ZC[4], OC[4], a = 0;
    for (int cl = 0; cl < 4; cl++) {
        ZC[cl] = cnt8[2 * cl], OC[cl] = cnt8[2 * cl + 1];
        CS[cl] = a;
        MC[cl] = std::min(ZC[cl], OC[cl]);
        a += ZC[cl] + OC[cl];
    }
    uint32_t run8[8] = {0};
    for (auto &x : e) { /* entry order = fetch order; ranks within a bucket in that order */
        const uint32_t q = tw_bucket(x.row), cl = q >> 1, i = run8[q]++;
        const uint32_t si = CS[cl] + tw_class_pos(i, q & 1u, MC[cl]);
        const uint32_t slot = tw_slot_of(si, size);
        EXPECT(desc[slot] == 0xdeadbeefu, "slot %u written twice", slot);
        desc[slot] = tw_desc5(x.row, x.tok);
        gv[slot] = x.g;
    }
    const uint32_t S4 = size >> 2;
    auto class_of = [&](uint32_t sj) {
        uint32_t cl = 0;
        for (int k = 1; k < 4; k++)
            cl = CS[k] <= sj ? (uint32_t)k : cl;
        return cl;
    };
    for (uint32_t si = n; si < size; si++) {
        const uint32_t s = si % S4, qp = si / S4;
        uint32_t present = 0, nreal = 0;
        for (uint32_t qq = 0; qq < 4; qq++) {
            const uint32_t sj = s + qq * S4;
            if (sj < n) {
                present |= 1u << class_of(sj);
                nreal++;
            }
        }
        const uint32_t k = qp - nreal;
        uint32_t cls = 0;
        for (uint32_t cl = 0, seen = 0; cl < 4; cl++)
            if (!((present >> cl) & 1u)) {
                if (seen == k)
                    cls = cl;
                seen++;
            }
        const uint32_t sip = (s ^ 1u) + qp * S4;
        uint32_t b2 = s & 1u;
        if (sip < n) {
            const uint32_t cl = class_of(sip), pos = sip - CS[cl], mc = MC[cl];
            const uint32_t pb = pos < 2u * mc ? (pos & 1u) : (ZC[cl] > OC[cl] ? 0u : 1u);
            b2 = pb ^ 1u;
        }
        const uint32_t slot = tw_slot_of(si, size);
        EXPECT(desc[slot] == 0xdeadbeefu, "pad slot %u written twice", slot);
        desc[slot] = tw_desc5(cls | (b2 << 2), 0u);
        gv[slot] = 0;
    }
}

// Bank groups (16-byte units mod 8) of a quarter-warp phase: wavefronts = max multiplicity over
// distinct addresses.
static int phase_waves(const uint32_t *addr, int nl) {
    int cnt[8] = {0};
    std::vector<uint32_t> seen;
    for (int i = 0; i < nl; i++) {
        if (std::find(seen.begin(), seen.end(), addr[i]) != seen.end())
            continue;
        seen.push_back(addr[i]);
        cnt[(addr[i] >> 4) & 7]++;
    }
    return *std::max_element(cnt, cnt + 8);
}
static int lds128_waves(const uint32_t (&addr)[32]) {
    int w = 0;
    for (int p = 0; p < 4; p++)
        w += phase_waves(addr + 8 * p, 8);
    return w;
}

// Emulated mma: fragments of 32 lanes -> D += A B per the PTX layouts (bf16).
static void mma16816(float (&d)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
    double A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        A[g][2 * t] = bf(lo16(a[l][0])), A[g][2 * t + 1] = bf(hi16(a[l][0]));
        A[g + 8][2 * t] = bf(lo16(a[l][1])), A[g + 8][2 * t + 1] = bf(hi16(a[l][1]));
        A[g][2 * t + 8] = bf(lo16(a[l][2])), A[g][2 * t + 9] = bf(hi16(a[l][2]));
        A[g + 8][2 * t + 8] = bf(lo16(a[l][3])), A[g + 8][2 * t + 9] = bf(hi16(a[l][3]));
        B[2 * t][g] = bf(lo16(b[l][0])), B[2 * t + 1][g] = bf(hi16(b[l][0]));
        B[2 * t + 8][g] = bf(lo16(b[l][1])), B[2 * t + 9][g] = bf(hi16(b[l][1]));
    }
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int e = 0; e < 4; e++) {
            double s = 0;
            for (int k = 0; k < 16; k++)
                s += A[rr[e]][k] * B[k][cc[e]];
            d[l][e] += (float)s;
        }
    }
}
static void mma1688(float (&d)[32][4], const uint32_t (&a)[32][2], const uint32_t (&b)[32]) {
    double A[16][8], B[8][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        A[g][2 * t] = bf(lo16(a[l][0])), A[g][2 * t + 1] = bf(hi16(a[l][0]));
        A[g + 8][2 * t] = bf(lo16(a[l][1])), A[g + 8][2 * t + 1] = bf(hi16(a[l][1]));
        B[2 * t][g] = bf(lo16(b[l])), B[2 * t + 1][g] = bf(hi16(b[l]));
    }
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int e = 0; e < 4; e++) {
            double s = 0;
            for (int k = 0; k < 8; k++)
                s += A[rr[e]][k] * B[k][cc[e]];
            d[l][e] += (float)s;
        }
    }
}

static std::mt19937 rng(12345);
static uint16_t rbf() { /* a random bf16 in +-[0.5, 2) with a few mantissa bits */
    const uint32_t s = rng() & 1, e = 126 + (rng() % 2), m = rng() & 0x7f;
    return (uint16_t)((s << 15) | (e << 7) | m);
}

// Shared-memory image of a chunk slice: rows x 64 columns, XOR-swizzled 16-byte pieces.
struct Chunk {
    int rows;
    std::vector<uint16_t> w; /* logical [rows][64] */
    std::vector<uint8_t> smem;
    explicit Chunk(int r) : rows(r), w((size_t)r * 64), smem((size_t)r * 128) {
        for (auto &v : w)
            v = rbf();
        for (int row = 0; row < r; row++)
            for (int p = 0; p < 8; p++)
                memcpy(&smem[(size_t)row * 128 + ((p ^ (row & 7)) << 4)], &w[(size_t)row * 64 + 8 * p], 16);
    }
    void lds128(uint32_t off, uint32_t (&v)[4]) const { memcpy(v, &smem[off], 16); }
};

// Phase A, one list (all its rounds) for one group: partial u per slot vs sum_k x[tok][k] w[row][k].
static void check_phase_a(const Chunk &ch, const std::vector<uint32_t> &desc, uint32_t size,
                          const std::vector<uint16_t> &x /* [8][64] */, long &waves, long &ideal) {
    std::vector<float> part(size, NAN);
    std::vector<int> writes(size, 0);
    uint32_t bx[32][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t4 = l & 3;
        memcpy(&bx[l][0], &x[(size_t)g * 64 + 8 * t4], 16);
        memcpy(&bx[l][4], &x[(size_t)g * 64 + 32 + 8 * t4], 16);
    }
    const uint32_t nfull = size >> 4;
    for (uint32_t r = 0; r <= nfull; r++) {
        const bool half = r == nfull;
        if (half && !(size & 8u))
            break;
        const uint32_t o = 16 * r;
        uint32_t A0[32][4], A1[32][4], B0[32][4], B1[32][4];
        uint32_t ad[4][32];
        for (int l = 0; l < 32; l++) {
            const uint32_t g = l >> 2, t4s = (l & 3) << 4;
            const uint32_t da = desc[o + g], oa = (da ^ t4s) & ~15u;
            ch.lds128(oa, A0[l]);
            ch.lds128(oa ^ 64u, A1[l]);
            ad[0][l] = oa, ad[1][l] = oa ^ 64u;
            if (!half) {
                const uint32_t db = desc[o + g + 8], ob = (db ^ t4s) & ~15u;
                ch.lds128(ob, B0[l]);
                ch.lds128(ob ^ 64u, B1[l]);
                ad[2][l] = ob, ad[3][l] = ob ^ 64u;
            } else {
                memset(B0[l], 0, 16), memset(B1[l], 0, 16);
            }
        }
        for (int i = 0; i < (half ? 2 : 4); i++) {
            waves += lds128_waves(ad[i]);
            ideal += 4;
        }
        float e0[32][4] = {}, e1[32][4] = {};
        for (int ks = 0; ks < 4; ks++) {
            uint32_t a[32][4], b[32][2];
            for (int l = 0; l < 32; l++) {
                const uint32_t *P = ks < 2 ? A0[l] : A1[l], *Q = ks < 2 ? B0[l] : B1[l];
                const int w = 2 * (ks & 1);
                a[l][0] = P[w], a[l][1] = Q[w], a[l][2] = P[w + 1], a[l][3] = Q[w + 1];
                b[l][0] = bx[l][2 * ks], b[l][1] = bx[l][2 * ks + 1];
            }
            mma16816((ks & 1) ? e1 : e0, a, b);
        }
        for (int l = 0; l < 32; l++) {
            const uint32_t g = l >> 2, t4 = l & 3;
            const uint32_t da = desc[o + g];
            if (((da >> 1) & 3u) == t4) {
                part[o + g] = (da & 1u) ? e0[l][1] + e1[l][1] : e0[l][0] + e1[l][0];
                writes[o + g]++;
            }
            if (!half) {
                const uint32_t db = desc[o + g + 8];
                if (((db >> 1) & 3u) == t4) {
                    part[o + g + 8] = (db & 1u) ? e0[l][3] + e1[l][3] : e0[l][2] + e1[l][2];
                    writes[o + g + 8]++;
                }
            }
        }
    }
    for (uint32_t p = 0; p < size; p++) {
        EXPECT(writes[p] == 1, "phase A slot %u written %d times", p, writes[p]);
        const uint32_t row = desc[p] >> 7, tok = desc[p] & 7u;
        double ref = 0;
        for (int k = 0; k < 64; k++)
            ref += (double)bf(x[(size_t)tok * 64 + k]) * bf(ch.w[(size_t)row * 64 + k]);
        EXPECT(fabs(part[p] - ref) <= 1e-4 * (1 + fabs(ref)), "phase A slot %u: %g vs %g", p,
               (double)part[p], ref);
    }
}

// Phase B, one list: y[tok][col] = sum_slots h * w[row][col] (h given as a bf16 per slot).
static void check_phase_b(const Chunk &ch, const std::vector<uint32_t> &desc,
                          const std::vector<uint16_t> &hv, uint32_t size, long &waves, long &ideal) {
    float acc[4][32][4] = {};
    const uint32_t nfull = size >> 4;
    for (uint32_t r = 0; r <= nfull; r++) {
        const bool half = r == nfull;
        if (half && !(size & 8u))
            break;
        const uint32_t o = 16 * r;
        uint32_t L[4][32][4];
        uint32_t bb[32][2];
        uint32_t ad[4][32];
        for (int l = 0; l < 32; l++) {
            const uint32_t g = l >> 2, t4 = l & 3, pis = tw_pib(g) << 4;
            const uint32_t q = half ? o + 2 * t4 : o + 4 * t4;
            const int nj = half ? 2 : 4;
            uint32_t m[4] = {0, 0, 0, 0};
            for (int jj = 0; jj < nj; jj++) {
                const uint32_t d = desc[q + jj], off = (d ^ pis) & ~15u;
                ch.lds128(off, L[jj][l]);
                ad[jj][l] = off;
                m[jj] = (d & 7u) == g ? hv[q + jj] : 0u;
            }
            bb[l][0] = m[0] | (m[1] << 16);
            bb[l][1] = m[2] | (m[3] << 16);
        }
        for (int jj = 0; jj < (half ? 2 : 4); jj++) {
            waves += lds128_waves(ad[jj]);
            ideal += 4;
        }
        for (int mt = 0; mt < 4; mt++) {
            if (!half) {
                uint32_t a[32][4], b[32][2];
                for (int l = 0; l < 32; l++) {
                    a[l][0] = prmt2(L[0][l][mt], L[1][l][mt], 0x5410u);
                    a[l][1] = prmt2(L[0][l][mt], L[1][l][mt], 0x7632u);
                    a[l][2] = prmt2(L[2][l][mt], L[3][l][mt], 0x5410u);
                    a[l][3] = prmt2(L[2][l][mt], L[3][l][mt], 0x7632u);
                    b[l][0] = bb[l][0], b[l][1] = bb[l][1];
                }
                mma16816(acc[mt], a, b);
            } else {
                uint32_t a[32][2], b[32];
                for (int l = 0; l < 32; l++) {
                    a[l][0] = prmt2(L[0][l][mt], L[1][l][mt], 0x5410u);
                    a[l][1] = prmt2(L[0][l][mt], L[1][l][mt], 0x7632u);
                    b[l] = bb[l][0];
                }
                mma1688(acc[mt], a, b);
            }
        }
    }
    /* epilogue mapping: lane (g, t4) -> tokens 2 t4 + hf, columns 8 pib(g) + i */
    double y[8][64];
    int hits[8][64];
    memset(hits, 0, sizeof hits);
    for (int l = 0; l < 32; l++) {
        const uint32_t g = l >> 2, t4 = l & 3, pc = 8 * tw_pib(g);
        for (int hf = 0; hf < 2; hf++)
            for (int mt = 0; mt < 4; mt++) {
                y[2 * t4 + hf][pc + 2 * mt] = acc[mt][l][hf];
                y[2 * t4 + hf][pc + 2 * mt + 1] = acc[mt][l][2 + hf];
                hits[2 * t4 + hf][pc + 2 * mt]++;
                hits[2 * t4 + hf][pc + 2 * mt + 1]++;
            }
    }
    for (int tok = 0; tok < 8; tok++)
        for (int col = 0; col < 64; col++) {
            double ref = 0;
            for (uint32_t p = 0; p < size; p++)
                if ((desc[p] & 7u) == (uint32_t)tok)
                    ref += (double)bf(hv[p]) * bf(ch.w[(size_t)(desc[p] >> 7) * 64 + col]);
            EXPECT(hits[tok][col] == 1, "phase B y[%d][%d] covered %d times", tok, col, hits[tok][col]);
            EXPECT(fabs(y[tok][col] - ref) <= 1e-4 * (1 + fabs(ref)), "phase B y[%d][%d] %g vs %g",
                   tok, col, y[tok][col], ref);
        }
}

int main() {
    long lists = 0, wa = 0, ia = 0, wb = 0, ib = 0, nent = 0, nslots = 0;
    for (int PADQ : {8, 16}) {
        for (int trial = 0; trial < 3000; trial++) {
            const int rows = trial % 7 == 0 ? 64 : 512; /* short last chunk */
            Chunk ch(rows);
            /* entries: per token a random number of distinct rows (a heavy list now and then) */
            std::vector<Entry> e;
            const double mean = trial % 50 == 0 ? 20.0 : 4.4;
            for (uint32_t tok = 0; tok < 8; tok++) {
                std::poisson_distribution<int> pd(mean);
                int k = std::min(pd(rng), rows);
                std::vector<uint32_t> rs(rows);
                for (int i = 0; i < rows; i++)
                    rs[i] = i;
                std::shuffle(rs.begin(), rs.end(), rng);
                std::sort(rs.begin(), rs.begin() + k);
                for (int i = 0; i < k; i++)
                    e.push_back({rs[i], tok, rbf()});
            }
            const uint32_t n = (uint32_t)e.size();
            const uint32_t size = (n + PADQ - 1) / PADQ * PADQ;
            if (size == 0)
                continue;
            std::vector<uint32_t> desc;
            std::vector<uint16_t> gv;
            build_list(e, size, desc, gv);
            /* every entry exactly once, pads g = 0 with rows 0..7 */
            std::vector<uint64_t> want, got;
            for (auto &x : e)
                want.push_back(((uint64_t)x.tok << 40) | ((uint64_t)x.row << 16) | x.g);
            for (uint32_t p = 0; p < size; p++) {
                EXPECT(desc[p] != 0xdeadbeefu, "slot %u never written", p);
                const uint32_t row = desc[p] >> 7;
                EXPECT(((desc[p] >> 4) & 7u) == (row & 7u), "key bits of slot %u", p);
                if (gv[p] == 0) {
                    EXPECT(row < 8 && (desc[p] & 7u) == 0, "pad %u: row %u", p, row);
                    continue;
                }
                got.push_back(((uint64_t)(desc[p] & 7u) << 40) | ((uint64_t)row << 16) | gv[p]);
            }
            std::sort(want.begin(), want.end());
            std::sort(got.begin(), got.end());
            EXPECT(want == got, "entries differ (n %u, got %zu)", n, got.size());
            std::vector<uint16_t> x((size_t)8 * 64);
            for (auto &v : x)
                v = rbf();
            check_phase_a(ch, desc, size, x, wa, ia);
            check_phase_b(ch, desc, gv, size, wb, ib);
            lists++, nent += n, nslots += size;
        }
        printf("PADQ %d: %ld lists, slots/entries %.3f; 16-byte-load wavefronts per ideal: phase A "
               "%.3f, phase B %.3f\n",
               PADQ, lists, (double)nslots / nent, (double)wa / ia, (double)wb / ib);
        lists = wa = ia = wb = ib = nent = nslots = 0;
    }
    /* slot_of is a bijection for every size */
    for (uint32_t size = 8; size <= 512; size += 8) {
        std::vector<int> hit(size, 0);
        for (uint32_t si = 0; si < size; si++)
            hit[tw_slot_of(si, size)]++;
        for (uint32_t p = 0; p < size; p++)
            EXPECT(hit[p] == 1, "slot_of(size %u) hits slot %u %d times", size, p, hit[p]);
    }
    printf("%s (%d failures)\n", g_fail ? "FAILED" : "all layout checks passed", g_fail);
    return g_fail ? 1 : 0;
}
