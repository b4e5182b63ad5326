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
