/*
 * candidates.h — what the autotuner chooses between: a tile configuration (an ordered list of
 * named integers with a canonical string), the device limits it must fit, and per-op candidate
 * spaces (cartesian products of value lists) pruned before anything is compiled.
 */
#ifndef TWELL_CANDIDATES_H
#define TWELL_CANDIDATES_H

#include "jit.h"
#include "twellrt.h"

#include <stddef.h>
#include <stdint.h>

#define TW_TUNE_MAX_PARAMS 12 /* parameters in one configuration */
#define TW_TUNE_NAME_MAX 16   /* a parameter name (letters, digits, _) + NUL */
#define TW_TUNE_KERNEL_MAX 48 /* a template name + NUL */
#define TW_TUNE_CANON_MAX 320 /* longest canonical string + NUL */
#define TW_TUNE_OP_MAX 24     /* an op name + NUL */

/* ---- configurations ---- */

typedef struct tw_tune_param {
    char name[TW_TUNE_NAME_MAX];
    int64_t value;
} tw_tune_param;

/* One candidate: the template that renders it and its parameters in the space's declared order.
 * Plain data: copy it by value. */
typedef struct tw_tune_config {
    char kernel[TW_TUNE_KERNEL_MAX];
    size_t n;
    tw_tune_param p[TW_TUNE_MAX_PARAMS];
} tw_tune_config;

/* Empties c and names its template (letters, digits and _, shorter than TW_TUNE_KERNEL_MAX).
 * Returns 0, or -1 for a bad name (c is then empty with no kernel). */
int tw_tune_config_init(tw_tune_config *c, const char *kernel);

/* Sets parameter name to v: replaces its value when present, else appends it. Returns 0, or -1
 * for a bad name (empty, too long, not letters/digits/_, leading digit) or a full config. */
int tw_tune_config_set(tw_tune_config *c, const char *name, int64_t v);

/* 1 and *v = the value of name when c has it, else 0 (*v untouched). */
int tw_tune_config_get(const tw_tune_config *c, const char *name, int64_t *v);

/* The value of name, or dflt when c lacks it. */
int64_t tw_tune_config_value(const tw_tune_config *c, const char *name, int64_t dflt);

/* The canonical string "<kernel>:<NAME>=<value>,<NAME>=<value>..." in parameter order (decimal
 * values, no spaces), e.g. "gate_pack_simt:BM=32,THREADS=256". It is the identity of a config
 * in cache keys, tuning records, reports and tie-breaks. Writes at most len bytes (always
 * NUL-terminated when len > 0) and returns the full length, like snprintf. */
size_t tw_tune_config_canon(const tw_tune_config *c, char *buf, size_t len);

/* Parses a canonical string back (strict: exactly the grammar above, names valid, values
 * decimal int64 without leading '+' or leading zeros, no duplicate names). TWELL_OK, or
 * TWELL_ERR_CORRUPT with *out emptied. */
twell_status tw_tune_config_parse(const char *s, tw_tune_config *out);

/* 1 when a and b have the same kernel and the same parameters in the same order. */
int tw_tune_config_equal(const tw_tune_config *a, const tw_tune_config *b);

/* Orders configs by their canonical strings (strcmp): the deterministic tie-break. */
int tw_tune_config_cmp(const tw_tune_config *a, const tw_tune_config *b);

/* Fills out[0..cap) with the template parameters of c for shape s: K, N, T, C, dtype ("bf16" |
 * "fp16") followed by c's parameters. Keys and the dtype string are borrowed from c and static
 * storage (valid while c lives). Returns the count, or 0 when cap is too small. */
size_t tw_tune_config_params(const tw_tune_config *c, const twell_shape *s, tw_param *out,
                             size_t cap);

/* ---- the device a space is pruned against ---- */

typedef struct tw_tune_device {
    char name[96];             /* marketing name (cuDeviceGetName; part of tuning keys) */
    char arch[16];             /* NVRTC target: "sm_90a", "sm_80" */
    int cc_major, cc_minor;    /* compute capability */
    int sm_count;              /* part of tuning keys */
    int driver_version;        /* e.g. 12080 (part of tuning keys); 0 when unknown */
    int smem_per_block;        /* max shared memory one block may use after opting in, bytes */
    int smem_per_sm;           /* shared memory per SM, bytes */
    int regs_per_sm;           /* 32-bit registers per SM */
    int max_regs_per_thread;   /* 255 on every architecture we target */
    int max_threads_per_block; /* 1024 */
    int max_cluster;           /* largest portable thread-block cluster (8 on sm_90, 1 before) */
    int l2_bytes;
} tw_tune_device;

/* Fills *out with the nominal limits of a known GPU, for planning without one (`twell tune
 * --dry-run`) and for tests: "h200", "h100", "a100", "l4". Returns 0, or -1 for an unknown name
 * (*out zeroed). The preset's driver_version is 0. */
int tw_tune_device_preset(const char *name, tw_tune_device *out);

/* ---- problems and spaces ---- */

/* What is tuned: an op on a shape for a row count. M is the representative row count, already
 * bucketed with tw_tune_m_bucket (the tuning key holds the bucket, not the caller's M). */
typedef struct tw_tune_problem {
    char op[TW_TUNE_OP_MAX]; /* "gate_pack", "ffn_infer" */
    twell_shape shape;
    size_t M;
} tw_tune_problem;

/* The bucket of M: the smallest power of two ≥ M (1 for M ≤ 1; saturates at 2^62), as
 * tw_m_bucket (runtime/core/m_bucket.h) computes it for plans too. Configs are tuned and stored
 * per bucket, so M = 3000 and M = 4096 share one tuning. */
