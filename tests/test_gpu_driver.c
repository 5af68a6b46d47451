/* test_gpu_driver.c — the CUDA plumbing on a real device: device description, memory helpers,
 * pointer kinds, driver error mapping, events and streams, a launch of the SIMT gate-pack module
 * loaded by hand, and a chain of programmatic dependent launches (PDL). Exits 77 (skipped) when no
 * CUDA device is usable. labels: gpu */
#include "cpu_ref.h"
#include "cuda_driver.h"
#include "half.h"
#include "jit.h"
#include "nvrtc.h"
#include "pack_check.h"
#include "plan_cuda.h"
#include "synth.h"
#include "twellrt.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tw_gpu.h"

static twell_ctx *gd_ctx;

static void test_gpu_driver_device_description(void **state) {
    (void)state;
    const tw_cuda *d = gd_ctx->cuda;
    assert_non_null(d);
    assert_true(d->sm_count > 0);
    assert_true(d->l2_bytes > 0);
    char want[16];
    if (d->cc_major == 9 && d->cc_minor == 0)
        snprintf(want, sizeof want, "sm_90a");
    else
        snprintf(want, sizeof want, "sm_%d%d", d->cc_major, d->cc_minor);
    assert_string_equal(d->arch, want);
    char name[160];
    snprintf(name, sizeof name, "cuda:0 %s (%s, %d SMs)", d->name, d->arch, d->sm_count);
    assert_string_equal(twell_ctx_device_name(gd_ctx), name);
    printf("# %s, driver %d, %zu MiB, L2 %d KiB, smem opt-in %d KiB\n", name, d->driver_version,
           d->total_mem >> 20, d->l2_bytes >> 10, d->smem_optin >> 10);
}

static void test_gpu_driver_memory_roundtrip(void **state) {
    (void)state;
    enum { WORDS = 1000003 }; /* odd size: no accidental alignment to anything */
    uint32_t *h = malloc(WORDS * sizeof *h), *back = malloc(WORDS * sizeof *back);
    assert_non_null(h);
    assert_non_null(back);
    for (uint32_t i = 0; i < WORDS; i++)
        h[i] = i * 2654435761u;
    void *d1 = NULL, *d2 = NULL;
    assert_int_equal(tw_cuda_malloc(gd_ctx, WORDS * 4u, &d1), TWELL_OK);
    assert_int_equal(tw_cuda_malloc(gd_ctx, WORDS * 4u, &d2), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_htod(gd_ctx, d1, h, WORDS * 4u), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_dtod(gd_ctx, d2, d1, WORDS * 4u), TWELL_OK);
    /* words [10, 20) become the poison, bytes [400, 403) become 0x11 */
    assert_int_equal(tw_cuda_memset_d32(gd_ctx, (uint32_t *)d2 + 10, 0xA5A5A5A5u, 10, NULL),
                     TWELL_OK);
    assert_int_equal(tw_cuda_memset_d8(gd_ctx, (char *)d2 + 400, 0x11, 3, NULL), TWELL_OK);
    assert_int_equal(tw_cuda_synchronize(gd_ctx), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_dtoh(gd_ctx, back, d2, WORDS * 4u), TWELL_OK);
    for (uint32_t i = 10; i < 20; i++)
        h[i] = 0xA5A5A5A5u;
    memset((char *)h + 400, 0x11, 3);
    for (uint32_t i = 0; i < WORDS; i++)
        if (back[i] != h[i])
            fail_msg("word %u: got %08x want %08x", i, back[i], h[i]);
    size_t fr = 0, tot = 0;
    assert_int_equal(tw_cuda_mem_info(gd_ctx, &fr, &tot), TWELL_OK);
    assert_true(fr > 0 && fr <= tot);
    tw_cuda_free(gd_ctx, d1);
    tw_cuda_free(gd_ctx, d2);
    free(h);
    free(back);
}

