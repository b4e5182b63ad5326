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

"""Make the documentation's screenshots from those of the browser test.

``tox -e horizon`` saves every page it looks at in
``.tox/horizon/log/screenshots`` (``NN-name.png``). This picks the pages
the install guide shows, crops the empty space below the content, scales
them down and stores them as palette PNGs (each well under 150 KB) in
``doc/source/install/images``::

    .tox/horizon/bin/python tools/doc-screenshots.py \\
        .tox/horizon/log/screenshots

Needs Pillow (Horizon's environment has it).
"""

import glob
import os
import re
import sys

from PIL import Image
from PIL import ImageChops

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), 'doc', 'source', 'install',
                   'images')
# Screenshot name (without NN-) -> documentation image.
PAGES = {
    'create-lease': 'dashboard-create-lease.png',
    'lease-reserved': 'dashboard-lease-reserved.png',
    'lease-detail': 'dashboard-lease-detail.png',
    'lease-bound': 'dashboard-lease-bound.png',
    'pools': 'dashboard-pools.png',
    'admin-hosts': 'dashboard-admin-hosts.png',
    'lease-bind-host': 'dashboard-lease-bind-host.png',
    'lease-elastic-detail': 'dashboard-lease-elastic.png',
    'admin-create-sriov-pool': 'dashboard-admin-create-sriov-pool.png',
    'admin-pools-sriov': 'dashboard-admin-pools-sriov.png',
    'api-access': 'keystone-api-access.png',
}
WIDTH = 960
MAX_BYTES = 150 * 1024


def _content_box(image):
    """The image down to its last row that is not plain background."""
    rgb = image.convert('RGB')
    background = Image.new('RGB', rgb.size, rgb.getpixel(
        (rgb.width - 1, rgb.height - 1)))
    box = ImageChops.difference(rgb, background).getbbox()
    if box is None:
        return (0, 0) + rgb.size
    # Keep the full width (the page's layout) and a margin below.
    return (0, 0, rgb.width, min(rgb.height, box[3] + 16))


def convert(source, target):
    image = Image.open(source)
    image = image.crop(_content_box(image))
    if image.width > WIDTH:
        height = round(image.height * WIDTH / image.width)
        image = image.convert('RGB').resize((WIDTH, height),
                                            Image.LANCZOS)
    image = image.convert('RGB').quantize(colors=128)
    image.save(target, optimize=True)
    size = os.path.getsize(target)
    if size > MAX_BYTES:
        raise SystemExit('%s is %d bytes, more than %d' % (
            target, size, MAX_BYTES))
    return size


def main(argv):
    if len(argv) != 1:
        raise SystemExit(__doc__)
    shots = {}
    for path in glob.glob(os.path.join(argv[0], '[0-9]*-*.png')):
        name = re.sub(r'^\d+-', '', os.path.basename(path))[:-4]
        shots[name] = path
    missing = sorted(set(PAGES) - set(shots))
    if missing:
        raise SystemExit('no screenshot of %s in %s' % (
            ', '.join(missing), argv[0]))
    os.makedirs(OUT, exist_ok=True)
    for name, target in sorted(PAGES.items()):
        size = convert(shots[name], os.path.join(OUT, target))
        print('%s <- %s (%d bytes)' % (target, os.path.basename(
            shots[name]), size))


if __name__ == '__main__':
    main(sys.argv[1:])
