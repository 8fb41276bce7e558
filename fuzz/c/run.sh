#!/usr/bin/env bash
# run.sh OUT SECONDS TARGET...: each built target (OUT/TARGET) for SECONDS seconds on its seed
# corpus (OUT/seeds: doc for the document targets, raw for base64 and heads) and the inputs of
# past findings (fuzz/c/regressions, every target), its corpus growing in OUT/corpus/TARGET. Prints each run's executions; a crash or a finding is saved as
# OUT/crash-* (libFuzzer's artifact) and ends the run with its log's tail and status 1.
set -euo pipefail
regressions=$(cd "$(dirname "$0")" && pwd)/regressions
out=$1 seconds=$2
shift 2
for t in "$@"; do
    case $t in fuzz_base64 | fuzz_heads) seeds=$out/seeds/raw ;; fuzz_sse) seeds=$out/seeds/sse ;; *) seeds=$out/seeds/doc ;; esac
    mkdir -p "$out/corpus/$t" "$seeds"
    # The longest input; seconds one input may take before it counts as a hang; memory.
    if ! "$out/$t" -max_len=65536 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -max_total_time="$seconds" -artifact_prefix="$out/" "$out/corpus/$t" "$seeds" "$regressions" >"$out/$t.log" 2>&1; then
        tail -60 "$out/$t.log"
        echo "$t: FAILED (input saved beside $out/$t.log)"
        exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")
    cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1)
    echo "$t: $execs executions in $seconds s, $cov, corpus $(ls "$out/corpus/$t" | wc -l) inputs, no finding"
done