static void test_gpu_driver_pointer_kinds(void **state) {
    (void)state;
    void *d = NULL;
    assert_int_equal(tw_cuda_malloc(gd_ctx, 4096, &d), TWELL_OK);
    int on_stack = 0;
    int *on_heap = malloc(64);
    assert_int_equal(tw_cuda_pointer_kind(gd_ctx, d), 1);
    assert_int_equal(tw_cuda_pointer_kind(gd_ctx, (char *)d + 100), 1);
    assert_int_equal(tw_cuda_pointer_kind(gd_ctx, on_heap), 0);
    assert_int_equal(tw_cuda_pointer_kind(gd_ctx, &on_stack), 0);
    assert_int_equal(tw_cuda_pointer_kind(gd_ctx, NULL), -1);

    /* The op entry points reject host memory on the CUDA backend, naming the argument. */
    twell_shape s;
    twell_shape_init(&s, 64, 256);
    twell_plan *plan = NULL;
    assert_int_equal(twell_plan_create(gd_ctx, &s, &plan), TWELL_OK);
    assert_int_equal(twell_gate_pack(plan, 1, on_heap, d, (uint32_t *)d + 512, NULL),
                     TWELL_ERR_INVALID_ARG);
    if (!strstr(twell_ctx_errmsg(gd_ctx), "x is host memory"))
        fail_msg("message \"%s\"", twell_ctx_errmsg(gd_ctx));
    twell_plan_destroy(plan);
    free(on_heap);
    tw_cuda_free(gd_ctx, d);
}

static void test_gpu_driver_error_mapping(void **state) {
    (void)state;
    tw_cu_scope sc;
    assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
    /* an ELF header with garbage behind it: the driver refuses the image */
    unsigned char junk[256];
    memset(junk, 0x5c, sizeof junk);
    memcpy(junk,
           "\x7f"
           "ELF\x02\x01\x01",
           7);
    tw_CUmodule mod = NULL;
    twell_status st = tw_cu_module_load(gd_ctx, junk, &mod);
    tw_cu_leave(gd_ctx, &sc);
    assert_int_equal(st, TWELL_ERR_CUDA);
    assert_null(mod);
    const char *m = twell_ctx_errmsg(gd_ctx);
    printf("# bad image: %s\n", m);
    if (strncmp(m, "cuModuleLoadData: CUDA_ERROR_", 29) != 0 || !strstr(m, " ("))
        fail_msg("message \"%s\"", m);

    /* far more memory than any device has */
    void *d = (void *)&sc;
    st = tw_cuda_malloc(gd_ctx, (size_t)1 << 50, &d);
    assert_int_equal(st, TWELL_ERR_NO_MEMORY);
    assert_null(d);
    if (!strstr(twell_ctx_errmsg(gd_ctx), "CUDA_ERROR_OUT_OF_MEMORY (2)"))
        fail_msg("message \"%s\"", twell_ctx_errmsg(gd_ctx));
    /* the context still works */
    assert_int_equal(tw_cuda_malloc(gd_ctx, 256, &d), TWELL_OK);
    tw_cuda_free(gd_ctx, d);
    assert_int_equal(tw_cuda_synchronize(gd_ctx), TWELL_OK);
}

