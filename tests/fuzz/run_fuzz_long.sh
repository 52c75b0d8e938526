#!/bin/bash
# run_fuzz_long.sh TESTS_DIR CORPUS_DIR WORK_DIR TARGET... - the fuzz targets (CMake's fuzz-long
# passes every one registered) for FUZZ_SECONDS (default 600) each, FUZZ_JOBS (default 1) at a
# time, each on one core, over a working copy of its seed corpus that grows across runs
# (WORK_DIR/<target>/corpus; the source tree is never written). FUZZ_TARGETS (space-separated)
# picks some of them instead. Prints one summary line per target, in the order given, once all
# have finished: executions, exec/s, coverage (libFuzzer's cov/ft), corpus
# size, findings (crash, leak or timeout files in WORK_DIR/<target>/artifacts). Exit 1 if any
# target found something.
set -u
tests=$1 seeds=$2 work=$3
shift 3
secs=${FUZZ_SECONDS:-600}
jobs=${FUZZ_JOBS:-1}
targets=${FUZZ_TARGETS:-"$*"}
[ -n "$targets" ] || { echo "run_fuzz_long.sh: no targets given" >&2; exit 2; }
mkdir -p "$work"

# One target: its run, then its summary line in WORK_DIR/<target>/summary.
run_one() {
    local t=$1 dir=$work/$1 seed=$seeds/${1#fuzz_}
    mkdir -p "$dir/corpus" "$dir/artifacts"
    [ -d "$seed" ] && cp -n "$seed"/* "$dir/corpus/" 2>/dev/null
    "$tests/$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
        "$dir/corpus" >"$dir/log" 2>&1
    local rc=$?
    local execs rate last cov ft n arts verdict
    execs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$dir/log")
    rate=$(awk '/^stat::average_exec_per_sec:/ {print $2}' "$dir/log")
    last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' | awk '{print $2}')
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' | awk '{print $2}')
    n=$(ls "$dir/corpus" | wc -l)
    arts=$(ls "$dir/artifacts" | wc -l)
    verdict=none
    [ "$rc" = 0 ] && [ "$arts" = 0 ] || verdict="rc=$rc: $(ls "$dir/artifacts" | tr '\n' ' ')"
    printf '%-20s %8s %12s %8s %8s %8s %8s %s\n' "$t" "$secs" "${execs:-?}" "${rate:-?}" \
        "${cov:-?}" "${ft:-?}" "$n" "$verdict" >"$dir/summary"
}

running=0
for t in $targets; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_one "$t" &
    running=$((running + 1))
done
wait

found=0
printf '%-20s %8s %12s %8s %8s %8s %8s %s\n' target seconds execs exec/s cov ft corpus findings
for t in $targets; do
    cat "$work/$t/summary"
    grep -q ' none$' "$work/$t/summary" || found=1
done
exit $found
