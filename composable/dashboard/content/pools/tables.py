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

from django.template.loader import render_to_string
from django.utils.translation import gettext_lazy as _
from horizon import tables

# What a pool counts in: MiB for memory pools, devices for the others.
UNITS = {'memory': _('MiB')}


def amount(field):
    def show(pool):
        value = getattr(pool, field) or 0
        unit = UNITS.get(pool.kind, _('devices'))
        return '%s %s' % (value, unit)
    show.__name__ = field
    return show


def usage_bar(pool):
    """A bar of the used share of what the pool can lend."""
    usable = pool.usable
    percent = int(round(100.0 * (pool.used or 0) / usable)) if usable else 0
    return render_to_string('project/composable_pools/_usage_bar.html',
                            {'pool': pool, 'percent': min(percent, 100)})


class PoolsTable(tables.DataTable):
    name = tables.Column('name', verbose_name=_('Name'))
    kind = tables.Column('kind', verbose_name=_('Kind'))
    traits = tables.Column(lambda pool: ', '.join(pool.traits or []),
                           verbose_name=_('Traits'))
    capacity = tables.Column(amount('usable'), verbose_name=_('Capacity'))
    used = tables.Column(amount('used'), verbose_name=_('Used'))
    free = tables.Column(amount('free'), verbose_name=_('Free'))
    usage = tables.Column(usage_bar, verbose_name=_('Usage'))

    def get_object_id(self, pool):
        return pool.uuid

    class Meta(object):
        name = 'pools'
        verbose_name = _('Pools')