static void test_gpu_driver_events_and_streams(void **state) {
    (void)state;
    twell_stream s = NULL;
    assert_int_equal(tw_cuda_stream_create(gd_ctx, &s), TWELL_OK);
    tw_cuda_event a = NULL, b = NULL;
    assert_int_equal(tw_cuda_event_create(gd_ctx, &a), TWELL_OK);
    assert_int_equal(tw_cuda_event_create(gd_ctx, &b), TWELL_OK);
    void *d = NULL;
    size_t bytes = (size_t)256 << 20;
    assert_int_equal(tw_cuda_malloc(gd_ctx, bytes, &d), TWELL_OK);
    assert_int_equal(tw_cuda_event_record(gd_ctx, a, s), TWELL_OK);
    assert_int_equal(tw_cuda_memset_d32(gd_ctx, d, 7u, bytes / 4, s), TWELL_OK);
    assert_int_equal(tw_cuda_event_record(gd_ctx, b, s), TWELL_OK);
    float ms = -1.0f;
    assert_int_equal(tw_cuda_event_elapsed(gd_ctx, a, b, &ms), TWELL_OK);
    printf("# memset of 256 MiB: %.3f ms (%.0f GB/s)\n", (double)ms,
           (double)bytes / ((double)ms * 1e6));
    assert_true(ms > 0.0f && ms < 1000.0f);
    assert_int_equal(tw_cuda_stream_synchronize(gd_ctx, s), TWELL_OK);
    tw_cuda_free(gd_ctx, d);
    tw_cuda_event_destroy(gd_ctx, a);
    tw_cuda_event_destroy(gd_ctx, b);
    tw_cuda_stream_destroy(gd_ctx, s);
}

/* The SIMT template compiled, loaded and launched through the driver wrappers directly (the
 * fixed ABI: grid (N/T, ceil(M/BM)), block THREADS, args x, w, packed, M). */
static void test_gpu_driver_simt_module_launch(void **state) {
    (void)state;
    const uint32_t K = 64, N = 256, M = 37;
    twell_shape s;
    twell_shape_init(&s, K, N);
    tw_param params[] = {{"K", NULL, K},        {"N", NULL, N},       {"T", NULL, 256},
                         {"C", NULL, 8},        {"dtype", "bf16", 0}, {"BM", NULL, 32},
                         {"THREADS", NULL, 256}};
    tw_cubin cubin;
    twell_status st = tw_jit_cubin(gd_ctx, "gate_pack_simt", params, 7, gd_ctx->cuda->arch, &cubin);
    if (st != TWELL_OK)
        fail_msg("tw_jit_cubin: %s", twell_ctx_errmsg(gd_ctx));
    tw_synth_params sp = tw_synth_params_default();
    sp.M = M, sp.K = K, sp.N = N, sp.gated = 0, sp.nnz = 20;
    tw_synth_ffn *f = NULL;
    assert_int_equal(tw_synth_create(gd_ctx->pool, &sp, &f), TWELL_OK);
    size_t words = (size_t)M * N / 8;
    uint32_t *ref = malloc(words * 4), *got = malloc(words * 4);
    assert_int_equal(tw_gate_pack_ref(gd_ctx->pool, &s, M, f->x, f->wu, ref), TWELL_OK);

    void *dx = NULL, *dw = NULL, *dp = NULL;
    assert_int_equal(tw_cuda_malloc(gd_ctx, (size_t)M * K * 2, &dx), TWELL_OK);
    assert_int_equal(tw_cuda_malloc(gd_ctx, (size_t)N * K * 2, &dw), TWELL_OK);
    assert_int_equal(tw_cuda_malloc(gd_ctx, words * 4, &dp), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_htod(gd_ctx, dx, f->x, (size_t)M * K * 2), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_htod(gd_ctx, dw, f->wu, (size_t)N * K * 2), TWELL_OK);
    assert_int_equal(tw_cuda_memset_d32(gd_ctx, dp, 0xA5A5A5A5u, words, NULL), TWELL_OK);

    tw_cu_scope sc;
    assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
    tw_CUmodule mod = NULL;
    tw_CUfunction fn = NULL;
    assert_int_equal(tw_cu_module_load(gd_ctx, cubin.data, &mod), TWELL_OK);
    assert_int_equal(tw_cu_module_function(gd_ctx, mod, "twell_gate_pack_simt", &fn), TWELL_OK);
    assert_int_equal(tw_cu_module_function(gd_ctx, mod, "no_such_kernel", &fn), TWELL_ERR_CUDA);
    assert_non_null(strstr(twell_ctx_errmsg(gd_ctx), "no_such_kernel"));
    assert_int_equal(tw_cu_module_function(gd_ctx, mod, "twell_gate_pack_simt", &fn), TWELL_OK);
    int m = (int)M;
    void *args[] = {&dx, &dw, &dp, &m};
    tw_cu_launch_cfg cfg = {{N / 256, (M + 31) / 32, 1}, {256, 1, 1}, {0, 0, 0}, 0, 0};
    assert_int_equal(tw_cu_launch(gd_ctx, fn, &cfg, NULL, args), TWELL_OK);
    tw_cu_leave(gd_ctx, &sc);
    assert_int_equal(tw_cuda_synchronize(gd_ctx), TWELL_OK);
    assert_int_equal(tw_cuda_memcpy_dtoh(gd_ctx, got, dp, words * 4), TWELL_OK);

    size_t *rows = malloc(M * sizeof *rows);
    for (size_t i = 0; i < M; i++)
        rows[i] = i;
    tw_pack_check r;
    tw_pack_check_rows(&s, f->x, f->wu, rows, M, ref, got, &r);
    printf("# simt by hand: %zu/%zu tiles exact, %zu tolerated, worst %u ulp\n", r.tiles_exact,
           r.tiles, r.tiles_tolerated, r.worst_ulp);
    if (r.tiles_bad)
        fail_msg("%zu bad tiles, first: %s", r.tiles_bad, r.first_bad);

    assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
    tw_cu_module_unload(mod);
    tw_cu_leave(gd_ctx, &sc);
    tw_cuda_free(gd_ctx, dx);
    tw_cuda_free(gd_ctx, dw);
    tw_cuda_free(gd_ctx, dp);
    tw_cubin_free(&cubin);
    tw_synth_destroy(f);
    free(ref);
    free(got);
    free(rows);
}

