#!/usr/bin/env python3
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

"""Memory data path benchmark: what the project's export costs on the
data path.

Exports one extent the way a memory node does (composable's tgt exporter:
a file reserved in a tmpfs mounted for the purpose, a tgtd target with
CHAP, restricted to one initiator name), and makes a second LUN by hand on
the same tgtd (tgtadm, a file of the same size on /dev/shm, no CHAP, open
to every initiator). Then it measures 4 KB random reads with libiscsi's
``iscsi-perf`` on both, in alternating rounds so that noise on the machine
hits both alike, and compares the medians. The last line is the summary:

  memory_datapath: iops=... raw_iops=... ratio=...

Target: ratio >= 0.9. Needs root, tgtd on 127.0.0.1:3260 (package tgt)
and iscsi-perf (package libiscsi-bin).

Usage: tools/bench/memory_datapath.py [--size-mb 256] [--seconds 5]
       [--rounds 5] [--queue-depth 32]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable import conf  # noqa: E402
from composable.conductor import flows  # noqa: E402
from composable.memory.exporters import base  # noqa: E402
from composable.memory.exporters import tgt  # noqa: E402
from composable.memory import tmpfs  # noqa: E402
from composable import privsep  # noqa: E402
from tests.functional import leftovers  # noqa: E402

CONF = conf.CONF
PORTAL = '127.0.0.1:3260'
INITIATOR = 'iqn.2026-11.org.openstack.composable.bench:compute-0'
RAW_IQN = 'iqn.2026-11.org.openstack.composable.bench:raw-%s' % (
    uuid.uuid4().hex[:8])
BLOCK = 512
IO_BYTES = 4096
_AVERAGE = re.compile(r'iops average (\d+)')


def tgtadm(*args):
    proc = subprocess.run(['tgtadm', '--lld', 'iscsi'] + list(args),
                          capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise RuntimeError('tgtadm %s: %s' % (' '.join(args),
                                              proc.stderr.strip()))
    return proc.stdout


def perf(url, seconds, depth):
    proc = subprocess.run(
        ['iscsi-perf', '-i', INITIATOR, '-m', str(depth),
         '-b', str(IO_BYTES // BLOCK), '-t', str(seconds), '-r', url],
        capture_output=True, text=True, timeout=seconds + 60)
    found = _AVERAGE.findall(proc.stdout)
    if proc.returncode or not found:
        raise RuntimeError('iscsi-perf failed (%s): %s' % (
            proc.returncode, (proc.stdout + proc.stderr)[-500:]))
    return int(found[-1])


class RawLun(object):
    """A LUN made by hand: what tgt gives without composable."""

    def __init__(self, size_mb):
        self.path = '/dev/shm/composable-bench-%s.img' % uuid.uuid4().hex
        subprocess.run(['fallocate', '-l', '%dM' % size_mb, self.path],
                       check=True)
        used = {t['tid'] for t in tgt.parse_show(
            tgtadm('--op', 'show', '--mode', 'target'))}
        self.tid = max(used | {1000}) + 1
        tgtadm('--op', 'new', '--mode', 'target', '--tid', str(self.tid),
               '--targetname', RAW_IQN)
        tgtadm('--op', 'new', '--mode', 'logicalunit', '--tid',
               str(self.tid), '--lun', '1', '--backing-store', self.path)
        tgtadm('--op', 'bind', '--mode', 'target', '--tid', str(self.tid),
               '--initiator-address', 'ALL')
        self.url = 'iscsi://%s/%s/1' % (PORTAL, RAW_IQN)

    def remove(self):
        subprocess.run(['tgtadm', '--lld', 'iscsi', '--op', 'delete',
                        '--force', '--mode', 'target', '--tid',
                        str(self.tid)], capture_output=True)
        os.unlink(self.path)


class ProjectExport(object):
    """One extent exported by composable's tgt exporter."""

    def __init__(self, size_mb):
        self.dir = tempfile.mkdtemp(prefix='composable-bench-mem-')
        area = tmpfs.TmpfsArea(path=self.dir, size_mb=size_mb + 16,
                               manage_mount=True, allow_overcommit=False,
                               node_name='bench-memory')
        self.exporter = tgt.TgtExporter('bench-memory', area=area)
        self.extent = {'uuid': str(uuid.uuid4()), 'index': 0,
                       'size_mb': size_mb, 'lease_uuid': str(uuid.uuid4()),
                       'memory_node': 'bench-memory', 'portal': PORTAL,
                       'transport': 'tcp'}
        user, secret = flows.new_chap_credentials()
        result = self.exporter.export(self.extent, INITIATOR, user, secret)
        self.extent['chap_username'] = user
        self.url = 'iscsi://%s%%%s@%s/%s/%s' % (
            user, secret, result['portal'], result['target_iqn'],
            result['lun'])
        assert result['target_iqn'] == base.target_iqn(self.extent)

    def remove(self):
        try:
            self.exporter.scrub(self.extent)
        finally:
            if os.path.ismount(self.dir):
                subprocess.run(['umount', self.dir], check=True)
            os.rmdir(self.dir)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--size-mb', type=int, default=256)
    parser.add_argument('--seconds', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--queue-depth', type=int, default=32)
    args = parser.parse_args(argv)
    for tool in ('tgtadm', 'iscsi-perf', 'fallocate'):
        if not shutil.which(tool):
            sys.exit('%s is not installed' % tool)
    if os.geteuid() != 0:
        sys.exit('run as root: it mounts a tmpfs and drives tgtd')

    CONF([], project='composable', default_config_files=[],
         default_config_dirs=[])
    CONF.set_override('portal', PORTAL, 'memory_node')
    # Root already: the privileged functions run in this process.
    privsep.sys_admin_pctxt.set_client_mode(False)

    project = ProjectExport(args.size_mb)
    try:
        raw = RawLun(args.size_mb)
        try:
            ours, theirs = [], []
            for i in range(args.rounds):
                # Alternate which one goes first, so that neither always
                # runs on a warmer (or busier) machine.
                if i % 2:
                    theirs.append(perf(raw.url, args.seconds,
                                       args.queue_depth))
                ours.append(perf(project.url, args.seconds,
                                 args.queue_depth))
                if not i % 2:
                    theirs.append(perf(raw.url, args.seconds,
                                       args.queue_depth))
                print('round %d: project export %d IOPS, hand-made LUN %d '
                      'IOPS' % (i, ours[-1], theirs[-1]), flush=True)
        finally:
            raw.remove()
    finally:
        project.remove()
    iops = statistics.median(ours)
    raw_iops = statistics.median(theirs)
    print('memory_datapath: iops=%d raw_iops=%d ratio=%.2f' % (
        iops, raw_iops, iops / raw_iops))
    return 0


if __name__ == '__main__':
    # Whatever the run leaves on the machine (mounts, targets, guests,
    # processes, databases) fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
