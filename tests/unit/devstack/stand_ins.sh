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

# Stand-ins for the DevStack functions and commands devstack/plugin.sh
# uses, for its unit tests: a whole DevStack cannot run on a test machine.
# Each stand-in has the calling convention of DevStack's function of the
# same name and records its call, one line per call, in $CALLS. The cloud
# the "openstack" stand-in answers for is a directory of files ($CLOUD).

record() {
    printf '%s\n' "$*" >> "$CALLS"
}

# --- ini files: one "section<TAB>option<TAB>value" line per value, so
# the tests read what was written; several values make a multi-line
# option, as DevStack's iniset_multiline does.
iniset() {
    local file=$1 section=$2 option=$3 value
    shift 3
    if [[ -f "$file" ]]; then
        grep -v -F "$(printf '%s\t%s\t' "$section" "$option")" "$file" \
            > "$file.new" || true
        mv "$file.new" "$file"
    fi
    for value in "$@"; do
        printf '%s\t%s\t%s\n' "$section" "$option" "$value" >> "$file"
    done
}
iniset_multiline() {
    iniset "$@"
}
iniget() {
    [[ -f "$1" ]] || return 0
    grep -F "$(printf '%s\t%s\t' "$2" "$3")" "$1" | cut -f3 | \
        tr '\n' ' ' | sed 's/ $//'
}
configure_keystoneauth() {
    iniset "$1" "$3" auth_type password
    iniset "$1" "$3" username "$2"
}
configure_keystone_authtoken_middleware() {
    configure_keystoneauth "$1" "$2" keystone_authtoken
}
iniset_rpc_backend() {
    iniset "$2" DEFAULT transport_url "rabbit://stackrabbit:secret@10.0.0.5:5672/"
}
database_connection_url() {
    echo "mysql+pymysql://root:secret@127.0.0.1/$1?charset=utf8"
}
get_notification_url() {
    echo "rabbit://stackrabbit:secret@10.0.0.5:5672/"
}

# --- services and packages
# As DevStack's: a service by its name, by an is_<name>_enabled function
# of its lib (keystone's answers for "key"), and "nova" for any n-*.
is_service_enabled() {
    local service
    for service in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$service,"* ]] && return 0
        if type "is_${service}_enabled" >/dev/null 2>&1; then
            "is_${service}_enabled" && return 0
        fi
        [[ "$service" == nova && ",$ENABLED_SERVICES" == *",n-"* ]] && \
            return 0
    done
    return 1
}
is_keystone_enabled() {
    [[ ",$ENABLED_SERVICES," == *",key,"* ]]
}
enable_service() {
    local service
    for service in "$@"; do
        is_service_enabled "$service" || \
            ENABLED_SERVICES="$ENABLED_SERVICES,$service"
    done
}
define_plugin() { :; }
plugin_requires() { :; }
is_ubuntu() { [[ "$STAND_IN_DISTRO" == ubuntu ]]; }
is_fedora() { [[ "$STAND_IN_DISTRO" == fedora ]]; }
trueorfalse() {
    local default=$1 var=$2
    case "${!var:-$default}" in
        1|yes|Yes|YES|true|True|TRUE|on|On|ON) echo True ;;
        *) echo False ;;
    esac
}
get_python_exec_prefix() { echo /usr/local/bin; }
install_package() { record install_package "$@"; }
setup_develop() { record setup_develop "$@"; }
pip_install() { record pip_install "$@"; }
write_uwsgi_config() { record write_uwsgi_config "$@"; }
remove_uwsgi_config() { record remove_uwsgi_config "$@"; }
run_process() { record run_process "$1"; }
stop_process() { record stop_process "$1"; }
recreate_database() { record recreate_database "$@"; }
wait_for_service() { return 0; }
wait_for_compute() { return 0; }
create_service_user() { record create_service_user "$@"; }
get_or_create_service() { record get_or_create_service "$1" "$2"; }
get_or_create_endpoint() { record get_or_create_endpoint "$@"; }
generate_hex_string() { echo 00112233445566778899aabbccddeeff; }
echo_summary() { :; }
die() {
    # DevStack's die: a line number, then the message; it ends stack.sh.
    shift
    echo "DIE: $*" >&2
    exit 3
}
# The plugin's waits poll; the stand-in cloud answers at once.
sleep() { :; }
mountpoint() { [[ -e "$CLOUD/mounted" ]]; }
hostname() { echo compute-a; }

# --- commands run as root
sudo() {
    record sudo "$@"
    case "$1" in
        virsh) cat "$CLOUD/domain.xml" 2>/dev/null ;;
        tgtadm)
            if [[ "$*" == *"--op show"* ]]; then
                cat "$CLOUD/tgt-show" 2>/dev/null
            fi ;;
        umount) rm -f "$CLOUD/mounted" ;;
        tee) shift; builtin command tee "$@" ;;
    esac
    return 0
}
# tgtadm is there; iscsiadm only when the cloud has $CLOUD/iscsiadm.
command() {
    if [[ "$1" == -v && "$2" == tgtadm ]]; then
        return 0
    fi
    if [[ "$1" == -v && "$2" == iscsiadm ]]; then
        [[ -e "$CLOUD/iscsiadm" ]]
        return
    fi
    builtin command "$@"
}
# As lib/database's: the backend is the enabled database service, and
# the MYSQL_* variables give the DATABASE_* defaults.
initialize_database_backends() {
    local backend
    for backend in mysql postgresql; do
        is_service_enabled $backend && DATABASE_TYPE=$backend
    done
    [[ -z "$DATABASE_TYPE" ]] && return 1
    MYSQL_HOST=${MYSQL_HOST:-$SERVICE_LOCAL_HOST}
    MYSQL_USER=${MYSQL_USER:-root}
    DATABASE_HOST=${DATABASE_HOST:-$MYSQL_HOST}
    DATABASE_USER=${DATABASE_USER:-$MYSQL_USER}
    return 0
}
mysql() { record mysql "$@"; }
dropdb() { record dropdb "$@"; }

# --- the cloud
openstack() {
    record openstack "$@"
    python3 "$STAND_INS_DIR/cloud.py" "$CLOUD" "$@"
}
