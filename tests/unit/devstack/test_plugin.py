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

"""The DevStack plugin, phase by phase, against stand-ins of DevStack's
functions and of the ``openstack`` client (stand_ins.sh, cloud.py): a
whole DevStack cannot run on a test machine. What is checked is the
plugin's own logic: the options it writes into nova.conf and
composable.conf, the inventory and flavors it registers (once), its
check at test-config and what clean removes."""

import json
import os
import subprocess

import pytest

from composable.memory.exporters.base import TARGET_PREFIX

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))


class DevStack(object):

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.cloud = tmp_path / 'cloud'
        self.cloud.mkdir()
        self.calls = tmp_path / 'calls'
        self.nova_conf = tmp_path / 'nova.conf'
        self.composable_conf = tmp_path / 'composable.conf'
        self.env = {
            'PATH': os.environ['PATH'],
            'CALLS': str(self.calls),
            'CLOUD': str(self.cloud),
            'STAND_INS_DIR': HERE,
            'STAND_IN_DISTRO': 'ubuntu',
            'ENABLED_SERVICES': ('key,n-api,n-sch,n-cpu,rabbit,mysql,'
                                 'composable-api,composable-conductor,'
                                 'composable-agent'),
            'DEST': str(tmp_path),
            'DATA_DIR': str(tmp_path / 'data'),
            'TOP_DIR': str(tmp_path),
            'NOVA_CONF': str(self.nova_conf),
            'COMPOSABLE_CONF_DIR': str(tmp_path),
            'SERVICE_HOST': '10.0.0.5',
            'HOST_IP': '10.0.0.5',
            'SERVICE_PROTOCOL': 'http',
            'SERVICE_TIMEOUT': '60',
            'STACK_USER': 'stack',
            'REGION_NAME': 'RegionOne',
            'DEFAULT_IMAGE_NAME': 'cirros-0.6.3-x86_64-disk',
            'PRIVATE_NETWORK_NAME': 'private',
            'NOVA_FILTERS': 'ComputeFilter,ImagePropertiesFilter',
            'NOVA_NOTIFICATION_FORMAT': 'unversioned',
            'DATABASE_TYPE': 'mysql',
            'DATABASE_USER': 'root',
            'DATABASE_PASSWORD': 'secret',
            'MYSQL_HOST': '127.0.0.1',
        }

    def run(self, *phase, check=True, **env):
        script = ('source "$STAND_INS_DIR/stand_ins.sh"; '
                  'source %s/devstack/settings; '
                  'source %s/devstack/plugin.sh "$@"; '
                  'echo "NOVA_FILTERS=$NOVA_FILTERS"; '
                  'echo "NOVA_NOTIFICATION_FORMAT=$NOVA_NOTIFICATION_FORMAT"'
                  % (ROOT, ROOT))
        # A variable given as None is unset.
        full_env = dict(self.env, **env)
        full_env = {k: v for k, v in full_env.items() if v is not None}
        proc = subprocess.run(['bash', '-c', script, 'plugin'] + list(phase),
                              env=full_env, capture_output=True, text=True,
                              timeout=120)
        if check:
            assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    def calls_list(self):
        if not self.calls.exists():
            return []
        return self.calls.read_text().splitlines()

    def ini(self, path):
        """{section: {option: [values]}} of what the plugin wrote."""
        data = {}
        with open(path) as f:
            for line in f:
                section, option, value = line.rstrip('\n').split('\t', 2)
                data.setdefault(section, {}).setdefault(option, []).append(
                    value)
        return data

    def objects(self, kind):
        where = self.cloud / 'objects' / kind
        return sorted(os.listdir(where)) if where.exists() else []


@pytest.fixture
def devstack(tmp_path):
    return DevStack(tmp_path)


def test_settings_add_the_filter_once_and_ask_versioned_notifications(
        devstack):
    out = devstack.run('source').stdout
    assert 'NOVA_FILTERS=ComputeFilter,ImagePropertiesFilter,' \
        'ComposableFilter\n' in out
    assert 'NOVA_NOTIFICATION_FORMAT=both\n' in out

    again = devstack.run(
        'source', NOVA_FILTERS='ComputeFilter,ComposableFilter',
        NOVA_NOTIFICATION_FORMAT='versioned').stdout
    assert 'NOVA_FILTERS=ComputeFilter,ComposableFilter\n' in again
    assert 'NOVA_NOTIFICATION_FORMAT=versioned\n' in again


