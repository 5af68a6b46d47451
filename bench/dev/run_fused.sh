#!/bin/sh
# Device script for the fused inference kernels (issue 5): builds only what it needs, then runs
# the steps named in $STEPS (default "test breakdown prof bench") against the library itself
# (the template templates/ffn_fused.cu.lua is the kernels' only source). Run from the repo root
# on the GPU machine, carrying .deps:   TWELL_COMMIT=<sha> STEPS="..." sh bench/dev/run_fused.sh
#   test       test_gpu_ffn_infer + test_gpu_ffn_dense (CPU reference, skewed, determinism)
#   sanitize   memcheck + racecheck of both on their small cases
#   breakdown  ncu per-kernel durations of the sparse path (M=16384, 29 nnz, uniform and skewed)
#   prof       ncu speed-of-light, stall reasons and shared-memory wavefronts of phase A and B
#   bench      twell bench with $BENCH_ARGS (default: sparse, M=16384, nnz 29, uniform)
#   variants   fused-only time per tile override (TWELL_FFN_TILE): PF, phase A and B warps/groups;
#              the best goes to $OUT/best.txt and, as $BEST, to the steps after it
#   testbest   test_gpu_ffn_infer with TWELL_FFN_TILE=$BEST
#   ilcheck    test_gpu_ffn_infer with IL=1, fused-only time of IL=0 and IL=1
#   final      twell bench --path auto, M 4096/16384/65536 x nnz 29/56/110/280 uniform and
#              16384/29 skewed, 20 reps, JSON into $OUT
#   cross      sparse vs dense at M 4096/16384, nnz $CROSS_NNZ (AUTO threshold), with $BEST
#   sass       SASS of phase A/B and the reduce per XV in $XVP (nvcc + cuobjdump) -> sass.txt
#   xvtest     test_gpu_ffn_infer with TWELL_FFN_TILE=XV=$XVT
#   xvvar      fused-only ms per XV in $XVS; xvncu: ncu per-kernel us per XV in $XVP
#   xvfinal    session 3 check: tests + sanitizers (parallel), ncu and bench per XV in $XVOLD $XVNEW
#   srcctr     ncu SourceCounters (executed instructions per SASS line) per XV in $XVP
#   ovfcheck   XV $OVB (default 75: XV bit 64, the larger-warp-tile ovf_gu / ovf_down) against
#              $OVA (11): test_gpu_ffn_infer under each + memcheck/racecheck of its small cases
#              under $OVB (all at once), then twell bench --path sparse M 4096/16384/65536 skewed
#              29 nnz per XV, alternating, twice (JSON in $OUT/ovN), after ncu us of ovf_gu /
#              ovf_down per XV at 16384 skewed (OVNCU=0: skipped); a table last (~240 s)
#   gtcmp      GT=8 vs GT=16 (tokens per list group): test_gpu_ffn_infer under each, twell bench
#              --path sparse M 4096/16384 x nnz 29/56 uniform + 16384/29 skewed, ncu per kernel
# Logs go to $OUT (8 files come back at most); a summary is printed.
set -u
OUT=${OUT:-/tmp/fused-out}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
t0=$(date +%s)
s0=$t0
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j 16 --target twell test_gpu_ffn_infer test_gpu_ffn_dense >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/build.log"
echo "== build $(($(date +%s) - s0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
export TWELL_CACHE_DIR=$PWD/$B/fused-cache
T=$B/twell
S="--K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --reps 3 --out /tmp/ncu-json"
KRE='regex:twell_ffn_'
for step in ${STEPS:-test breakdown prof bench}; do
    s0=$(date +%s)
    case $step in
    test)
        (cd $B && ctest --output-on-failure --timeout 300 -R "test_gpu_ffn_(infer|dense)") \
            >"$OUT/test.log" 2>&1
        grep -E "tests passed|Passed|Failed|\*\*\*|Skipped" "$OUT/test.log" | tail -8
        ;;
    sanitize)
        OUT="$OUT" SAN_TESTS="test_gpu_ffn_infer test_gpu_ffn_dense" timeout ${SAN_TIMEOUT:-240} \
            sh scripts/device.sh sanitize 2>&1 | grep -vE "^$" | tail -8
        ;;
    breakdown)
        [ -n "${BEST:-}" ] && export TWELL_FFN_TILE=$BEST
        for d in ${BD_DISTS:-uniform skewed}; do
            echo "-- per-kernel ncu durations, M=16384, 29 nnz, $d (us; L2 flushed before each)"
            timeout 200 ncu --clock-control none -k "$KRE" --metrics gpu__time_duration.sum \
                --print-summary per-kernel $T bench --op ffn_infer --path sparse --M 16384 \
                --nnz 29 --dist $d $S >"$OUT/ncu_breakdown_$d.log" 2>&1
            awk '/twell_ffn_/{k=$1} /gpu__time_duration.sum/{printf "%-22s %s %s %s %s\n", k, $2, $3, $4, $5}' \
                "$OUT/ncu_breakdown_$d.log"
        done
        ;;
    prof)
        [ -n "${BEST:-}" ] && export TWELL_FFN_TILE=$BEST
        echo "-- phase A and B (uniform), ovf_gu and ovf_down (skewed), M=16384, 29 nnz"
        M="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed"
        M="$M,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed"
        M="$M,lts__t_bytes.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
        M="$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
        M="$M,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
        M="$M,smsp__warps_active.avg.per_cycle_active"
        for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait \
            not_selected selected lg_throttle dispatch_stall no_instruction branch_resolving \
            membar drain imc_miss tex_throttle sleeping misc; do
            M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
        done
        timeout 200 ncu --clock-control none -k "regex:twell_ffn_phase_(a|b)" -c 2 --metrics "$M" \
            $T bench --op ffn_infer --path sparse --M 16384 --nnz 29 --dist uniform $S \
            >"$OUT/ncu_prof.log" 2>&1
        timeout 200 ncu --clock-control none -k "regex:twell_ffn_ovf_(gu|down)" -c 2 --metrics "$M" \
            $T bench --op ffn_infer --path sparse --M 16384 --nnz 29 --dist skewed $S \
            >>"$OUT/ncu_prof.log" 2>&1
        grep -E "twell_ffn_(phase|ovf)|gpu__|sm__|l1tex__|lts__|smsp__" "$OUT/ncu_prof.log" |
            sed -e 's/smsp__average_warps_issue_stalled_/stall_/' -e 's/_per_issue_active.ratio//' |
            awk '{printf "%s %s %s\n", $1, $(NF-1), $NF}' | cut -c1-110
        ;;
    bench)
        timeout 240 $T bench --out "$OUT" --op ffn_infer ${BENCH_ARGS:---path sparse --M 16384 --nnz 29} \
            >"$OUT/bench.log" 2>&1
        echo "bench rc=$?"
        grep -vE "^#|^$" "$OUT/bench.log" | tail -40 | cut -c1-200
        ;;
    variants)
        # fused-only ms (uniform, M=16384, 29 nnz) per tile override; A settings with B's default,
        # then B settings with A's default, then the best of each together -> $BEST for later steps
        vms() { # prints the fused_only uniform ms of TWELL_FFN_TILE=$1
            TWELL_FFN_TILE=$1 timeout 60 $T bench --out /tmp/var --op ffn_infer --path sparse \
                --M 16384 --nnz 29 --dist uniform --reps 20 2>&1 |
                awk '$1 == "ffn_fused_only" && $8 == "uniform" {print $12}'
        }
        pick() { # best of the settings given: prints "setting ms"
            b=""; bm=99
            for v in "$@"; do
                ms=$(vms "$v"); echo "   $v: ${ms:-FAIL}" >&2
                [ -n "$ms" ] && awk -v a="$ms" -v c="$bm" 'BEGIN{exit !(a < c)}' && { b=$v; bm=$ms; }
            done
            echo "$b $bm"
        }
        set -- $(pick "PF=0" "PF=1"); echo "-- PF: best $1 ($2 ms)"
        set -- $(pick "NWA=16,GPWA=8" ${VAR_A:-"NWA=24,GPWA=4" "NWA=32,GPWA=2" "NWA=32,GPWA=4" "NWA=24,GPWA=6"})
        echo "-- phase A: best $1 ($2 ms)"; BA=$1
        set -- $(pick "NWB=16,GPWB=4" ${VAR_B:-"NWB=24,GPWB=2" "NWB=32,GPWB=2" "NWB=32,GPWB=1" "NWB=24,GPWB=1"})
        echo "-- phase B: best $1 ($2 ms)"; BB=$1
        set -- $(pick "PF=1" "$BA,$BB"); echo "-- together: best $1 ($2 ms)"
        BEST=$1
        echo "$BEST" >"$OUT/best.txt"
        ;;
    ilcheck)
        # IL (phase B pairs of groups, default 0): exactness with IL=1 and fused-only time of both
        echo "-- test_gpu_ffn_infer with TWELL_FFN_TILE=IL=1"
        (cd $B && TWELL_FFN_TILE=IL=1 ctest --output-on-failure --timeout 300 -R "test_gpu_ffn_infer") \
            >"$OUT/test_il.log" 2>&1
        grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/test_il.log" | tail -4
        for v in IL=0 IL=1 IL=0 IL=1; do
            TWELL_FFN_TILE=$v timeout 60 $T bench --out /tmp/var --op ffn_infer --path sparse \
                --M 16384 --nnz 29 --dist uniform,skewed --reps 20 2>&1 |
                awk -v v=$v '$1 == "ffn_fused_only" {print "   " v, $8, $12 " ms"}'
        done
        ;;
    testbest)
        [ -n "${BEST:-}" ] || BEST=$(cat "$OUT/best.txt" 2>/dev/null)
        echo "-- test_gpu_ffn_infer with TWELL_FFN_TILE=$BEST"
        (cd $B && TWELL_FFN_TILE=$BEST ctest --output-on-failure --timeout 300 -R "test_gpu_ffn_infer") \
            >"$OUT/testbest.log" 2>&1
        grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/testbest.log" | tail -4
        ;;
    cross)
        # the sparse/dense crossover (AUTO threshold) with the best tile
        [ -n "${BEST:-}" ] || BEST=$(cat "$OUT/best.txt" 2>/dev/null)
        for pth in sparse dense; do
            TWELL_FFN_TILE=$BEST timeout 150 $T bench --out /tmp/cross --op ffn_infer --path $pth \
                --M 4096,16384 --nnz ${CROSS_NNZ:-56,70,85,110} --dist uniform --reps 20 2>&1 |
                awk -v p=$pth '$1 == "ffn_infer" {print p, $3, $9, $10, $12, $13, $14}'
        done | sort -k2,2n -k3,3n -k1,1 >"$OUT/cross.log"
        echo "path M nnz nnz_avg ours_ms cublas_ms ratio"; cat "$OUT/cross.log"
        ;;
    final)
        # the issue's table: AUTO at the shape of record, uniform and skewed (JSON into $OUT)
        for a in "--M 4096,16384,65536 --nnz 29,56,110,280 --dist uniform" \
            "--M 16384 --nnz 29 --dist skewed"; do
            timeout 200 $T bench --out "$OUT" --op ffn_infer --path auto --reps 20 $a \
                >>"$OUT/bench.log" 2>&1
            echo "bench rc=$?"
        done
        grep -E "^op|^ffn" "$OUT/bench.log" | cut -c1-200
        ;;
    gtcmp)
        # GT (tokens per list group) 8 vs 16, most important first, each part skipped when less
        # than its need is left of $GT_BUDGET s (from the script's start): twell bench --path
        # sparse per GT (uniform JSON in $OUT/gtN; skewed 16384/29 in the log); test_gpu_ffn_infer
        # under each default, both at once (the test also forces the other GT); memcheck and
        # racecheck of `test_gpu_ffn_infer small` (default GT 8 plus the forced GT 16); ncu per
        # kernel at 16384/29 uniform
        left() { echo $((${GT_BUDGET:-400} - $(date +%s) + t0)); }
        for gt in ${GTS:-8 16}; do
            mkdir -p "$OUT/gt$gt"
            TWELL_FFN_TILE=GT=$gt timeout 80 $T bench --out "$OUT/gt$gt" --op ffn_infer --path sparse \
                --M 4096,16384 --nnz 29,56 --dist uniform --reps 20 >"$OUT/bench_gt$gt.log" 2>&1
            echo "-- bench GT=$gt (rc $?, $(left) s left)"
            grep -E "^op|^ffn" "$OUT/bench_gt$gt.log" | cut -c1-160
        done
        for gt in ${GTS:-8 16}; do
            [ "$(left)" -gt 40 ] || break
            TWELL_FFN_TILE=GT=$gt timeout 40 $T bench --out /tmp/gtskew$gt --op ffn_infer --path sparse \
                --M 16384 --nnz 29 --dist skewed --reps 20 >>"$OUT/bench_gt$gt.log" 2>&1
            echo "-- bench skewed GT=$gt (rc $?)"
            grep -E "skewed" "$OUT/bench_gt$gt.log" | cut -c1-160
        done
        tt=$(($(left) - 10)); [ $tt -gt 170 ] && tt=170
        if [ $tt -gt 60 ]; then
            for gt in ${GTS:-8 16}; do
                (cd $B && TWELL_FFN_TILE=GT=$gt TWELL_CACHE_DIR=$PWD/test-cache/gt$gt \
                    TWELL_TEMPLATE_DIR=$PWD/../templates timeout $tt ./test_gpu_ffn_infer) \
                    >"$OUT/test_gt$gt.log" 2>&1 &
            done
            wait
            for gt in ${GTS:-8 16}; do
                echo "-- test_gpu_ffn_infer, default GT=$gt ($(left) s left)"
                grep -E "PASSED|FAILED|rror" "$OUT/test_gt$gt.log" | head -8
                grep -E "^# +GT=" "$OUT/test_gt$gt.log" |
                    awk '{if ($6 + 0 > m) m = $6 + 0} END {print "   other GT: " NR " runs, worst row-rel err " m}'
            done
        fi
        for tool in memcheck racecheck; do
            [ "$(left)" -gt 50 ] || break
            (cd $B && TWELL_CACHE_DIR=$PWD/test-cache/gt8 TWELL_TEMPLATE_DIR=$PWD/../templates \
                timeout $(($(left) - 15)) compute-sanitizer --tool $tool --error-exitcode 9 \
                ./test_gpu_ffn_infer small) >/tmp/san_$tool.log 2>&1
            echo "-- $tool test_gpu_ffn_infer small: rc $? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" /tmp/san_$tool.log | tr '\n' ' ')"
            grep -E "^# +GT=" /tmp/san_$tool.log | head -3
            tail -40 /tmp/san_$tool.log >>"$OUT/sanitize_tail.log"
        done
        for gt in ${GTS:-8 16}; do
            [ "$(left)" -gt 40 ] || break
            echo "-- ncu per-kernel us, GT=$gt, M=16384, 29 nnz, uniform"
            TWELL_FFN_TILE=GT=$gt timeout 35 ncu --clock-control none -k "$KRE" \
                --metrics gpu__time_duration.sum --print-summary per-kernel $T bench --op ffn_infer \
                --path sparse --M 16384 --nnz 29 --dist uniform $S >/tmp/ncu_gt$gt.log 2>&1
            awk '/twell_ffn_/{k=$1} /gpu__time_duration.sum/{printf "%-22s %s %s %s %s\n", k, $2, $3, $4, $5}' \
                /tmp/ncu_gt$gt.log | tee -a "$OUT/ncu_gt.log"
        done
        ;;
    sass)
        # SASS of phase A, phase B and the reduce per XV in $XVP (default "0 15"): the rendered
        # source compiled with nvcc (-std=c++17, as NVRTC), cuobjdump -sass -> $OUT/sass.txt;
        # prints each kernel's instruction count
        for x in ${XVP:-0 15}; do
            $T render ffn_fused --K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --param XV=$x \
                >/tmp/ff_xv$x.cu 2>/tmp/ff_render.log || { cat /tmp/ff_render.log; continue; }
            nvcc -cubin -arch=sm_90a -std=c++17 -o /tmp/ff_xv$x.cubin /tmp/ff_xv$x.cu || continue
            for k in twell_ffn_phase_a twell_ffn_phase_b twell_ffn_reduce; do
                cuobjdump -sass -fun $k /tmp/ff_xv$x.cubin >/tmp/sass_$k.txt 2>&1
                echo "== XV=$x $k: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' /tmp/sass_$k.txt) instructions"
                { echo "######## XV=$x $k"; cat /tmp/sass_$k.txt; } >>"$OUT/sass.txt"
            done
        done
        ;;
    xvtest)
        # test_gpu_ffn_infer under TWELL_FFN_TILE=XV=$XVT (default 15): exact and deterministic
        (cd $B && TWELL_FFN_TILE=XV=${XVT:-15} TWELL_CACHE_DIR=$PWD/test-cache/xv \
            TWELL_TEMPLATE_DIR=$PWD/../templates timeout ${XVT_TIMEOUT:-150} ./test_gpu_ffn_infer) \
            >"$OUT/test_xv.log" 2>&1
        echo "-- test_gpu_ffn_infer XV=${XVT:-15}: rc $?"
        grep -E "PASSED|FAILED|rror" "$OUT/test_xv.log" | head -12
        ;;
    xvvar)
        # fused-only ms per XV in $XVS (uniform, M=16384, 29 nnz, 20 reps), listed order, twice
        for rep in 1 2; do
            for x in ${XVS:-0 1 2 4 8 15}; do
                ms=$(TWELL_FFN_TILE=XV=$x timeout 60 $T bench --out /tmp/var --op ffn_infer \
                    --path sparse --M 16384 --nnz 29 --dist uniform --reps 20 2>&1 |
                    awk '$1 == "ffn_fused_only" && $8 == "uniform" {print $12}')
                echo "   XV=$x: ${ms:-FAIL} ms" | tee -a "$OUT/xvvar.log"
            done
        done
        ;;
    xvncu)
        # ncu per-kernel us (phase A, reduce, phase B) per XV in $XVP, M=16384, 29 nnz, uniform
        for x in ${XVP:-0 15}; do
            echo "-- ncu XV=$x"
            TWELL_FFN_TILE=XV=$x timeout 60 ncu --clock-control none \
                -k "regex:twell_ffn_(phase|reduce)" --metrics gpu__time_duration.sum,sm__inst_executed.sum \
                --print-summary per-kernel $T bench --op ffn_infer --path sparse --M 16384 --nnz 29 \
                --dist uniform $S >/tmp/ncu_xv$x.log 2>&1
            awk '/twell_ffn_/{k=$1} /gpu__time_duration.sum|sm__inst_executed.sum/{printf "%-22s %s %s %s %s\n", k, $1, $3, $4, $5}' \
                /tmp/ncu_xv$x.log | tee -a "$OUT/ncu_xv.log"
        done
        ;;
    srcctr)
        # ncu SourceCounters of phase A and B per XV in $XVP: executed instructions per SASS
        # line -> $OUT/src_xvN.csv (one launch each)
        for x in ${XVP:-0 15}; do
            TWELL_FFN_TILE=XV=$x timeout 90 ncu --clock-control none -k "regex:twell_ffn_phase_(a|b)" \
                -c 2 --section SourceCounters --section WarpStateStats -f -o /tmp/src_xv$x $T bench \
                --op ffn_infer --path sparse --M 16384 --nnz 29 --dist uniform $S >/tmp/src_xv$x.log 2>&1
            echo "-- srcctr XV=$x: rc $?"
            ncu -i /tmp/src_xv$x.ncu-rep --page source --csv --print-source sass >"$OUT/src_xv$x.csv" 2>&1
            echo "   $(wc -l <"$OUT/src_xv$x.csv") lines; $(head -c 300 "$OUT/src_xv$x.csv" | head -2)"
        done
        ;;
    xvfinal)
        # Session 3 verification of XV $XVNEW (the default) against $XVOLD (the old kernels):
        # test_gpu_ffn_infer (default, and IL=1), test_gpu_ffn_dense, memcheck + racecheck of both
        # small cases, all at once (correctness only); then ncu per-kernel us and instructions per
        # XV, then twell bench --path sparse M 4096/16384/65536 uniform + 16384 skewed per XV
        # (JSON in $OUT/xvN), XV order alternating
        (cd $B && TWELL_CACHE_DIR=$PWD/test-cache/d TWELL_TEMPLATE_DIR=$PWD/../templates \
            timeout 200 ./test_gpu_ffn_infer >/tmp/t_def.log 2>&1; echo "rc $?" >>/tmp/t_def.log) &
        (cd $B && TWELL_FFN_TILE=IL=1 TWELL_CACHE_DIR=$PWD/test-cache/il TWELL_TEMPLATE_DIR=$PWD/../templates \
            timeout 200 ./test_gpu_ffn_infer >/tmp/t_il.log 2>&1; echo "rc $?" >>/tmp/t_il.log) &
        (cd $B && TWELL_CACHE_DIR=$PWD/test-cache/dn TWELL_TEMPLATE_DIR=$PWD/../templates \
            timeout 200 ./test_gpu_ffn_dense >/tmp/t_dn.log 2>&1; echo "rc $?" >>/tmp/t_dn.log) &
        for tool in memcheck racecheck; do
            (for t in test_gpu_ffn_infer test_gpu_ffn_dense; do
                (cd $B && TWELL_CACHE_DIR=$PWD/test-cache/san$tool TWELL_TEMPLATE_DIR=$PWD/../templates \
                    timeout 200 compute-sanitizer --tool $tool --report-api-errors explicit \
                    --error-exitcode 9 ./$t small) >/tmp/san_${tool}_$t.log 2>&1
                echo "$tool $t small: rc $? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/san_${tool}_$t.log | tail -1)"
            done) >/tmp/t_san_$tool.log 2>&1 &
        done
        wait
        cat /tmp/t_san_memcheck.log /tmp/t_san_racecheck.log >/tmp/t_san.log
        for f in def il dn; do
            echo "-- test $f: $(grep -E "PASSED|FAILED" /tmp/t_$f.log | tr '\n' ' ') $(tail -1 /tmp/t_$f.log)"
            grep -E "^# +GT=" /tmp/t_$f.log | awk '{if ($6 + 0 > m) m = $6 + 0} END {if (NR) print "   forced GT: " NR " runs, worst row-rel err " m}'
        done
        cat /tmp/t_san.log
        cat /tmp/t_def.log /tmp/t_il.log /tmp/t_dn.log /tmp/t_san.log >"$OUT/tests.log"
        echo "== tests $(($(date +%s) - s0)) s"
        for x in $XVOLD $XVNEW; do
            TWELL_FFN_TILE=XV=$x timeout 60 ncu --clock-control none -k "$KRE" \
                --metrics gpu__time_duration.sum,sm__inst_executed.sum --print-summary per-kernel \
                $T bench --op ffn_infer --path sparse --M 16384 --nnz 29 --dist uniform $S \
                >/tmp/ncu_f$x.log 2>&1
            awk -v x=$x '/twell_ffn_/{k=$1} /gpu__time_duration.sum|sm__inst_executed.sum/{printf "XV=%s %-20s %-24s %s\n", x, k, $1, $4}' \
                /tmp/ncu_f$x.log | tee -a "$OUT/ncu_final.log"
        done
        for x in $XVOLD $XVNEW; do mkdir -p "$OUT/xv$x"; done
        for a in "--M 4096,16384,65536 --dist uniform" "--M 16384 --dist skewed"; do
            for x in $XVOLD $XVNEW; do
                TWELL_FFN_TILE=XV=$x timeout 100 $T bench --out "$OUT/xv$x" --op ffn_infer \
                    --path sparse --nnz 29 --reps 20 $a >/tmp/b_$x.log 2>&1
                awk -v x=$x '$1 ~ /^ffn/ {print "XV=" x, $0}' /tmp/b_$x.log | cut -c1-190 |
                    tee -a "$OUT/bench_final.log"
            done
        done
        ;;
    ovfcheck)
        OVA=${OVA:-11}
        OVB=${OVB:-75}
        TD="TWELL_TEMPLATE_DIR=$PWD/templates"
        (cd $B && env $TD TWELL_CACHE_DIR=$PWD/test-cache/oa TWELL_FFN_TILE=XV=$OVA timeout 170 \
            ./test_gpu_ffn_infer >/tmp/o_ta.log 2>&1; echo "rc $?" >>/tmp/o_ta.log) &
        (cd $B && env $TD TWELL_CACHE_DIR=$PWD/test-cache/ob TWELL_FFN_TILE=XV=$OVB timeout 170 \
            ./test_gpu_ffn_infer >/tmp/o_tb.log 2>&1; echo "rc $?" >>/tmp/o_tb.log) &
        for tool in memcheck racecheck; do
            (cd $B && env $TD TWELL_CACHE_DIR=$PWD/test-cache/s$tool TWELL_FFN_TILE=XV=$OVB \
                timeout 170 compute-sanitizer --tool $tool --report-api-errors explicit \
                --error-exitcode 9 ./test_gpu_ffn_infer small >/tmp/o_s$tool.log 2>&1
                echo "rc $?" >>/tmp/o_s$tool.log) &
        done
        # meanwhile the bench's modules into its cache (one short run per XV, not timed)
        (for x in $OVA $OVB; do
            TWELL_FFN_TILE=XV=$x timeout 80 $T bench --out /tmp/ow --op ffn_infer --path sparse \
                --M 4096 --nnz 29 --dist skewed --reps 1 >/tmp/o_w$x.log 2>&1
        done) &
        wait
        for f in ta tb smemcheck sracecheck; do
            echo "-- $f: $(grep -E "PASSED|FAILED" /tmp/o_$f.log | tr '\n' ' ')" \
                "$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/o_$f.log | tail -1) $(tail -1 /tmp/o_$f.log)"
        done
        grep -hE "^# +XV=" /tmp/o_ta.log /tmp/o_tb.log | awk '{if ($6 + 0 > m) m = $6 + 0} END {if (NR) print "   forced XV: " NR " runs, worst row-rel err " m}'
        cat /tmp/o_ta.log /tmp/o_tb.log /tmp/o_smemcheck.log /tmp/o_sracecheck.log >"$OUT/ovf_tests.log"
        echo "== ovf tests $(($(date +%s) - s0)) s"
        if [ "${OVNCU:-1}" = 1 ]; then # ncu us of ovf_gu / ovf_down per XV, M=16384 skewed
            for x in $OVA $OVB; do
                TWELL_FFN_TILE=XV=$x timeout 45 ncu --clock-control none -k "regex:twell_ffn_ovf" \
                    --metrics gpu__time_duration.sum --print-summary per-kernel $T bench \
                    --op ffn_infer --path sparse --M 16384 --nnz 29 --dist skewed $S \
                    >/tmp/o_ncu$x.log 2>&1
                awk -v x=$x '/twell_ffn_/{k=$1} /gpu__time_duration.sum/{printf "   ncu XV=%s %-20s %s %s %s %s\n", x, k, $2, $3, $4, $5}' \
                    /tmp/o_ncu$x.log | tee -a "$OUT/ovf_ncu.log"
            done
        fi
        rm -f /tmp/o_bench.txt
        for rep in 1 2; do
            for x in $OVA $OVB; do
                mkdir -p "$OUT/ov$x"
                TWELL_FFN_TILE=XV=$x timeout 60 $T bench --out "$OUT/ov$x" --op ffn_infer \
                    --path sparse --M 4096,16384,65536 --nnz 29 --dist skewed --reps 20 \
                    >/tmp/o_b.log 2>&1
                echo "   bench XV=$x rep $rep: rc $?"
                awk -v x=$x -v r=$rep '$1 ~ /^ffn/ {print "XV=" x, r, $0}' /tmp/o_b.log |
                    tee -a /tmp/o_bench.txt >>"$OUT/ovf_bench.log"
            done
        done
        echo "-- skewed, 29 nnz, --path sparse, 20 reps: ms per run (rep 1 / rep 2), dense cuBLAS, speedup"
        awk '{k = $1 " " $5 " " $3; ms[k] = ms[k] (ms[k] == "" ? "" : " / ") $14; d[k] = $15;
              sp[k] = $16; ok[k] = ok[k] $19 " "}
             END {for (k in ms) printf "%-34s %-17s dense %s  x%s  %s\n", k, ms[k], d[k], sp[k], ok[k]}' \
            /tmp/o_bench.txt | sort -k3,3 -k2,2n -k1,1
        ;;
    *) echo "unknown step $step" ;;
    esac
    echo "== $step $(($(date +%s) - s0)) s"
done
