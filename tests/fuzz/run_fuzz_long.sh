#!/bin/bash
# run_fuzz_long.sh TESTS_DIR CORPUS_DIR WORK_DIR - every fuzz target for FUZZ_SECONDS (default
# 600) each, one after the other on one core, over a working copy of its seed corpus that grows
# across runs (WORK_DIR/<target>/corpus; the source tree is never written). Prints one summary
# line per target: executions, coverage (libFuzzer's cov/ft), corpus size, findings (crash, leak
# or timeout files in WORK_DIR/<target>/artifacts). Exit 1 if any target found something.
set -u
tests=$1 seeds=$2 work=$3
secs=${FUZZ_SECONDS:-600}
targets=${FUZZ_TARGETS:-"fuzz_http_parse fuzz_ws_decode fuzz_derp_frames fuzz_derp_info fuzz_derp_stun fuzz_tls_record fuzz_ws_roundtrip fuzz_parsers fuzz_proxy_parse"}
mkdir -p "$work"
found=0
printf '%-20s %12s %8s %8s %8s %s\n' target execs cov ft corpus findings
for t in $targets; do
    dir=$work/$t
    seed=$seeds/${t#fuzz_}
    mkdir -p "$dir/corpus" "$dir/artifacts"
    [ -d "$seed" ] && cp -n "$seed"/* "$dir/corpus/" 2>/dev/null
    "$tests/$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
        "$dir/corpus" >"$dir/log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/log" | awk '{print $2}')
    last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' | awk '{print $2}')
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' | awk '{print $2}')
    n=$(ls "$dir/corpus" | wc -l)
    arts=$(ls "$dir/artifacts" | wc -l)
    [ "$rc" = 0 ] && [ "$arts" = 0 ] || found=1
    printf '%-20s %12s %8s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$n" \
        "$([ "$arts" = 0 ] && [ "$rc" = 0 ] && echo none || echo "rc=$rc: $(ls "$dir/artifacts" | tr '\n' ' ')")"
done
exit $found
