#!/bin/sh
# Device script for the gate-pack dev kernel: SASS facts, correctness sweep, timing vs cuBLAS.
# Run from the repo root on the GPU machine, carrying build-sm90/:  sh bench/dev/run_sm90.sh [check|perf|all] [extra perf args]
set -u
OUT=${OUT:-/tmp/sm90-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
what=${1:-all}
[ $# -gt 0 ] && shift
B=build-sm90/gate_pack_dev
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
"$B" --bogus >/dev/null 2>&1
if [ $? -ne 2 ]; then
    echo "carried binary does not run here: building"
    mkdir -p build-sm90
    nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o "$B" \
        bench/dev/gate_pack_sm90_dev.cu -lcublas >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
cuobjdump -sass "$B" >"$OUT/sass.txt" 2>&1
# per kernel: HGMMA count, local-memory instructions, GPU-scope membars
awk '/Function :/{f=$3} /HGMMA/{h[f]++} /LDL|STL/{l[f]++} /MEMBAR.ALL.GPU|MEMBAR.SC.GPU/{m[f]++} /Function :/{h[f]+=0}
     END{for (k in h) if (k ~ /tw_gate/) printf "SASS %s HGMMA=%d LDL/STL=%d MEMBAR.GPU=%d\n", k, h[k], l[k]+0, m[k]+0}' "$OUT/sass.txt" | sort >"$OUT/sass_summary.txt"
awk -v k="${SASSFN:-_Z17tw_gate_pack_sm90ILi0ELi256ELi8ELi64ELi3ELi2ELi2EEv7tw_tmapS0_Pjiii}" '/Function :/{p=($3==k)} p' "$OUT/sass.txt" >"$OUT/sass_one.txt"
rm -f "$OUT/sass.txt"
grep -E "ELi8ELi64ELi3ELi[12]ELi2EE" "$OUT/sass_summary.txt"
run() { # name timeout args...
    n=$1; t=$2; shift 2
    timeout "$t" "$B" "$@" >"$OUT/$n.log" 2>&1
    rc=$?
    echo "== $n rc=$rc"
    grep -E "FAIL|first bad|cpu check|error|rror" "$OUT/$n.log" | head -8
}
if [ "$what" = check ] || [ "$what" = all ]; then
    run c_k64 60 --variants all --K 64 --N 256 --M 1,7,1000 --nnz 29,100 --reps 2
    run c_t128 60 --variants c8_T128,c4_T128,c2_T128,f16_T128,c8_T64,f16_c2_T64 --K 128 --N 384 --M 300 --nnz 40,150 --reps 2
    run c_k512 60 --variants all --K 512 --N 1024 --M 128,1000 --nnz 29,500 --reps 2
    run c_big 120 --variants all --K 2048 --N 5632 --M 4096 --nnz 29,2000 --reps 2
    run c_k4096 60 --variants b64s3c2,b32s6c1,c2_T128,f16_c8 --K 4096 --N 8192 --M 1000 --nnz 29 --reps 2
    grep -h -E "^[a-z0-9_]+ +(bf16|fp16)" "$OUT"/c_*.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$13,$14,$15,$16,$17,$18}' | sort | uniq -c | awk '{$1=""; print}' > "$OUT/check_summary.txt"
    echo "check lines: $(wc -l <"$OUT/check_summary.txt"), failing: $(grep -c FAIL "$OUT/check_summary.txt")"
    cat "$OUT"/c_*.log >"$OUT/checks.log" && rm -f "$OUT"/c_*.log
fi
if [ "$what" = perf ] || [ "$what" = all ]; then
    run ${NAME:-perf} 300 --variants ${VARIANTS:-perf} --M ${MS:-4096,16384,65536} --nnz ${NNZ:-29,280} --reps 20 "$@"
    sed -n "/# summary/,\$p" "$OUT/${NAME:-perf}.log" | cut -c1-150
fi
if [ "$what" = prof ]; then # PROFV="variant ..." : ncu stall sampling at M=16384, nnz 29
    for v in ${PROFV:-b64s3c2}; do
        ncu --clock-control none -k regex:tw_gate -c 1 --section SpeedOfLight --section WarpStateStats \
            --section SchedulerStats --section SourceCounters -f -o /tmp/prof_$v \
            "$B" --variants $v --M 16384 --nnz 29 --reps 1 --nocheck >"$OUT/ncu_$v.log" 2>&1
        ncu -i /tmp/prof_$v.ncu-rep --page details >>"$OUT/ncu_$v.log" 2>&1
        echo "==== source" >>"$OUT/ncu_$v.log"
        ncu -i /tmp/prof_$v.ncu-rep --page source --csv --print-source sass >>"$OUT/ncu_$v.log" 2>&1
        echo "ncu $v: $(wc -c <"$OUT/ncu_$v.log") bytes"
        grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$OUT/ncu_$v.log" | head -8
    done
fi
if [ "$what" = prof2 ]; then # PROFV="variant ...": stall summary per kernel at M=${PM:-16384}, nnz 29, no split
    for v in ${PROFV:-b64s3c2}; do
        ncu --clock-control none -k regex:tw_gate -c 1 --section WarpStateStats --section SourceCounters \
            -f -o /tmp/prof_$v "$B" --variants $v --M ${PM:-16384} --nnz 29 --reps 1 --nocheck --nosplit >/dev/null 2>&1
        ncu -i /tmp/prof_$v.ncu-rep --page source --csv --print-source sass >/tmp/src_$v.csv 2>&1
        python3 - "$v" /tmp/src_$v.csv >>"$OUT/prof2.log" <<'PY'
import csv, sys
v, f = sys.argv[1], sys.argv[2]
rows = list(csv.reader(open(f).read().splitlines()[1:]))
hdr = rows[0]; data = [r for r in rows[1:] if len(r) == len(hdr)]
ci = {h: i for i, h in enumerate(hdr)}
cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
S = "Warp Stall Sampling (All Samples)"; E = "Instructions Executed"
tot = sum(int(r[ci[S]] or 0) for r in data)
agg = {h: sum(int(r[ci[h]] or 0) for r in data) for h in cols}
print("=== %s samples %d instr %d" % (v, tot, sum(int(r[ci[E]] or 0) for r in data)))
print("  " + " ".join("%s=%.1f%%" % (h[6:], 100.0 * n / tot) for h, n in sorted(agg.items(), key=lambda x: -x[1])[:9]))
for r in sorted(data, key=lambda r: -int(r[ci[S]] or 0))[:22]:
    st = sorted(((h[6:], int(r[ci[h]] or 0)) for h in cols), key=lambda x: -x[1])[:2]
    print("  %5.1f%% ex=%-8s %-60s %s" % (100.0 * int(r[ci[S]]) / tot, r[ci[E]], r[ci["Source"]].strip()[:60], st))
PY
    done
    tail -c 9000 "$OUT/prof2.log"
fi
