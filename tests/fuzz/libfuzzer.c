/*
 * libfuzzer.c — a libFuzzer harness for one target of tw_fuzz.h (TW_FUZZ_TARGET names it), built
 * as fuzz_<target> with -DTWELL_FUZZ=ON (clang; see README "Fuzzing"). The target's fixup runs
 * on a copy of each input, its random value a hash of the input, as the seeded driver applies it.
 */
#include "tw_fuzz.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef TW_FUZZ_TARGET
#error "TW_FUZZ_TARGET must name the target (\"render\", \"packed\", ...)"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const tw_fuzz_target *tw_lf_target;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tw_lf_target = tw_fuzz_find(TW_FUZZ_TARGET);
    if (!tw_lf_target || (tw_lf_target->init && tw_lf_target->init() != 0)) {
        fprintf(stderr, "fuzz_%s: no such target, or its init failed\n", TW_FUZZ_TARGET);
        exit(1);
    }
    tw_fuzz_context(tw_lf_target->name, "the input libFuzzer reports (crash-<sha1>)");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tw_lf_target->fixup)
        return tw_lf_target->run(data, size);
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the input: the fixup's choices */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    tw_fuzz_buf b = {0};
    tw_fuzz_buf_add(&b, data, size);
    tw_lf_target->fixup(&b, h);
    int rc = tw_lf_target->run(b.p, b.n);
    tw_fuzz_buf_free(&b);
    return rc;
}