def test_post_config_configures_nova_and_composable(devstack):
    devstack.run('stack', 'post-config')
    nova = devstack.ini(devstack.nova_conf)
    assert nova['filter_scheduler']['available_filters'] == [
        'nova.scheduler.filters.all_filters',
        'composable.nova.scheduler.ComposableFilter']
    assert nova['composable']['auth_type'] == ['password']
    assert nova['composable']['username'] == ['nova']

    conf = devstack.ini(devstack.composable_conf)
    assert conf['DEFAULT']['host'] == ['compute-a']
    assert conf['nova']['notifications_enabled'] == ['True']
    assert conf['nova']['notifications_transport_url'] == [
        'rabbit://stackrabbit:secret@10.0.0.5:5672/']
    assert conf['nova']['username'] == ['composable']
    assert conf['placement']['username'] == ['composable']
    assert conf['agent']['memory_exporter'] == ['tgt']
    assert conf['memory_node']['manage_mount'] == ['True']
    assert conf['memory_node']['tmpfs_size_mb'] == ['4096']
    assert conf['memory_node']['portal'] == ['10.0.0.5:3260']
    # The fake fabric's GPUs never reach the host: no sysfs work.
    assert conf['compute_node']['pci_backend'] == ['noop']
    assert conf['compute_node']['pci_state_file'] == [
        str(devstack.tmp / 'data' / 'composable' / 'pci-devices.json')]
    assert conf['compute_node']['initiator_iqn'] == [
        'iqn.2010-10.org.openstack.composable:compute-a']
    helper = conf['composable_sys_admin']['helper_command'][0]
    assert helper.startswith('sudo /usr/local/bin/privsep-helper ')
    # The libvirt hook is installed on a compute node.
    assert any('composable-libvirt-hook --install' in call
               for call in devstack.calls_list())
    # The service user gets the admin role Nova and Placement ask for.
    assert 'create_service_user composable admin' in devstack.calls_list()


def test_post_config_without_nova_leaves_nova_alone(devstack):
    devstack.run('stack', 'post-config',
                 ENABLED_SERVICES='key,mysql,composable-api,composable-agent')
    assert not devstack.nova_conf.exists()
    conf = devstack.ini(devstack.composable_conf)
    assert 'nova' not in conf


def test_install_puts_the_data_plane_on_the_host(devstack):
    devstack.run('stack', 'install')
    calls = devstack.calls_list()
    assert 'install_package tgt' in calls
    assert 'install_package qemu-block-extra' in calls
    # A compute node gets the libvirt binding with the compute extra.
    assert [c for c in calls if c.startswith('setup_develop ')] == [
        'setup_develop %s compute' % (devstack.tmp / 'composable')]

    devstack.calls.unlink()
    devstack.run('stack', 'install', STAND_IN_DISTRO='fedora')
    assert 'install_package scsi-target-utils' in devstack.calls_list()

    devstack.calls.unlink()
    devstack.run('stack', 'install', COMPOSABLE_MEMORY_EXPORTER='noop')
    assert not [c for c in devstack.calls_list()
                if c.startswith('install_package tgt')]

    # The controller alone: no compute extra.
    devstack.calls.unlink()
    devstack.run('stack', 'install', ENABLED_SERVICES=(
        'key,n-api,mysql,composable-api,composable-conductor'))
    assert [c for c in devstack.calls_list()
            if c.startswith('setup_develop ')] == [
        'setup_develop %s' % (devstack.tmp / 'composable')]


def test_extra_registers_the_inventory_and_flavors_once(devstack):
    devstack.run('stack', 'extra')
    calls = devstack.calls_list()
    assert 'sudo systemctl enable --now tgt' in calls
    assert devstack.objects('aggregate') == ['composable']
    aggregate = json.loads(
        (devstack.cloud / 'objects' / 'aggregate' / 'composable')
        .read_text())
    assert aggregate['hosts'] == ['compute-a']
    assert devstack.objects('fabric') == ['devstack-fabric']
    fabric = json.loads((devstack.cloud / 'objects' / 'fabric' /
                         'devstack-fabric').read_text())
    assert '--aggregate-uuid' in fabric['args']
    assert 'aggregate-uuid-1' in fabric['args']
    assert devstack.objects('host') == ['compute-a']
    assert devstack.objects('pool') == ['gpu-pool', 'memory-pool']
    assert devstack.objects('memory-node') == ['compute-a']
    node = json.loads((devstack.cloud / 'objects' / 'memory-node' /
                       'compute-a').read_text())['args']
    assert node[node.index('--capacity') + 1] == '4096M'
    assert node[node.index('--exporter') + 1] == 'tgt'
    assert devstack.objects('device') == ['devstack-gpu-0', 'devstack-gpu-1']
    assert devstack.objects('flavor') == ['composable.gpu1',
                                          'composable.mem2g']
    mem = json.loads((devstack.cloud / 'objects' / 'flavor' /
                      'composable.mem2g').read_text())['args']
    assert 'resources:CUSTOM_COMPOSABLE_MEMORY_MB=2048' in mem
    proc_calls = len(calls)

    # A second stack.sh makes nothing twice.
    devstack.run('stack', 'extra')
    creates = [c for c in devstack.calls_list()[proc_calls:]
               if ' create ' in c and not c.startswith('sudo')]
    assert creates == []


