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

# The DevStack plugin in a real stack.sh, in a systemd-nspawn container
# with its own systemd, network, MariaDB, RabbitMQ, Apache, libvirt, OVN
# and tgtd: the machine's own services are never touched.
#
#   tools/devstack-check.sh --mirrors DIR [--recipe DIR] [--repo DIR]
#                           [--branch BRANCH] [--keep-running]
#
# DIR (or DS_MIRRORS) holds a git mirror of each OpenStack project,
# <owner>+<name>/repo: openstack+devstack, +requirements, +keystone,
# +placement, +nova, +glance, +neutron. composable is cloned from --repo
# (default: this repository) at --branch (default: its current branch):
# only committed work is checked. The container recipe (--recipe, or
# DS_RECIPE, or ../shared/devstack-real next to this repository) provides
# run.sh, start-ds.sh, stop-ds.sh and ds-exec; it is only read. The rootfs
# (DS_ROOT, default /var/tmp/composable-ds-root, ~6 GB) is made once and
# reused; DS_STATE (default /var/tmp/composable-ds-state) keeps the logs.
#
# Phases: container (rootfs, boot, DevStack and project checkouts),
# stack (stack.sh with doc/source/install/samples/devstack-local.conf),
# selfcheck (devstack/selfcheck.sh), user_path (the demo user boots a
# server with pooled memory through the openstack CLI), unstack
# (unstack.sh, then what it must have removed), clean (clean.sh, then
# what it must have removed). The last line is the summary:
#
#   devstack-check: stack=ok selfcheck=ok user_path=ok unstack_leftovers=0 wall_s=1234
#
# Exit status 0 only if every phase passed and nothing was left over.

# The whole script is one block, read before any of it runs: bash reads
# a script as it goes, and a run lasts long enough for its file to be
# edited or checked out meanwhile.
{
set -u

ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MIRRORS=${DS_MIRRORS:-}
RECIPE=${DS_RECIPE:-}
REPO=$ROOT_DIR
BRANCH=
KEEP_RUNNING=no

usage() {
    sed -n '/^# The DevStack plugin in a real/,/^# Exit status/p' "$0" | \
        sed 's/^# \{0,1\}//'
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --mirrors) MIRRORS=$2; shift 2 ;;
        --recipe) RECIPE=$2; shift 2 ;;
        --repo) REPO=$2; shift 2 ;;
        --branch) BRANCH=$2; shift 2 ;;
        --keep-running) KEEP_RUNNING=yes; shift ;;
        -h|--help) usage ;;
        *) echo "devstack-check: unknown argument $1" >&2; usage ;;
    esac
done

if [[ -z "$RECIPE" ]]; then
    for candidate in "$ROOT_DIR/../shared/devstack-real" \
            "$ROOT_DIR/../../shared/devstack-real"; do
        if [[ -x "$candidate/run.sh" ]]; then
            RECIPE=$(cd "$candidate" && pwd)
            break
        fi
    done
fi
for tool in run.sh start-ds.sh stop-ds.sh ds-exec; do
    if [[ ! -x "$RECIPE/$tool" ]]; then
        echo "devstack-check: no container recipe ($tool) in '$RECIPE'; give --recipe" >&2
        exit 2
    fi
done
if [[ -z "$MIRRORS" ]]; then
    echo "devstack-check: give --mirrors (or DS_MIRRORS)" >&2
    exit 2
fi
MIRRORS=$(cd "$MIRRORS" && pwd) || exit 2
for project in devstack requirements keystone placement nova glance neutron; do
    if [[ ! -d "$MIRRORS/openstack+$project/repo" ]]; then
        echo "devstack-check: no mirror $MIRRORS/openstack+$project/repo" >&2
        exit 2
    fi
done
BRANCH=${BRANCH:-$(git -C "$REPO" rev-parse --abbrev-ref HEAD)}
COMMIT=$(git -C "$REPO" rev-parse --verify "$BRANCH^{commit}") || exit 2

export DS_MIRRORS=$MIRRORS
export DS_ROOT=${DS_ROOT:-/var/tmp/composable-ds-root}
export DS_STATE=${DS_STATE:-/var/tmp/composable-ds-state}
export PROFILE=neutron
R=$DS_ROOT
STATE=$DS_STATE
mkdir -p "$STATE"
LOCAL_CONF=$ROOT_DIR/doc/source/install/samples/devstack-local.conf
DB_PASSWORD=$(sed -n 's/^ADMIN_PASSWORD=//p' "$LOCAL_CONF")
# The names of composable's targets in tgtd.
TARGET_PREFIX=$(sed -n 's/^COMPOSABLE_TARGET_PREFIX=//p' \
    "$ROOT_DIR/devstack/settings")

