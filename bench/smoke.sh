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
failed=()
total=$SECONDS
for script in bench/[!_]*.py; do
    name="$(basename "$script" .py)"
    prefix="$name"
    args=(--smoke)
    case "$name" in
        calibrate) prefix="calibration" ;;
        locomo) args=("$LOCOMO" --smoke) ;;
    esac
    out="$(mktemp)" err="$(mktemp)"
    start=$SECONDS
    status=0
    timeout -k 15 300 "$PYTHON" "$script" "${args[@]}" >"$out" 2>"$err" || status=$?
    last="$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 || true)"
    echo "smoke $name: $((SECONDS - start)) s, exit $status: $last"
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
