#!/bin/bash
# Run .ci/run on a busy machine: one CPU-bound process per core for the
# whole run, stopped afterwards whatever happens. The tests must pass the
# same as on an idle machine; this is how that is checked.
#
# Usage: tools/ci-under-load.sh [ARGS FOR .ci/run]
set -u

cd "$(dirname "$0")/.."
burners=()
stop_burners() {
    if [ "${#burners[@]}" -gt 0 ]; then
        kill "${burners[@]}" 2>/dev/null
        wait "${burners[@]}" 2>/dev/null
        burners=()
    fi
}
trap stop_burners EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 "$(nproc)"); do
    python3 -c 'while True: pass' &
    burners+=("$!")
done
echo "ci-under-load: ${#burners[@]} CPU-bound processes running" \
    "(pids ${burners[*]})"

start=$(date +%s)
bash .ci/run "$@"
rc=$?
echo "ci-under-load: .ci/run exited $rc after $(( $(date +%s) - start )) s"
exit "$rc"
