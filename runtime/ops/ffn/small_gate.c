/*
 * small_gate.c — the small path's gate-pack kernel and launch geometry for M rows (small_gate.h).
 */
#include "small_gate.h"

#include <string.h>

static const char *const tw_sgate_names[TW_SGK_COUNT] = {"g2", "g2u2", "g8", "x8", "x16", "x32"};
static const int tw_sgate_rows[TW_SGK_COUNT] = {16, 16, 64, 64, 128, 256};

int tw_sgate_choice_parse(const char *name, tw_sgate_choice *out) {
    static const struct {
        const char *name;
        tw_sgate_choice c;
    } t[] = {{"auto", TW_SGC_AUTO}, {"g2", TW_SGC_G2}, {"g2u2", TW_SGC_G2U2}, {"g8", TW_SGC_G8},
             {"x", TW_SGC_X},       {"x8", TW_SGC_X8}, {"x16", TW_SGC_X16},   {"x32", TW_SGC_X32}};
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(name, t[i].name)) {
            *out = t[i].c;
            return 0;
        }
    return -1;
}

int tw_sgate_spec_parse(const char *spec, tw_sgate_choice *choice, int *wn) {
    char name[16];
    if (!spec)
        return -1;
    size_t len = strcspn(spec, ":");
    if (len >= sizeof name)
        return -1;
    memcpy(name, spec, len);
    name[len] = '\0';
    int w = 0;
    if (spec[len] == ':') {
        const char *v = spec + len + 1;
        if (v[0] < '1' || v[0] > '8' || v[1] != '\0')
            return -1;
        w = v[0] - '0';
        if (w != 1 && w != 2 && w != 4 && w != 8)
            return -1;
    }
    tw_sgate_choice c;
    if (tw_sgate_choice_parse(name, &c) != 0)
        return -1;
    *choice = c;
    *wn = w;
    return 0;
}

const char *tw_sgate_kernel_name(tw_sgate_kernel k) {
    return (unsigned)k < TW_SGK_COUNT ? tw_sgate_names[k] : NULL;
}

int tw_sgate_max_rows(tw_sgate_kernel k) {
    return (unsigned)k < TW_SGK_COUNT ? tw_sgate_rows[k] : 0;
}

static int tw_sgate_is_x(tw_sgate_kernel k) { return k >= TW_SGK_X8 && k <= TW_SGK_X32; }

unsigned tw_sgate_smem(tw_sgate_kernel k) {
    return tw_sgate_is_x(k) ? 5120u * (unsigned)(tw_sgate_rows[k] / 8) : 0u;
}

static size_t tw_sgate_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* The x kernel that holds M rows in one token block (X32 beyond 128). */
static tw_sgate_kernel tw_sgate_x_of(size_t M) {
    return M <= 64 ? TW_SGK_X8 : M <= 128 ? TW_SGK_X16 : TW_SGK_X32;
}

tw_sgate_geom tw_sgate_geom_of(uint32_t T, size_t M, tw_sgate_choice choice, int wn,
                               int smem_optin) {
    static const tw_sgate_kernel named[] = {
        [TW_SGC_G2] = TW_SGK_G2,   [TW_SGC_G2U2] = TW_SGK_G2U2, [TW_SGC_G8] = TW_SGK_G8,
        [TW_SGC_X8] = TW_SGK_X8,   [TW_SGC_X16] = TW_SGK_X16,   [TW_SGC_X32] = TW_SGK_X32,
        [TW_SGC_X] = TW_SGK_COUNT, [TW_SGC_AUTO] = TW_SGK_COUNT};
    if (M == 0)
        M = 1;
    tw_sgate_kernel k;
    if (choice == TW_SGC_X)
        k = tw_sgate_x_of(M);
    else if ((unsigned)choice < sizeof named / sizeof named[0] && named[choice] != TW_SGK_COUNT)
        k = named[choice];
    else /* AUTO: the measured register-fed kernels up to 32 rows, x staged up to 256 */
        k = M <= 16 ? TW_SGK_G2 : M <= 32 || M > 256 ? TW_SGK_G8 : tw_sgate_x_of(M);
    while (tw_sgate_is_x(k) && (long long)tw_sgate_smem(k) + TW_SGATE_STATIC_SMEM_X > smem_optin)
        k = k == TW_SGK_X8 ? TW_SGK_G8 : (tw_sgate_kernel)(k - 1);

    tw_sgate_geom g;
    g.kernel = k;
    size_t rows = (size_t)tw_sgate_rows[k];
    size_t TB = tw_sgate_cdiv(M, rows);
    g.TB = (int)TB;
    g.MT = (int)((tw_sgate_cdiv(M, TB) + 7u) & ~(size_t)7u);
    /* more rows: more neurons a block, so each block's rows of x serve more of them (x moves from
     * L2 N/(16·WN) times per token block) */
    if (k == TW_SGK_G2 || k == TW_SGK_G2U2)
        g.WN = g.MT <= 8 ? 1 : 2;
    else
        g.WN = M <= 64 ? 2 : 4;
    while (16u * (unsigned)g.WN > T && g.WN > 1)
        g.WN /= 2;
    int wn_ok = tw_sgate_is_x(k) ? wn == 2 || wn == 4 : wn == 1 || wn == 2 || wn == 4 || wn == 8;
    if (wn_ok && T % (16u * (unsigned)wn) == 0)
        g.WN = wn;
    g.smem = tw_sgate_smem(k);
    return g;
}