T0=$(date +%s)
declare -A RESULT WALL
for phase in container stack selfcheck user_path unstack clean; do
    RESULT[$phase]=skipped
    WALL[$phase]=0
done
# Not counted until unstack.sh has run.
LEFTOVERS=unknown

log() { echo "[$(date -u +%T)] devstack-check: $*"; }

# Run "$@" inside the container, as root.
in_ds() { "$RECIPE/ds-exec" "$@"; }
# Run a bash script (stdin) inside the container as the DevStack user.
as_stack() { in_ds su - stack -c "bash -s"; }

CURRENT_PHASE=
PHASE_PID=
PHASE_T0=0
SUMMARY_PRINTED=no

# phase NAME COMMAND...: run it, time it, keep its output in
# $STATE/NAME.log, record ok/fail. It runs in the background and the
# script waits for it, so that a signal to the script is handled at once
# rather than when the phase (stack.sh: twenty minutes) ends.
phase() {
    local name=$1 t rc
    shift
    log "$name: starting (log $STATE/$name.log)"
    t=$(date +%s)
    CURRENT_PHASE=$name
    PHASE_T0=$t
    ( "$@" ) > "$STATE/$name.log" 2>&1 < /dev/null &
    PHASE_PID=$!
    wait "$PHASE_PID"
    rc=$?
    PHASE_PID=
    CURRENT_PHASE=
    WALL[$name]=$(( $(date +%s) - t ))
    if [[ $rc -eq 0 ]]; then
        RESULT[$name]=ok
    else
        RESULT[$name]=fail
        log "$name: failed (rc=$rc); its last lines:"
        tail -n 25 "$STATE/$name.log" | sed 's/^/    /'
    fi
    log "$name: ${RESULT[$name]} in ${WALL[$name]} s"
    return $rc
}

container() {
    if [[ ! -x "$R/lib/systemd/systemd" ]]; then
        nice "$RECIPE/run.sh" rootfs || return 1
    fi
    "$RECIPE/start-ds.sh" || return 1
    # DevStack, its user, checkouts of the OpenStack projects (partial
    # clones where the mirrors lack old blobs), the tiny boot image,
    # local.sh (the container's fixups); existing ones are kept.
    "$RECIPE/run.sh" prepare || return 1
    # composable at the commit under test: DevStack clones it from here.
    rm -rf "$R/srv/src/composable.git"
    mkdir -p "$R/srv/src"
    git clone -q --bare --single-branch --branch "$BRANCH" "$REPO" \
        "$R/srv/src/composable.git" || return 1
    # RECLONE=no keeps an existing checkout: remove it so that stack.sh
    # clones this commit.
    in_ds rm -rf /opt/stack/composable || return 1
    {
        sed "s|^enable_plugin composable .*|enable_plugin composable file:///srv/src/composable.git $BRANCH|" \
            "$LOCAL_CONF"
        cat <<'EOF'

# --- the container's own settings (tools/devstack-check.sh) ---
HOST_IP=172.30.254.100
SERVICE_HOST=$HOST_IP
GIT_BASE=file:///srv/git
RECLONE=no
INSTALL_TEMPEST=False
NOVA_VNC_ENABLED=False
# no openvswitch kernel module: OVS's userspace datapath
OVS_DATAPATH_TYPE=netdev
# /dev/kvm, with QEMU's default CPU model
VIRT_DRIVER=libvirt
LIBVIRT_TYPE=kvm
LIBVIRT_CPU_MODE=none
# no cirros download: the tiny local image
DOWNLOAD_DEFAULT_IMAGES=False
IMAGE_URLS=file:///opt/stack/images/tiny-boot.img
DEFAULT_IMAGE_NAME=tiny-boot
LOGFILE=/opt/stack/logs/stack.sh.log
LOG_COLOR=False
VERBOSE=True
# the self-check runs as a phase of its own
COMPOSABLE_VERIFY=False
# DevStack waits 60 s for a service to answer; on a host whose cores are
# shared, keystone's uWSGI workers took longer than that to load.
SERVICE_TIMEOUT=600
EOF
    } > "$R/opt/stack/devstack/local.conf" || return 1
    in_ds chown stack:stack /opt/stack/devstack/local.conf || return 1
    echo "composable: $BRANCH $COMMIT"
    for project in devstack requirements keystone placement nova glance \
            neutron; do
        echo "$project: $(in_ds git -C /opt/stack/$project log -1 --format='%H %cd' 2>/dev/null || echo '(cloned by stack.sh)')"
    done
}

stack() {
    as_stack <<'EOF'
set -e
cd /opt/stack/devstack
# A stack left by an interrupted run goes first.
if [[ -f .stackenv ]]; then
    ./unstack.sh || true
fi
./stack.sh
EOF
}

