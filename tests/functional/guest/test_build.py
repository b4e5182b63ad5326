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

"""The tiny guest's initramfs is a valid newc archive with what /init
needs."""

import gzip
import shutil
import subprocess

import pytest

from tests.functional.guest import build


def test_initramfs_contents(tmp_path):
    if not shutil.which('cpio'):
        pytest.skip('cpio is not installed')
    try:
        image = build.build(cache=str(tmp_path / 'cache'))
    except build.GuestUnavailable as exc:
        pytest.skip(str(exc))
    with open(image.initrd, 'rb') as f:
        archive = gzip.decompress(f.read())
    listing = subprocess.run(['cpio', '-t', '-v'], input=archive,
                             capture_output=True, check=True).stdout.decode()
    names = {line.split()[-1] if '->' not in line else line.split()[-3]
             for line in listing.splitlines()}
    for name in ('init', 'bin/busybox', 'bin/sh', 'dev/console',
                 'lib/modules/virtio_pci.ko', 'lib/modules/virtio_blk.ko'):
        assert name in names
    console = [line for line in listing.splitlines()
               if line.endswith(' dev/console')]
    assert console[0].startswith('c')
    # Built once, then found in the cache.
    again = build.build(cache=str(tmp_path / 'cache'))
    assert again.initrd == image.initrd
