/*
 * record_json.c — the JSON form of bench_record (the files in bench/results): one array of flat
 * objects, fields in a fixed order. Apart from the tool so that tests check the schema without a
 * GPU.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>

/* Negative and non-finite values mean "not measured" (bench_record_init's -1): null. */
static void bench_json_num(FILE *f, const char *key, double v) {
    if (v < 0.0 || !isfinite(v))
        fprintf(f, "    \"%s\": null,\n", key);
    else
        fprintf(f, "    \"%s\": %.6g,\n", key, v);
}

/* Strings we write come from our own tables and the device name: escape quotes and backslashes
 * anyway so the file always parses (control characters are dropped). */
static void bench_json_str(FILE *f, const char *key, const char *v) {
    fprintf(f, "    \"%s\": \"", key);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', f);
        if ((unsigned char)*p >= 0x20)
            fputc(*p, f);
    }
    fprintf(f, "\",\n");
}

int bench_records_write(FILE *f, const bench_record *recs, size_t n) {
    fprintf(f, "[\n");
    for (size_t i = 0; i < n; i++) {
        const bench_record *r = &recs[i];
        fprintf(f, "  {\n");
        bench_json_str(f, "op", r->op);
        bench_json_str(f, "dtype", r->dtype);
        fprintf(f,
                "    \"M\": %zu,\n    \"K\": %u,\n    \"N\": %u,\n    \"T\": %u,\n    \"C\": %u,\n",
                r->M, r->K, r->N, r->T, r->C);
        bench_json_str(f, "distribution", r->distribution);
        bench_json_num(f, "nnz_target", r->nnz_target);
        bench_json_num(f, "nnz_mean", r->nnz_mean);
        bench_json_str(f, "variant", r->variant);
        bench_json_str(f, "requested_path", r->requested_path);
        bench_json_str(f, "path", r->path);
        fprintf(f, "    \"gated\": %s,\n", r->gated ? "true" : "false");
        fprintf(f, "    \"validate_packed\": %s,\n", r->validate_packed ? "true" : "false");
        bench_json_num(f, "ours_ms", r->ours_ms);
        bench_json_num(f, "ours_min_ms", r->ours_min_ms);
        bench_json_num(f, "ours_max_ms", r->ours_max_ms);
        bench_json_str(f, "baseline", r->baseline);
        bench_json_num(f, "baseline_ms", r->baseline_ms);
        bench_json_num(f, "baseline_min_ms", r->baseline_min_ms);
        bench_json_num(f, "baseline_max_ms", r->baseline_max_ms);
        bench_json_num(f, "ratio", r->ratio);
        fprintf(f, "    \"reps\": %d,\n", r->reps);
        bench_json_num(f, "max_rel_err", r->max_rel_err);
        fprintf(f, "    \"checked_rows\": %zu,\n", r->checked_rows);
        fprintf(f, "    \"correct\": %s,\n", r->correct ? "true" : "false");
        bench_json_str(f, "check", r->check_note);
        bench_json_str(f, "gpu", r->gpu);
        bench_json_str(f, "commit", r->commit);
        fprintf(f, "    \"date\": \"%s\"\n  }%s\n", r->date, i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
    return ferror(f) ? -1 : 0;
}