def _domain_with_disk(devstack):
    (devstack.cloud / 'domain.xml').write_text(
        "<domain><devices><disk type='network'>"
        "<source protocol='iscsi' name='iqn.x/0'/></disk></devices>"
        "</domain>")


def _lease(devstack, name):
    return json.loads((devstack.cloud / 'objects' / 'lease' / name)
                      .read_text())


def test_check_at_test_config_passes_and_cleans_up(devstack):
    devstack.run('stack', 'extra')
    _domain_with_disk(devstack)
    proc = devstack.run('stack', 'test-config')
    out = proc.stdout
    # 1. the memory flavor's server, its lease bound and released
    assert 'composable check passed: lease lease-1 was bound to ' \
        'server-1 and released' in out
    # 2. lease-first: a guest-mode lease, a server booted with the hint
    hinted = _lease(devstack, 'composable-verify-lease')
    assert '--attach-mode' in hinted['args']
    assert hinted['args'][hinted['args'].index('--attach-mode') + 1] == \
        'guest'
    assert hinted['status'] == 'released'
    calls = devstack.calls_list()
    assert any(c.startswith('openstack server create ') and
               '--hint composable_lease=lease-composable-verify-lease' in c
               for c in calls)
    assert 'composable check passed: lease lease-composable-verify-lease ' \
        '(lease-first)' in out
    # 3. a GPU lease bound to this host, then released
    gpu = _lease(devstack, 'composable-verify-gpu')
    assert gpu['host'] == 'compute-a'
    assert gpu['status'] == 'released'
    assert 'GPU lease lease-composable-verify-gpu was bound to host ' \
        'compute-a' in out
    assert 'composable self-check passed' in out
    assert devstack.objects('server') == []
    assert any(c.startswith('openstack server create --image '
                            'cirros-0.6.3-x86_64-disk --network private '
                            '--wait -f value -c id --flavor '
                            'composable.mem2g') for c in calls)


def test_check_stops_stack_when_the_hinted_lease_is_not_bound(devstack):
    devstack.run('stack', 'extra')
    _domain_with_disk(devstack)
    (devstack.cloud / 'hint-lease-status').write_text('reserved')
    proc = devstack.run('stack', 'test-config', check=False,
                        COMPOSABLE_VERIFY_TIMEOUT='1')
    assert proc.returncode == 3
    assert "DIE: composable check: lease lease-composable-verify-lease " \
        "is 'reserved', not bound" in proc.stderr


def test_check_stops_stack_when_the_pool_usage_does_not_return(devstack):
    devstack.run('stack', 'extra')
    _domain_with_disk(devstack)
    (devstack.cloud / 'pool-leak-gpu-pool').write_text('')
    proc = devstack.run('stack', 'test-config', check=False,
                        COMPOSABLE_VERIFY_TIMEOUT='1')
    assert proc.returncode == 3
    assert 'DIE: composable check: pool gpu-pool uses 1, not 0 as before ' \
        'the check' in proc.stderr


@pytest.mark.parametrize('status', ['error', 'released'])
def test_check_stops_stack_when_the_lease_fails(devstack, status):
    devstack.run('stack', 'extra')
    (devstack.cloud / 'lease-status').write_text(status)
    proc = devstack.run('stack', 'test-config', check=False)
    assert proc.returncode == 3
    assert 'DIE: composable check: lease lease-1 of server server-1 is ' \
        '%s' % status in proc.stderr


def test_check_stops_stack_when_the_guest_never_gets_the_disk(devstack):
    devstack.run('stack', 'extra')
    (devstack.cloud / 'domain.xml').write_text('<domain/>')
    proc = devstack.run('stack', 'test-config', check=False,
                        COMPOSABLE_VERIFY_TIMEOUT='1')
    assert proc.returncode == 3
    assert 'is bound but domain instance-00000001 has no iSCSI disk' in \
        proc.stderr


def test_check_can_be_turned_off(devstack):
    devstack.run('stack', 'extra')
    devstack.run('stack', 'test-config', COMPOSABLE_VERIFY='False')
    assert not [c for c in devstack.calls_list()
                if c.startswith('openstack server create')]


