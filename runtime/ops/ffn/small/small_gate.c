/*
 * small_gate.c — the small path's gate-pack launch geometry for M rows (small_gate.h).
 */
#include "small_gate.h"

#include <string.h>

int tw_sgate_spec_parse(const char *spec, int *wn) {
    if (!spec)
        return -1;
    size_t len = strcspn(spec, ":");
    if (len != 4 || (strncmp(spec, "auto", 4) != 0 && strncmp(spec, TW_SGATE_KERNEL, 4) != 0))
        return -1;
    int w = 0;
    if (spec[len] == ':') {
        const char *v = spec + len + 1;
        if (v[0] < '1' || v[0] > '8' || v[1] != '\0')
            return -1;
        w = v[0] - '0';
        if (w != 1 && w != 2 && w != 4 && w != 8)
            return -1;
    }
    *wn = w;
    return 0;
}

static size_t tw_sgate_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

tw_sgate_geom tw_sgate_geom_of(uint32_t T, size_t M, int wn) {
    if (M == 0)
        M = 1;
    tw_sgate_geom g;
    size_t TB = tw_sgate_cdiv(M, TW_SGATE_MAX_ROWS);
    g.TB = (int)TB;
    g.MT = (int)((tw_sgate_cdiv(M, TB) + 7u) & ~(size_t)7u);
    g.WN = g.MT <= 8 ? 1 : 2;
    while (16u * (unsigned)g.WN > T && g.WN > 1)
        g.WN /= 2;
    if ((wn == 1 || wn == 2 || wn == 4 || wn == 8) && T % (16u * (unsigned)wn) == 0)
        g.WN = wn;
    return g;
}