/* A chain of dependent kernels launched with PDL on a created stream, ping-ponging between two
 * buffers: kernel i reads what kernel i-1 wrote (RAW) and overwrites what kernel i-1 read (WAR).
 * Each follows the PDL rule (launch_dependents, then wait, before any global access) and is slow
 * enough for the next launch to be scheduled while it runs. The result must equal the serial
 * computation exactly, with PDL on (when the device allows it) and off. */
static const char gd_chain_src[] =
    "extern \"C\" __global__ void chain(const unsigned *in, unsigned *out, int n, unsigned k) {\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
    "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "#endif\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) "
    "{\n"
    "        unsigned v = in[i];\n"
    "        for (int r = 0; r < 256; r++) v = v * 1664525u + 1013904223u + k;\n"
    "        out[i] = v;\n"
    "    }\n"
    "}\n";

static unsigned gd_chain_ref(unsigned v, unsigned k) {
    for (int r = 0; r < 256; r++)
        v = v * 1664525u + 1013904223u + k;
    return v;
}

static void test_gpu_driver_pdl_chain(void **state) {
    (void)state;
    enum { N = 1 << 20, STEPS = 24 };
    char arch[40];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", gd_ctx->cuda->arch);
    const char *opts[] = {arch, "-default-device"};
    void *cubin = NULL;
    size_t size = 0;
    if (tw_nvrtc_compile(gd_ctx, gd_chain_src, "pdl_chain.cu", opts, 2, &cubin, &size, NULL) !=
        TWELL_OK)
        fail_msg("tw_nvrtc_compile: %s", twell_ctx_errmsg(gd_ctx));
    printf("# PDL %s on this device (cc %d.%d, %s by the context's options)\n",
           gd_ctx->cuda->pdl ? "used" : "not used", gd_ctx->cuda->cc_major, gd_ctx->cuda->cc_minor,
           gd_ctx->pdl ? "wanted" : "turned off");
    assert_int_equal(gd_ctx->cuda->pdl, gd_ctx->pdl && tw_cu_pdl_supported(gd_ctx->cuda->cc_major));
    uint32_t *h = malloc(N * 4u), *ref = malloc(N * 4u);
    assert_non_null(h);
    assert_non_null(ref);
    for (uint32_t i = 0; i < N; i++)
        ref[i] = i * 2654435761u;
    void *buf[2] = {NULL, NULL};
    assert_int_equal(tw_cuda_malloc(gd_ctx, N * 4u, &buf[0]), TWELL_OK);
    assert_int_equal(tw_cuda_malloc(gd_ctx, N * 4u, &buf[1]), TWELL_OK);
    twell_stream s = NULL;
    assert_int_equal(tw_cuda_stream_create(gd_ctx, &s), TWELL_OK);
    tw_cu_scope sc;
    assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
    tw_CUmodule mod = NULL;
    tw_CUfunction fn = NULL;
    assert_int_equal(tw_cu_module_load(gd_ctx, cubin, &mod), TWELL_OK);
    assert_int_equal(tw_cu_module_function(gd_ctx, mod, "chain", &fn), TWELL_OK);
    tw_cu_leave(gd_ctx, &sc);
    for (unsigned pdl = 0; pdl < 2; pdl++) {
        assert_int_equal(tw_cuda_memcpy_htod(gd_ctx, buf[0], ref, N * 4u), TWELL_OK);
        assert_int_equal(tw_cuda_memset_d32(gd_ctx, buf[1], 0xdeadbeefu, N, s), TWELL_OK);
        assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
        int n = N;
        for (unsigned k = 0; k < STEPS; k++) {
            void *args[] = {&buf[k & 1u], &buf[(k + 1u) & 1u], &n, &k};
            /* alternate grid sizes: a small grid's blocks all start at once, a large one's not */
            tw_cu_launch_cfg cfg = {{k & 1u ? 64u : 1024u, 1, 1}, {256, 1, 1}, {0, 0, 0}, 0, pdl};
            assert_int_equal(tw_cu_launch(gd_ctx, fn, &cfg, s, args), TWELL_OK);
        }
        tw_cu_leave(gd_ctx, &sc);
        assert_int_equal(tw_cuda_stream_synchronize(gd_ctx, s), TWELL_OK);
        assert_int_equal(tw_cuda_memcpy_dtoh(gd_ctx, h, buf[STEPS & 1u], N * 4u), TWELL_OK);
        size_t bad = 0;
        for (uint32_t i = 0; i < N; i++) {
            uint32_t v = i * 2654435761u;
            for (unsigned k = 0; k < STEPS; k++)
                v = gd_chain_ref(v, k);
            bad += h[i] != v;
        }
        printf("# chain of %d launches, pdl=%u: %zu of %d words wrong\n", STEPS, pdl, bad, N);
        assert_int_equal(bad, 0);
    }
    assert_int_equal(tw_cu_enter(gd_ctx, &sc), TWELL_OK);
    tw_cu_module_unload(mod);
    tw_cu_leave(gd_ctx, &sc);
    tw_cuda_stream_destroy(gd_ctx, s);
    tw_cuda_free(gd_ctx, buf[0]);
    tw_cuda_free(gd_ctx, buf[1]);
    free(cubin);
    free(h);
    free(ref);
}

int main(void) {
    gd_ctx = tw_gpu_open_or_skip("test_gpu_driver");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_driver_device_description),
        cmocka_unit_test(test_gpu_driver_memory_roundtrip),
        cmocka_unit_test(test_gpu_driver_pointer_kinds),
        cmocka_unit_test(test_gpu_driver_error_mapping),
        cmocka_unit_test(test_gpu_driver_events_and_streams),
        cmocka_unit_test(test_gpu_driver_simt_module_launch),
        cmocka_unit_test(test_gpu_driver_pdl_chain),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    twell_ctx_destroy(gd_ctx);
    return rc;
}
