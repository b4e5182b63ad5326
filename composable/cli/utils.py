#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Argument parsing and output helpers shared by the commands."""

import argparse
import datetime
import decimal
import logging
import re

from osc_lib.cli import format_columns
from osc_lib import exceptions
from osc_lib import utils

LOG = logging.getLogger(__name__)

# Memory sizes are binary: G, GB and GiB all mean 1024 MiB.
_SIZE_UNITS = {
    'k': decimal.Decimal(1) / 1024,
    'm': decimal.Decimal(1),
    'g': decimal.Decimal(1024),
    't': decimal.Decimal(1024 * 1024),
}
_SIZE_RE = re.compile(
    r'^\s*(?P<num>\d+(\.\d+)?)\s*(?P<unit>([kmgt])(i?b)?)?\s*$',
    re.IGNORECASE)

SIZE_HELP = ('a size such as 512MiB, 1GiB, 2G or 1.5T; a bare number is '
             'MiB')


def parse_size(value, allow_zero=False):
    """Return a memory size in MiB (int).

    Accepts ``1024`` (MiB), ``512M``/``512MB``/``512MiB``, ``2G``/``2GiB``,
    ``1T``, ``1048576K``; units are binary and case-insensitive. The result
    must be a whole number of MiB, and positive unless ``allow_zero``.
    """
    match = _SIZE_RE.match(str(value))
    if not match:
        raise exceptions.CommandError(
            'Invalid size %r: expected %s' % (value, SIZE_HELP))
    number = decimal.Decimal(match.group('num'))
    unit = (match.group('unit') or 'm')[0].lower()
    size = number * _SIZE_UNITS[unit]
    if size != size.to_integral_value():
        raise exceptions.CommandError(
            'Invalid size %r: it must be a whole number of MiB' % value)
    size = int(size)
    if size < 0 or (size == 0 and not allow_zero):
        raise exceptions.CommandError(
            'Invalid size %r: it must be greater than zero' % value)
    return size


def size_type(allow_zero=False):
    """An argparse type for sizes (argparse reports the error)."""
    def _parse(value):
        try:
            return parse_size(value, allow_zero=allow_zero)
        except exceptions.CommandError as exc:
            raise argparse.ArgumentTypeError(str(exc))
    _parse.__name__ = 'size'
    return _parse


def positive_int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            '%r is not an integer' % (value,))
    if number < 1:
        raise argparse.ArgumentTypeError(
            '%r must be a positive integer' % (value,))
    return number


def non_negative_int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            '%r is not an integer' % (value,))
    if number < 0:
        raise argparse.ArgumentTypeError(
            '%r must be zero or more' % (value,))
    return number


def parse_time(value):
    """ISO 8601 -> "YYYY-MM-DDTHH:MM:SSZ" in UTC.

    A time without an offset is taken as UTC.
    """
    text = str(value).strip()
    if text[-1:] in ('z', 'Z'):
        text = text[:-1] + '+00:00'
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise exceptions.CommandError(
            'Invalid time %r: expected ISO 8601, for example '
            '2026-11-22T10:00:00Z or 2026-11-22T11:00:00+01:00' % value)
    if when.tzinfo is not None:
        when = when.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return when.replace(microsecond=0).isoformat() + 'Z'


def time_type(value):
    try:
        return parse_time(value)
    except exceptions.CommandError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def parse_key_value(value):
    if '=' not in value or not value.split('=', 1)[0]:
        raise argparse.ArgumentTypeError(
            'Expected KEY=VALUE, got %r' % (value,))
    return tuple(value.split('=', 1))


def key_values(pairs):
    return dict(pairs or [])


def add_list_options(parser, sort=True):
    parser.add_argument(
        '--limit', metavar='<limit>', type=positive_int,
        help='Maximum number of items to return (default: all, following '
             'the pages of the API)')
    parser.add_argument(
        '--marker', metavar='<uuid>',
        help='UUID of the last item of the previous page: list the items '
             'after it')
    if sort:
        parser.add_argument(
            '--sort-key', metavar='<field>',
            help='Sort by this field')
        parser.add_argument(
            '--sort-dir', choices=('asc', 'desc'),
            help='Sort direction (asc or desc)')


def list_params(parsed_args):
    params = {'marker': getattr(parsed_args, 'marker', None),
              'sort_key': getattr(parsed_args, 'sort_key', None),
              'sort_dir': getattr(parsed_args, 'sort_dir', None)}
    return {k: v for k, v in params.items() if v is not None}


class ReachableHostsColumn(format_columns.ListColumn):
    """A device's reachable_hosts: null is every host of its fabric,
    which an empty cell would hide; an empty list is no host."""

    def human_readable(self):
        if self._value is None:
            return '(every host)'
        if self._value == []:
            return '(no host)'
        if self._value == '':
            return ''  # a server older than 1.4 does not show it
        return super().human_readable()


# Fields holding lists or dicts, rendered readably in tables and kept as
# structures in JSON/YAML output.
_FORMATTERS = {
    'reachable_hosts': ReachableHostsColumn,
    'traits': format_columns.ListColumn,
    'device_traits': format_columns.ListColumn,
    'driver_info': format_columns.DictColumn,
    'properties': format_columns.DictColumn,
    'extents': format_columns.ListDictColumn,
    'devices': format_columns.ListDictColumn,
}

HIDDEN_FIELDS = ('links',)


def show_columns(item, first=()):
    """Every field of an API object but its links, in a stable order."""
    keys = [k for k in item if k not in HIDDEN_FIELDS]
    ordered = [k for k in first if k in item]
    ordered += sorted(k for k in keys if k not in ordered)
    return tuple(ordered)


def show(item, first=('uuid', 'name')):
    columns = show_columns(item, first)
    return columns, utils.get_dict_properties(item, columns,
                                              formatters=_FORMATTERS)


def table(items, columns):
    return (tuple(columns),
            (utils.get_dict_properties(item, columns,
                                       formatters=_FORMATTERS)
             for item in items))


def delete_all(log, idents, delete, noun):
    """Delete each item; report failures and fail if any failed."""
    failures = 0
    for ident in idents:
        try:
            delete(ident)
        except Exception as exc:
            failures += 1
            log.error('Failed to delete %s %s: %s', noun, ident, exc)
    if failures:
        raise exceptions.CommandError(
            '%d of %d %ss failed to delete.' % (failures, len(idents), noun))


def add_trait_change_options(parser):
    """``--trait``/``--no-trait`` of a ``set``, for merge_traits."""
    parser.add_argument(
        '--trait', metavar='<trait>', dest='traits', action='append',
        help='Trait to add (repeat for several)')
    parser.add_argument(
        '--no-trait', action='store_true', default=False,
        help='Remove every trait (then add those of --trait)')


def merge_traits(manager, ident, added, clear):
    """The trait list of a ``set --trait ... [--no-trait]``."""
    traits = []
    if not clear:
        traits = list(manager.get(ident).get('traits') or [])
    for trait in added or []:
        if trait not in traits:
            traits.append(trait)
    return traits