def test_unstack_removes_nova_objects_service_targets_and_tmpfs(devstack):
    devstack.run('stack', 'extra')
    (devstack.cloud / 'objects' / 'service').mkdir()
    (devstack.cloud / 'objects' / 'service' / 'composable').write_text('{}')
    (devstack.cloud / 'mounted').write_text('')
    (devstack.cloud / 'tgt-show').write_text(
        'Target 1: %s1\n' % TARGET_PREFIX +
        '    System information:\n'
        'Target 2: iqn.2003-01.org.example:not-ours\n')
    # unstack.sh sources openrc: the demo user's variables are set, and
    # the plugin must act as DevStack's admin all the same.
    proc = devstack.run('unstack', OS_USERNAME='demo',
                        OS_PROJECT_NAME='demo')
    # Flavors, aggregate and the catalog entry go while the APIs answer
    # (the plugins' unstack phase runs before DevStack stops them).
    assert devstack.objects('flavor') == []
    assert devstack.objects('aggregate') == []
    assert devstack.objects('service') == []
    calls = devstack.calls_list()
    assert 'stop_process composable-agent' in calls
    assert ('sudo tgtadm --lld iscsi --mode target --op delete --force '
            '--tid 1') in calls
    assert not [c for c in calls if c.endswith('--tid 2')]
    assert 'sudo umount /var/lib/composable/memory' in calls
    # unstack.sh alone keeps the database.
    assert not [c for c in calls if c.startswith('mysql')]
    assert 'database composable dropped' not in proc.stdout


def test_plugin_and_check_know_the_exporters_target_names():
    # unstack removes composable's targets left in tgtd, and
    # tools/devstack-check.sh counts them, by the settings' prefix: it
    # must be the one the exporters name their targets with.
    with open(os.path.join(ROOT, 'devstack', 'settings')) as f:
        prefixes = [line.strip().split('=', 1)[1] for line in f
                    if line.startswith('COMPOSABLE_TARGET_PREFIX=')]
    assert prefixes == [TARGET_PREFIX]
    with open(os.path.join(ROOT, 'tools', 'devstack-check.sh')) as f:
        check = f.read()
    assert 'org.openstack.composable' not in check
    assert check.count('grep -c -F ": $prefix"') == 2


def test_unstack_for_clean_drops_the_database(devstack):
    # clean.sh runs "unstack.sh --all" (UNSTACK_ALL): the database server
    # still runs in the unstack phase and is stopped after it.
    proc = devstack.run('unstack', UNSTACK_ALL='-1')
    assert ('mysql -uroot -psecret -h127.0.0.1 -e DROP DATABASE IF EXISTS '
            'composable;') in devstack.calls_list()
    assert 'composable: database composable dropped' in proc.stdout

    devstack.calls.unlink()
    devstack.run('unstack', UNSTACK_ALL='-1', DATABASE_TYPE='postgresql',
                 DATABASE_HOST='127.0.0.1')
    assert ('dropdb -h127.0.0.1 -Uroot --if-exists composable'
            in devstack.calls_list())


def test_unstack_for_clean_selects_the_database_backend_itself(devstack):
    # unstack.sh sources lib/database before openrc has read local.conf:
    # no backend is selected (DATABASE_TYPE is empty) when the plugin's
    # unstack phase runs, and the database must be dropped all the same.
    proc = devstack.run('unstack', UNSTACK_ALL='-1', DATABASE_TYPE=None,
                        DATABASE_USER=None, MYSQL_HOST=None,
                        SERVICE_LOCAL_HOST='127.0.0.1')
    assert ('mysql -uroot -psecret -h127.0.0.1 -e DROP DATABASE IF EXISTS '
            'composable;') in devstack.calls_list()
    assert 'composable: database composable dropped' in proc.stdout

    devstack.calls.unlink()
    services = devstack.env['ENABLED_SERVICES'].replace(
        'mysql', 'postgresql')
    devstack.run('unstack', UNSTACK_ALL='-1', DATABASE_TYPE=None,
                 DATABASE_USER=None, MYSQL_HOST=None,
                 SERVICE_LOCAL_HOST='127.0.0.1', ENABLED_SERVICES=services)
    assert ('dropdb -h127.0.0.1 -Uroot --if-exists composable'
            in devstack.calls_list())


