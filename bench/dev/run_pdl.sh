#!/bin/sh
# Device script for PDL and the per-call fixed costs of the inference chain (issue 5). Run from
# this tree's root after `sh scripts/device.sh shell ...` built it; steps in $STEPS (default
# "bench test"):
#   base      also build `twell` of the tree at $BASE (default ../.., the device copy of main)
#             and time it in the bench step (the "before" of every change here)
#   bench     twell bench --op ffn_infer with TWELL_PDL=0 and =1 in alternating processes (same
#             data, seed, GPU): uniform M 4096/16384/65536 --path auto and sparse, 16384 skewed;
#             $PAIRS alternating pairs of the auto runs (default 1)
#   test      test_gpu_ffn_infer, _ffn_dense, _gate_pack, _driver (+ the driver with TWELL_PDL=0);
#             $TESTS narrows the list (e.g. "gate_pack|driver")
#   trace     nsys timeline (when installed) of one gate-pack + fused call, PDL 0 and 1
#   sanitize  memcheck + racecheck on their small cases (scripts/device.sh sanitize)
# Logs and the JSON records (one tar) go to $OUT; a summary is printed last.
set -u
OUT=${OUT:-/tmp/pdl-out}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
BASE=$(cd "${BASE:-../..}" && pwd)
J=/tmp/pdl-json
mkdir -p $J
U="--op ffn_infer --K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --reps 20 --nnz 29"
have_base=0
run_bench() { # tag tool templates pdl args...
    tag=$1 tool=$2 tdir=$3 p=$4
    shift 4
    echo "== $tag TWELL_PDL=$p" >>"$OUT/bench.log"
    TWELL_PDL=$p TWELL_TEMPLATE_DIR=$tdir TWELL_CACHE_DIR=/tmp/pdl-cache-$tag timeout 120 \
        $tool bench $U --out $J/$tag-pdl$p "$@" >>"$OUT/bench.log" 2>&1 ||
        echo "bench $tag pdl=$p: rc $?" >>"$OUT/bench.log"
}
for step in ${STEPS:-bench test}; do
    s0=$(date +%s)
    case $step in
    base)
        (cmake -S $BASE -B /tmp/base-build -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps &&
            cmake --build /tmp/base-build -j 16 --target twell) >/tmp/base-build.log 2>&1 &&
            have_base=1 || { echo "base build failed"; tail -20 /tmp/base-build.log; }
        ;;
    bench)
        M3="--M 4096,16384,65536 --dist uniform"
        S1="--M 16384 --dist skewed"
        if [ $have_base = 1 ]; then
            (export TWELL_COMMIT=${BASE_COMMIT:-main}
                run_bench base-auto /tmp/base-build/twell $BASE/templates x --path auto $M3
                run_bench base-skw /tmp/base-build/twell $BASE/templates x --path auto $S1)
        fi
        for r in $(seq 1 ${PAIRS:-1}); do # alternating A/B pairs: the spread is the noise
            for p in 0 1; do run_bench auto$r $B/twell $PWD/templates $p --path auto $M3; done
            for p in 0 1; do run_bench skw$r $B/twell $PWD/templates $p --path auto $S1; done
        done
        for p in 0 1; do run_bench sparse $B/twell $PWD/templates $p --path sparse $M3; done
        tar -C $J -cf "$OUT/json.tar" .
        ;;
    trace)
        # kernel start/end of the last fused call under nsys (if installed): gaps and overlaps
        if command -v nsys >/dev/null 2>&1; then
            for p in 0 1; do
                TWELL_PDL=$p TWELL_TEMPLATE_DIR=$PWD/templates TWELL_CACHE_DIR=/tmp/pdl-cache-trace \
                    timeout 60 nsys profile -o /tmp/tr$p -f true $B/twell bench $U --path sparse \
                    --M ${TRACE_M:-16384} --dist uniform --reps 3 --warmup 1 --out /tmp/trj >/dev/null 2>&1
                timeout 60 nsys stats -r cuda_gpu_trace -f csv -o /tmp/tr$p /tmp/tr$p.nsys-rep >/dev/null 2>&1
                f=$(ls /tmp/tr${p}_cuda_gpu_trace.csv 2>/dev/null | head -1)
                echo "-- TWELL_PDL=$p M=${TRACE_M:-16384}: last gate-pack + fused call (us; gap = start - previous end)" >>"$OUT/trace.log"
                [ -n "$f" ] && awk -F, 'NR > 1 { n++; st[n] = $1; du[n] = $2; nm[n] = $NF }
                    END { for (i = n; i > 0; i--) if (nm[i] ~ /gate_pack_sm90/) { s = i; break }
                          for (i = s; i <= n && i < s + 16; i++) {
                              g = i > s ? (st[i] - st[i-1] - du[i-1]) / 1000 : 0
                              printf "%-28s start %9.1f dur %8.1f gap %6.1f\n", substr(nm[i], 1, 28),
                                  (st[i] - st[s]) / 1000, du[i] / 1000, g } }' "$f" >>"$OUT/trace.log" ||
                    echo "no trace csv" >>"$OUT/trace.log"
            done
        else
            echo "nsys not installed" >>"$OUT/trace.log"
        fi
        ;;
    test)
        (cd $B && timeout 240 ctest --output-on-failure --timeout 240 \
            -R "test_gpu_(${TESTS:-ffn_infer|ffn_dense|gate_pack|driver})\$") >"$OUT/ctest.log" 2>&1
        (cd $B && TWELL_PDL=0 ./test_gpu_driver) >>"$OUT/ctest.log" 2>&1 &&
            echo "test_gpu_driver TWELL_PDL=0: passed" >>"$OUT/ctest.log" ||
            echo "test_gpu_driver TWELL_PDL=0: FAILED" >>"$OUT/ctest.log"
        ;;
    sanitize)
        SAN_TESTS="${SAN_TESTS:-test_gpu_driver test_gpu_gate_pack test_gpu_ffn_infer test_gpu_ffn_dense}" \
            timeout ${SAN_BUDGET:-150} sh scripts/device.sh sanitize >"$OUT/san_summary.log" 2>&1
        ;;
    esac
    echo "== step $step: $(($(date +%s) - s0)) s" | tee -a "$OUT/steps.log"
done
echo "=============== summary"
[ -f "$OUT/ctest.log" ] && grep -E "tests passed|Passed|Failed|FAILED|TWELL_PDL" "$OUT/ctest.log" | tail -12
grep -hE "^# PDL|^# chain|AUTO sparse counts" $B/Testing/Temporary/LastTest.log 2>/dev/null | head -6
[ -f "$OUT/san_summary.log" ] && grep -E "clean|FAILED|not built" "$OUT/san_summary.log"
[ -f "$OUT/trace.log" ] && cat "$OUT/trace.log"
[ -f "$OUT/bench.log" ] && cut -c1-160 "$OUT/bench.log" | grep -vE "^\s*$" | head -120
