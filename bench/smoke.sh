#!/usr/bin/env bash
# Every bench once in --smoke mode (tiny sizes, seconds), as CI runs them after the tests:
#     bench/smoke.sh [.venv/bin/python]
# Prints each smoke's time, exit status and last line; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-.venv/bin/python}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

# Each smoke must exit 0 within its time limit and end with its summary line
# ("<name> key=value ..."; calibrate.py's is "calibration ..."). LoCoMo's data lives beside
# the repository (never in it; LOCOMO_DATA overrides where); bench/locomo.py --smoke builds a
# tiny conversation without it.
LOCOMO="${LOCOMO_DATA:-../shared/data/locomo/locomo_dev5.json}"

# The processes a smoke left behind: those still carrying its BENCH_SMOKE_ID (children inherit
# the environment: servers, the embedded PostgreSQL, helpers), waited for up to 10 s.
leftovers() {
    local pids=""
    for _ in $(seq 20); do
        pids="$(grep -lsxz "BENCH_SMOKE_ID=$1" /proc/[0-9]*/environ | cut -d/ -f3 || true)"
        [[ -z "$pids" ]] && return 0
        sleep 0.5
    done
    echo "$pids"
}
failed=()
total=$SECONDS
for script in bench/[!_]*.py; do
    name="$(basename "$script" .py)"
    prefix="$name"
    args=(--smoke)
    case "$name" in
        calibrate) prefix="calibration" ;;
        locomo) args=("$LOCOMO" --smoke --experiments) ;;  # the fusion variants: ~1 s more
    esac
    out="$(mktemp)" err="$(mktemp)"
    start=$SECONDS
    status=0
    id="$name-$$-$RANDOM"
    BENCH_SMOKE_ID="$id" timeout -k 15 300 "$PYTHON" "$script" "${args[@]}" >"$out" 2>"$err" \
        || status=$?
    last="$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 || true)"
    echo "smoke $name: $((SECONDS - start)) s, exit $status: $last"
    left="$(leftovers "$id")"
    if [[ -n "$left" ]]; then
        echo "smoke $name left processes behind (now killed):"
        for pid in $left; do
            tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null && echo
            kill -9 "$pid" 2>/dev/null || true
        done
        status=1
    fi
    if [[ $status -ne 0 || ! "$last" =~ ^$prefix\ .*= ]]; then
        echo "smoke $name FAILED; its output:"
        tail -n 30 "$out"
        tail -n 30 "$err"
        failed+=("$name")
    fi
    rm -f "$out" "$err"
done
echo "bench smokes: $((SECONDS - total)) s in all"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "bench smokes failed: ${failed[*]}"
    exit 1
fi
