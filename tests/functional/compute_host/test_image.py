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

"""The compute host guest's initramfs: what /init loads, and a Python
whose trimmed standard library runs the agent's PCI module."""

import gzip
import json
import os
import shutil
import subprocess

import pytest

from tests.functional.compute_host import image as image_mod
from tests.functional.guest import build


@pytest.fixture(scope='module')
def unpacked(tmp_path_factory):
    if not shutil.which('cpio'):
        pytest.skip('cpio is not installed')
    cache = tmp_path_factory.mktemp('cache')
    try:
        image = image_mod.build_image(cache=str(cache))
    except build.GuestUnavailable as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp('root')
    with open(image.initrd, 'rb') as f:
        archive = gzip.decompress(f.read())
    subprocess.run(['cpio', '-i', '-d', '--quiet'], input=archive,
                   cwd=str(root), check=True, capture_output=True)
    return image, str(root), str(cache)


def test_contents(unpacked):
    image, root, cache = unpacked
    assert 'intel_iommu=on' in image.cmdline.split()
    for name in ('init', 'bin/busybox', 'usr/sbin/qemu-ga',
                 'usr/bin/python3.11', 'usr/lib/python3.11/os.py',
                 'usr/lib/python3.11/json/decoder.py',
                 'lib/modules/vfio.ko', 'lib/modules/vfio_iommu_type1.ko',
                 'lib/modules/vfio-pci.ko', 'lib/modules/virtio_pci.ko'):
        assert os.path.exists(os.path.join(root, name)), name
    # Only what the PCI module needs, not the whole library.
    stdlib = os.path.join(root, 'usr/lib/python3.11')
    count = sum(len(files) for _, _, files in os.walk(stdlib))
    assert count < 80, count
    assert not os.path.exists(os.path.join(stdlib, 'unittest'))
    # Built once, then found in the cache.
    assert image_mod.build_image(cache=cache).initrd == image.initrd


def test_trimmed_python_runs_the_pci_module(unpacked, tmp_path):
    image, root, _ = unpacked
    home = os.path.join(root, 'usr')
    # The module as the guest holds it: pci.py in a directory of its own.
    module_dir = tmp_path / 'module'
    module_dir.mkdir()
    shutil.copy(image_mod.PCI_MODULE, str(module_dir / 'pci.py'))
    script = (
        'import json, sys; sys.argv = ["pci.py"] + sys.argv[1:]; '
        'sys.path.insert(0, %r); import pci; '
        'print(json.dumps(sys.path)); sys.exit(pci.main())'
        % str(module_dir))
    fake = tmp_path / 'sys' / 'bus' / 'pci' / 'devices' / '0000:00:01.0'
    fake.mkdir(parents=True)
    # -S and a clean environment but PYTHONHOME: the interpreter finds
    # nothing of the machine's library, only the image's.
    proc = subprocess.run(
        [os.path.join(home, 'bin', 'python3.11'), '-S', '-c', script,
         'functions', json.dumps({'root': str(tmp_path)})],
        env={'PYTHONHOME': home}, capture_output=True, text=True,
        timeout=60)
    assert proc.returncode == 0, proc.stderr
    path_line, answer = proc.stdout.splitlines()
    assert all(p.startswith(root) or p in ('', str(module_dir))
               for p in json.loads(path_line)), path_line
    assert json.loads(answer) == {'result': ['0000:00:01.0']}
