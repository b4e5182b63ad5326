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

"""The usage plot of a memory lease's detail page: an inline SVG drawn on
the server (two polylines, no JavaScript), so it renders wherever the
page does."""

import datetime

WIDTH = 600
HEIGHT = 160


def _time(value):
    text = value.rstrip('Z')
    return datetime.datetime.fromisoformat(text)


def chart(samples, width=WIDTH, height=HEIGHT, limits=None):
    """What the template draws from ``samples`` (the API's usage samples,
    oldest first): {'used': points, 'size': points, 'max_mb', 'first',
    'last', 'count', 'width', 'height', 'limits'}; None without samples.
    Points are "x,y x,y ..." for an SVG polyline, y growing downwards.
    ``limits``: an elastic lease's (smallest, largest) size in MiB, drawn
    as lines across the plot: ``limits`` is then [{'mb', 'y'}, ...]."""
    if not samples:
        return None
    times = [_time(s['taken_at']) for s in samples]
    start = times[0]
    span = max((times[-1] - start).total_seconds(), 1.0)
    top = max(max(s['size_mb'] for s in samples),
              max(s['used_mb'] for s in samples),
              max(limits or (0,)), 1)

    def y_of(mb):
        return height - mb / top * height

    def points(key):
        out = []
        for when, sample in zip(times, samples):
            x = (when - start).total_seconds() / span * width
            out.append('%.1f,%.1f' % (x, y_of(sample[key])))
        return ' '.join(out)

    return {'used': points('used_mb'), 'size': points('size_mb'),
            'max_mb': top, 'first': samples[0]['taken_at'],
            'last': samples[-1]['taken_at'], 'count': len(samples),
            'width': width, 'height': height,
            'limits': [{'mb': mb, 'y': '%.1f' % y_of(mb)}
                       for mb in (limits or ())]}