# stack.sh runs local.sh last, and the container's restarts libvirtd:
# nova-compute then disables its service (COMPUTE_STATUS_DISABLED in
# Placement, so no server is scheduled) until it has reconnected.
wait_for_nova_compute() {
    as_stack <<'EOF'
export OS_CLOUD=devstack-admin
deadline=$((SECONDS + 300))
until [[ "$(openstack compute service list --service nova-compute -f value -c Status -c State)" == "enabled up" ]]; do
    if [[ $SECONDS -ge $deadline ]]; then
        echo "nova-compute is not enabled and up after 300 s"
        openstack compute service list
        exit 1
    fi
    sleep 5
done
echo "nova-compute is enabled and up"
EOF
}

selfcheck() {
    wait_for_nova_compute || return 1
    as_stack <<'EOF'
/opt/stack/composable/devstack/selfcheck.sh
EOF
}

# What a user does after stack.sh (doc/source/install/devstack.rst), as
# the demo user: boot with the memory flavor, see the lease bound and the
# disk in the guest, delete the server, see the lease go.
user_path() {
    as_stack <<'EOF'
set -ex
source /opt/stack/devstack/openrc demo demo >/dev/null
openstack flavor show composable.mem2g -c name -c properties
server=$(openstack server create --flavor composable.mem2g \
    --image tiny-boot --network private --wait -f value -c id \
    user-path-server)
deadline=$((SECONDS + 600))
status=
until [[ "$status" == bound ]]; do
    [[ $SECONDS -lt $deadline ]] || { echo "lease not bound: $status"; exit 1; }
    sleep 3
    status=$(openstack composable lease list --long -f value \
        -c instance_uuid -c status | awk -v s=$server '$2 == s {print $1}')
    case "$status" in error|bind_failed|released) exit 1 ;; esac
done
openstack composable lease list --long -c name -c status -c memory_mb \
    -c attach_mode -c instance_uuid
# Nova's libvirt domains carry the server's UUID.
until sudo virsh dumpxml $server | grep -q "protocol='iscsi'"; do
    [[ $SECONDS -lt $deadline ]] || { echo "no iSCSI disk in $server"; exit 1; }
    sleep 3
done
sudo virsh domblklist $server
openstack console log show $server | tail -n 3
openstack server delete --wait $server
until [[ -z "$(openstack composable lease list --long -f value -c instance_uuid | grep -x $server)" ]]; do
    [[ $SECONDS -lt $deadline ]] || { echo "the lease outlived the server"; exit 1; }
    sleep 3
done
echo "user path: ok"
EOF
}

# How many of the things unstack.sh must remove are still there: the
# plugin's flavors, aggregate and catalog entry, composable's targets in
# tgtd, the tmpfs, running composable services.
count_unstack_leftovers() {
    in_ds bash -s "$DB_PASSWORD" "$TARGET_PREFIX" <<'EOF'
pw=$1
prefix=$2
n=0
q() { mysql -uroot -p$pw -h127.0.0.1 -N -e "$1" 2>/dev/null || echo 0; }
c=$(q "SELECT COUNT(*) FROM nova_api.flavors WHERE name LIKE 'composable.%'"); echo "flavors: $c"; n=$((n + c))
c=$(q "SELECT COUNT(*) FROM nova_api.aggregates WHERE name = 'composable'"); echo "aggregates: $c"; n=$((n + c))
c=$(q "SELECT COUNT(*) FROM keystone.service WHERE type = 'composable'"); echo "catalog services: $c"; n=$((n + c))
c=$(tgtadm --lld iscsi --mode target --op show 2>/dev/null | grep -c -F ": $prefix"); echo "tgt targets: $c"; n=$((n + c))
c=$(grep -c ' /var/lib/composable/memory ' /proc/mounts); echo "tmpfs mounts: $c"; n=$((n + c))
c=$(systemctl list-units --no-legend --state=active 'devstack@composable*' | wc -l); echo "active units: $c"; n=$((n + c))
echo "unstack leftovers: $n"
exit $n
EOF
}

# After clean.sh also: the database (dropped by clean.sh), the libvirt
# hook, the unit files, the configuration, any composable process.
count_clean_leftovers() {
    in_ds bash -s "$TARGET_PREFIX" <<'EOF'
prefix=$1
n=0
c=$(ls -d /var/lib/mysql/composable 2>/dev/null | wc -l); echo "database: $c"; n=$((n + c))
c=$(ls /etc/libvirt/hooks/qemu.d/50-composable 2>/dev/null | wc -l); echo "libvirt hook: $c"; n=$((n + c))
c=$(ls /etc/systemd/system/devstack@composable* 2>/dev/null | wc -l); echo "unit files: $c"; n=$((n + c))
c=$(ls -d /etc/composable 2>/dev/null | wc -l); echo "configuration: $c"; n=$((n + c))
c=$(tgtadm --lld iscsi --mode target --op show 2>/dev/null | grep -c -F ": $prefix"); echo "tgt targets: $c"; n=$((n + c))
c=$(grep -c ' /var/lib/composable/memory ' /proc/mounts); echo "tmpfs mounts: $c"; n=$((n + c))
c=$(pgrep -f 'composable-(api|conductor|agent)|redfish_emulator' | wc -l); echo "processes: $c"; n=$((n + c))
echo "clean leftovers: $n"
exit $n
EOF
}