def test_unstack_for_clean_without_a_database_service_drops_nothing(
        devstack):
    # A compute-only host runs no database server.
    services = devstack.env['ENABLED_SERVICES'].replace(',mysql', '')
    proc = devstack.run('unstack', UNSTACK_ALL='-1', DATABASE_TYPE=None,
                        ENABLED_SERVICES=services)
    assert not [c for c in devstack.calls_list()
                if c.startswith(('mysql', 'dropdb'))]
    assert 'database composable dropped' not in proc.stdout


def test_clean_removes_hook_configuration_and_data_plane(devstack):
    (devstack.cloud / 'mounted').write_text('')
    devstack.run('clean')
    calls = devstack.calls_list()
    assert 'remove_uwsgi_config %s composable-api' % (
        devstack.tmp / 'composable-api-uwsgi.ini') in calls
    assert 'sudo umount /var/lib/composable/memory' in calls
    assert 'sudo rm -rf %s %s' % (devstack.tmp, devstack.tmp / 'data' /
                                  'composable') in calls


def test_extra_with_the_redfish_emulator_makes_it_the_fabric(devstack):
    # The fabric sync has put the emulator's two GPUs in the pool.
    devices = devstack.cloud / 'objects' / 'device'
    devices.mkdir(parents=True)
    for i in range(2):
        (devices / ('gpu%d' % i)).write_text('{}')
    devstack.run('stack', 'post-config', COMPOSABLE_REDFISH_EMULATOR='True')
    conf = devstack.ini(devstack.composable_conf)
    assert conf['fabric']['enabled_drivers'] == ['fake,redfish']
    assert conf['conductor']['fabric_sync_interval'] == ['20']
    devstack.run('stack', 'extra', COMPOSABLE_REDFISH_EMULATOR='True')
    # One fabric: the emulator, in the aggregate, with the host and pools.
    assert devstack.objects('fabric') == ['redfish-emulator']
    args = json.loads((devstack.cloud / 'objects' / 'fabric' /
                       'redfish-emulator').read_text())['args']
    assert args[args.index('--driver') + 1] == 'redfish'
    assert args[args.index('--aggregate-uuid') + 1] == 'aggregate-uuid-1'
    assert 'password=00112233445566778899aabbccddeeff' in args
    host = json.loads((devstack.cloud / 'objects' / 'host' /
                       'compute-a').read_text())['args']
    assert host[host.index('--fabric') + 1] == 'redfish-emulator'
    # No simulated GPUs: the emulator's are the pool's.
    assert devstack.objects('device') == ['gpu0', 'gpu1']
    emulator = json.loads((devstack.tmp / 'redfish-emulator.json')
                          .read_text())
    assert [s['name'] for s in emulator['systems']] == ['compute-a']
    assert {b['model'] for b in emulator['blocks']} == {'FakeGPU'}


def test_extra_waits_for_the_emulators_gpus(devstack):
    proc = devstack.run('stack', 'extra', check=False,
                        COMPOSABLE_REDFISH_EMULATOR='True',
                        SERVICE_TIMEOUT='0',
                        COMPOSABLE_FABRIC_SYNC_INTERVAL='1')
    assert proc.returncode == 3
    assert "the fabric sync did not put the Redfish emulator's GPUs in " \
        "gpu-pool" in proc.stderr


def test_extra_says_when_the_host_has_no_kernel_initiator(devstack):
    proc = devstack.run('stack', 'extra')
    assert 'this host has no kernel iSCSI initiator: host-mode memory ' \
        'leases (composable:attach_mode=host) cannot attach here' in \
        proc.stdout
    proc = devstack.run('stack', 'extra', COMPOSABLE_MEMORY_EXPORTER='noop')
    assert 'no kernel iSCSI initiator' not in proc.stdout


def test_every_composable_option_written_is_one_composable_has(devstack):
    # The real stack.sh found [memory]tmpfs_path and friends written
    # where composable reads [memory_node]: the agent did not start.
    from composable.conf import opts
    known = {(group if isinstance(group, str) else group.name, opt.dest)
             for group, group_opts in opts.list_opts()
             for opt in group_opts}
    devstack.run('stack', 'post-config', COMPOSABLE_REDFISH_EMULATOR='True')
    conf = devstack.ini(devstack.composable_conf)
    # Sections of other libraries DevStack's helpers fill in.
    foreign = {'keystone_authtoken', 'nova', 'placement',
               'oslo_messaging_notifications',
               # oslo.privsep's options of composable's privsep context
               'composable_sys_admin'}
    unknown = sorted('[%s]%s' % (section, option)
                     for section, options in conf.items()
                     if section not in foreign
                     for option in options
                     if (section, option) not in known and
                     (section != 'DEFAULT' or option not in (
                         'transport_url', 'debug', 'use_syslog')))
    assert unknown == []
