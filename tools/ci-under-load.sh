#!/bin/bash
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

# Run .ci/run on a busy machine: one CPU-bound process per core for the
# whole run, stopped afterwards whatever happens. The tests must pass the
# same as on an idle machine; this is how that is checked.
#
# Usage: tools/ci-under-load.sh [ARGS FOR .ci/run]
set -u

cd "$(dirname "$0")/.." || exit 1
burners=()
ci_pid=
stop_all() {
    # .ci/run runs in a session of its own so that its whole tree (tox,
    # pytest, the services the tests started) goes with it when this
    # script is interrupted.
    if [ -n "$ci_pid" ] && kill -0 "$ci_pid" 2>/dev/null; then
        kill -TERM -- "-$ci_pid" 2>/dev/null
        wait "$ci_pid" 2>/dev/null
    fi
    ci_pid=
    if [ "${#burners[@]}" -gt 0 ]; then
        kill "${burners[@]}" 2>/dev/null
        wait "${burners[@]}" 2>/dev/null
        burners=()
    fi
}
trap stop_all EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 "$(nproc)"); do
    python3 -c 'while True: pass' &
    burners+=("$!")
done
echo "ci-under-load: ${#burners[@]} CPU-bound processes running" \
    "(pids ${burners[*]})"

start=$(date +%s)
setsid bash .ci/run "$@" &
ci_pid=$!
wait "$ci_pid"
rc=$?
ci_pid=
echo "ci-under-load: .ci/run exited $rc after $(( $(date +%s) - start )) s"
exit "$rc"