unstack() {
    as_stack <<'EOF' || return 1
cd /opt/stack/devstack && ./unstack.sh
EOF
    count_unstack_leftovers
}

clean() {
    as_stack <<'EOF' || return 1
cd /opt/stack/devstack && ./clean.sh
EOF
}

# A process and all its descendants, the deepest first (the commands of
# a phase run under ds-exec, in the container's namespaces).
kill_tree() {
    local pid=$1 child
    for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
        kill_tree "$child"
    done
    kill -TERM "$pid" 2>/dev/null
}

# The phase results, the summary line last, and the exit status: 0 only
# if every phase passed and nothing was left over. Called once, at the
# end or from the traps below, so that the summary line is printed
# whatever stops the script.
finish() {
    local rc=$1 phase
    if [[ "$SUMMARY_PRINTED" == yes ]]; then
        return
    fi
    SUMMARY_PRINTED=yes
    trap - EXIT INT TERM HUP
    for phase in container stack selfcheck user_path unstack clean; do
        log "phase $phase: ${RESULT[$phase]} ${WALL[$phase]} s"
    done
    echo "devstack-check: stack=${RESULT[stack]} selfcheck=${RESULT[selfcheck]} user_path=${RESULT[user_path]} unstack_leftovers=$LEFTOVERS wall_s=$(( $(date +%s) - T0 ))"
    if [[ $rc -eq 0 ]]; then
        for phase in container stack selfcheck user_path unstack clean; do
            [[ "${RESULT[$phase]}" == ok ]] || rc=1
        done
        [[ "$LEFTOVERS" == 0 ]] || rc=1
    fi
    exit "$rc"
}

# Interrupted (Ctrl-C, kill, a closed terminal): the running phase is
# stopped and marked so, the container is stopped unless --keep-running,
# and the summary line is still printed last.
interrupted() {
    local signal=$1 rc=$2
    trap '' INT TERM HUP
    log "interrupted by SIG$signal"
    if [[ -n "$CURRENT_PHASE" ]]; then
        RESULT[$CURRENT_PHASE]=interrupted
        WALL[$CURRENT_PHASE]=$(( $(date +%s) - PHASE_T0 ))
    fi
    if [[ -n "$PHASE_PID" ]]; then
        kill_tree "$PHASE_PID"
        wait "$PHASE_PID" 2>/dev/null
    fi
    if [[ "$KEEP_RUNNING" == no ]]; then
        "$RECIPE/stop-ds.sh" >/dev/null 2>&1
    fi
    finish "$rc"
}

# Anything else that ends the script early (an unset variable under
# set -u) still ends with the summary.
trap 'finish 1' EXIT
trap 'interrupted INT 130' INT
trap 'interrupted TERM 143' TERM
trap 'interrupted HUP 129' HUP

log "composable $BRANCH at $COMMIT; recipe $RECIPE; mirrors $MIRRORS; rootfs $R"
if phase container container; then
    if phase stack stack; then
        phase selfcheck selfcheck
        phase user_path user_path
    fi
    if phase unstack unstack; then
        :
    fi
    LEFTOVERS=$(sed -n 's/^unstack leftovers: //p' "$STATE/unstack.log")
    LEFTOVERS=${LEFTOVERS:-unknown}
    if phase clean clean; then
        clean_left=0
        count_clean_leftovers >> "$STATE/clean.log" 2>&1 || clean_left=$?
        grep -q 'composable: database composable dropped' \
            "$STATE/clean.log" || clean_left=$((clean_left + 1))
        if [[ $clean_left -ne 0 ]]; then
            RESULT[clean]=fail
        fi
        if [[ "$LEFTOVERS" =~ ^[0-9]+$ ]]; then
            LEFTOVERS=$((LEFTOVERS + clean_left))
        fi
        tail -n 9 "$STATE/clean.log" | sed 's/^/    /'
    fi
    if [[ -f "$STATE/unstack.log" ]]; then
        grep -A7 '^flavors:' "$STATE/unstack.log" | sed 's/^/    /'
    fi
fi
if [[ "$KEEP_RUNNING" == no ]]; then
    "$RECIPE/stop-ds.sh" >/dev/null
fi
finish 0
}
