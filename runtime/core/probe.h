/*
 * probe.h — how production code reads the test probes (forced paths, pinned capacities, failure
 * injection) that exist only in the test library: built with TWELL_PROBES (twellrt_probe, which
 * the tests, the bench and the `twell` tool link), they read the knob; built without (the shipped
 * libtwellrt), they are the default and the knob does not exist. SQLite's SQLITE_UNTESTABLE is the
 * model. Each path keeps its knobs in a struct of its own *_probe.h, a member of its state only
 * under TWELL_PROBES, and its test-control handler in its *_probe.c (compiled into twellrt_probe
 * only).
 */
#ifndef TWELL_PROBE_H
#define TWELL_PROBE_H

#ifdef TWELL_PROBES
/* The probed value `knob` (an expression naming probe fields), or `dflt` in the shipped build. */
#define TW_PROBE_OR(knob, dflt) (knob)
/* Runs the statement given (touching probe fields; commas allowed) only in the test library. */
#define TW_PROBE_DO(...)                                                                           \
    do {                                                                                           \
        __VA_ARGS__;                                                                               \
    } while (0)
#else
#define TW_PROBE_OR(knob, dflt) (dflt)
#define TW_PROBE_DO(...)                                                                           \
    do {                                                                                           \
    } while (0)
#endif

#endif /* TWELL_PROBE_H */