size_t tw_tune_m_bucket(size_t M);

/* One tuned parameter and the values it may take, in the order candidates are generated. */
typedef struct tw_tune_axis {
    const char *name;
    const int64_t *values;
    size_t n;
} tw_tune_axis;

/* Why a candidate was rejected before compiling. */
typedef enum tw_prune_reason {
    TW_PRUNE_KEPT = 0,
    TW_PRUNE_SHAPE,   /* the shape or M does not divide, or a parameter rule */
    TW_PRUNE_SMEM,    /* shared memory estimate above the device's per-block limit */
    TW_PRUNE_REGS,    /* register estimate above the per-thread or per-SM limit */
    TW_PRUNE_THREADS, /* block larger than the device allows */
    TW_PRUNE_CLUSTER, /* cluster larger than the device allows */
    TW_PRUNE_REASONS
} tw_prune_reason;

/* "kept", "shape", "smem", "regs", "threads", "cluster"; "?" otherwise. */
const char *tw_prune_reason_name(tw_prune_reason r);

/* A candidate space for one op and one kernel template. Every callback is optional (NULL: not
 * checked) and pure: it sees the problem and one config and nothing else. */
typedef struct tw_tune_space {
    const char *op;     /* op it serves */
    const char *kernel; /* template (templates/<kernel>.cu.lua) */
    const char *about;  /* one line for reports */
    size_t naxes;
    tw_tune_axis axes[TW_TUNE_MAX_PARAMS];
    int64_t defaults[TW_TUNE_MAX_PARAMS]; /* the untuned config, one value per axis */
    /* The whole space applies to this problem on this device (architecture, shape class). */
    int (*supports)(const tw_tune_problem *p, const tw_tune_device *d);
    /* Shape and parameter rules (divisibility, tile limits): 0 to keep, else non-zero with a
     * reason in why. */
    int (*check)(const tw_tune_problem *p, const tw_tune_config *c, char *why, size_t n);
    /* Estimates compared with the device. */
    uint64_t (*smem_bytes)(const tw_tune_problem *p, const tw_tune_config *c);
    int (*threads)(const tw_tune_problem *p, const tw_tune_config *c);
    int (*regs_per_thread)(const tw_tune_problem *p, const tw_tune_config *c);
    int (*cluster)(const tw_tune_problem *p, const tw_tune_config *c);
    /* The untuned config of this problem on this device, when it depends on them: one value per
     * axis into values[0..naxes). A value not on its axis means no default is timed for the
     * problem (tw_tune_space_enumerate's *default_index is SIZE_MAX). NULL: defaults[]. */
    void (*default_for)(const tw_tune_problem *p, const tw_tune_device *d, int64_t *values);
} tw_tune_space;

/* The space's untuned configuration (its defaults, in axis order). */
void tw_tune_space_default(const tw_tune_space *s, tw_tune_config *out);

/* The untuned configuration for p on d: default_for's values when the space has it, else its
 * defaults. 0, or -1 when a value default_for gives is not on its axis (*out then holds the
 * defaults). */
int tw_tune_space_default_for(const tw_tune_space *s, const tw_tune_problem *p,
                              const tw_tune_device *d, tw_tune_config *out);

/* Number of configs in the unpruned product (0 for an empty axis; saturates at SIZE_MAX). */
size_t tw_tune_space_size(const tw_tune_space *s);

/* Applies the space's rules and the device limits to one config, in the order shape, threads,
 * cluster, smem, regs; the first that fails is returned and described in why (may be NULL). */
tw_prune_reason tw_tune_prune(const tw_tune_space *s, const tw_tune_problem *p,
                              const tw_tune_device *d, const tw_tune_config *c, char *why,
                              size_t n);

typedef struct tw_prune_stats {
    size_t total; /* configs generated */
    size_t kept;
    size_t by[TW_PRUNE_REASONS]; /* pruned per reason (by[TW_PRUNE_KEPT] == kept) */
} tw_prune_stats;

/* Largest space tw_tune_space_enumerate accepts before pruning. */
#define TW_TUNE_MAX_SPACE ((size_t)1 << 20)

/* Generates the product of the axes (the first axis varies slowest), prunes it, and returns the
 * kept configs in generation order (*out malloc'd, caller frees; NULL when none is kept).
 * *default_index (may be NULL) is the index of the problem's default (tw_tune_space_default_for)
 * among them, or SIZE_MAX when the default was pruned or is not on the axes. stats may be NULL.
 * Errors: TWELL_ERR_INVALID_ARG (a space with no or too many axes, an empty axis, more than
 * TW_TUNE_MAX_SPACE configs, a default not in its axis), TWELL_ERR_NO_MEMORY; outputs NULL/0 on
 * failure. */
twell_status tw_tune_space_enumerate(const tw_tune_space *s, const tw_tune_problem *p,
                                     const tw_tune_device *d, tw_tune_config **out, size_t *n,
                                     size_t *default_index, tw_prune_stats *stats);

/* 1 when c belongs to s for this problem and device: same kernel, the space's parameter names in
 * order, every value in its axis, and not pruned. Used to reject a stored config that a newer
 * space (or another device) no longer allows. */
int tw_tune_space_accepts(const tw_tune_space *s, const tw_tune_problem *p, const tw_tune_device *d,
                          const tw_tune_config *c);

/* The spaces themselves belong to the ops (runtime/ops/<op>/<op>_space.c); the engine gets
 * them through a tw_tune_op (gpu_tune.h) and the API level lists them (tune_registry.h). */

#endif /* TWELL_CANDIDATES_H */
