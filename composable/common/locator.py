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

"""Where a host finds what a fabric gave it, and what it found.

A fabric driver answers a bind with a :class:`Locator`: what the fabric
knows of the device -- vendor and device ids, often a serial, its own
reference, rarely the bus address the host will see -- so that the
compute node's agent can find the function after a rescan (see
composable.fabric.base). A CXL memory device's locator is its serial and
the fabric's name of the device.

The locator travels as its primitive (:meth:`Locator.to_primitive`), the
one serialised form: in the conductor's RPC to the agent, into the
attachment's ``details`` and the agent's device records (JSON), and
into the privileged PCI functions. It is parsed back with
:meth:`Locator.from_primitive` and nowhere else; that primitive is the
dict of five keys every release has sent, so a row or record written
before this type, and an agent or conductor one release older, read and
send the same thing.

:class:`AttachResult` is what the host's PCI module answers after an
attach (composable.privsep.pci_sysfs.attach_function).

Standard library only, and nothing else of composable: the privileged
PCI functions (composable.privsep.pci) check their argument with it, and
the privsep daemon must load nothing of the service it does not run.
"""

import dataclasses
import re
import typing

_ID = re.compile(r'(?:0x)?([0-9a-f]{1,4})')
_ADDRESS = re.compile(r'[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
# A serial is matched against the function's config space or only
# logged: printable, bounded.
_SERIAL = re.compile(r'[\x21-\x7e][\x20-\x7e]{0,127}')
MAX_FABRIC_REF = 1024
_CODE = re.compile(r'[a-z][a-z0-9_]{0,63}')

# Names the primitive had before this type, still read (a CXL memory
# device's locator was ``{'serial', 'device'}``).
_OLD_NAMES = {'device': 'fabric_ref'}


class InvalidLocator(ValueError):
    """A locator field that is not what it must be; ``field`` names it."""

    def __init__(self, field, message):
        super().__init__('locator %s: %s' % (field, message))
        self.field = field


def _text(field, value):
    if not isinstance(value, str):
        raise InvalidLocator(field, '%r is not text' % (value,))
    # Empty text says as little as None.
    return value or None


def pci_id(value, field='vendor_id'):
    """A vendor or device id as four lower-case hex digits ('10de' from
    '0x10DE'); None for None or empty text."""
    if value is None or _text(field, value) is None:
        return None
    match = _ID.fullmatch(value.lower())
    if not match:
        raise InvalidLocator(field, '%r is not a PCI id (up to four hex '
                                    'digits)' % (value,))
    return '%04x' % int(match.group(1), 16)


def pci_address(value, field='pci_address'):
    """A PCI address exactly as sysfs names it (``0000:41:00.0``), since
    it becomes part of paths written to as root; None for None or empty
    text."""
    if value is None or _text(field, value) is None:
        return None
    if not _ADDRESS.fullmatch(value):
        raise InvalidLocator(field, '%r is not a PCI address of the form '
                                    '0000:41:00.0' % (value,))
    return value


def _serial(value):
    if value is None or _text('serial', value) is None:
        return None
    if not _SERIAL.fullmatch(value):
        raise InvalidLocator('serial', '%r is not printable text of at '
                                       'most 128 characters' % (value,))
    return value


def _fabric_ref(value):
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        # A switch port number.
        value = str(value)
    text = _text('fabric_ref', value)
    if text is not None and (len(text) > MAX_FABRIC_REF or
                             not text.isprintable()):
        raise InvalidLocator('fabric_ref', 'must be printable text of at '
                                           'most %d characters'
                             % MAX_FABRIC_REF)
    return text


@dataclasses.dataclass(frozen=True)
class Locator(object):
    """What a host finds a device by; every field may be unknown (None).

    ``vendor_id``, ``product_id``: PCI ids, four lower-case hex digits.
    ``serial``: the serial the fabric reports (a PCIe Device Serial
    Number confirms the function; a vendor's product serial is only
    logged; a CXL memory device is found by it). ``pci_address``: the
    host's bus address, where the fabric knows it. ``fabric_ref``: the
    fabric's own reference (a Redfish resource block or endpoint URI, a
    Switchtec PDFID or physical port, a CXL memory device's name), shown
    in messages.

    Made only through the constructor, which checks and normalises every
    field (InvalidLocator names the bad one).
    """

    vendor_id: typing.Optional[str] = None
    product_id: typing.Optional[str] = None
    serial: typing.Optional[str] = None
    pci_address: typing.Optional[str] = None
    fabric_ref: typing.Optional[str] = None

    FIELDS = ('vendor_id', 'product_id', 'serial', 'pci_address',
              'fabric_ref')

    def __post_init__(self):
        checked = {'vendor_id': pci_id(self.vendor_id, 'vendor_id'),
                   'product_id': pci_id(self.product_id, 'product_id'),
                   'serial': _serial(self.serial),
                   'pci_address': pci_address(self.pci_address),
                   'fabric_ref': _fabric_ref(self.fabric_ref)}
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def to_primitive(self):
        """The one serialised form: a dict of the five fields."""
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_primitive(cls, value):
        """The locator ``value`` (a to_primitive dict) stands for.

        Keys left out are unknown; a CXL memory locator's old ``device``
        is its ``fabric_ref``; other keys are ignored (a newer sender may
        add some). InvalidLocator when ``value`` is no dict or a field is
        bad."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise InvalidLocator('(all)', 'a locator is a dict, not %s'
                                 % type(value).__name__)
        fields = {name: value.get(name) for name in cls.FIELDS}
        for old, new in _OLD_NAMES.items():
            if fields[new] is None and value.get(old) is not None:
                fields[new] = value[old]
        return cls(**fields)

    def filled_from(self, **known):
        """This locator with its unknown fields taken from ``known``
        (what the device's own row or record says)."""
        missing = {name: value for name, value in known.items()
                   if getattr(self, name) is None and value is not None}
        return dataclasses.replace(self, **missing) if missing else self

    def with_address(self, address):
        """This locator, at ``address`` on the host's bus."""
        return dataclasses.replace(self, pci_address=address)

    def describe(self):
        """The locator in words, for messages."""
        parts = []
        if self.pci_address:
            parts.append('address %s' % self.pci_address)
        if self.vendor_id or self.product_id:
            parts.append('ids %s:%s' % (self.vendor_id or '*',
                                        self.product_id or '*'))
        if self.serial:
            parts.append('serial %s' % self.serial)
        if self.fabric_ref:
            parts.append('fabric reference %s' % self.fabric_ref)
        return ', '.join(parts) or 'an empty locator'


@dataclasses.dataclass(frozen=True)
class AttachResult(object):
    """What the host's PCI module answers after an attach
    (composable.privsep.pci_sysfs.attach_function).

    ``address``: where the function is (always known once found, so that
    a refused attach can still be undone); ``found``: it was searched for
    now (not taken at the address recorded before). Bound: ``iommu_group``,
    ``vfio_node`` (/dev/vfio/<group>), ``bound`` (newly bound to vfio-pci)
    and ``members`` (of its IOMMU group). Refused after it was found:
    ``error`` (a composable.privsep.pci_sysfs.ErrorCode value) and
    ``message``. ``find_ms`` and ``bind_ms``: how long the search and the
    bind took, where the module says.
    """

    address: str
    found: bool = False
    iommu_group: typing.Optional[str] = None
    vfio_node: typing.Optional[str] = None
    bound: bool = False
    members: typing.Tuple[str, ...] = ()
    error: typing.Optional[str] = None
    message: typing.Optional[str] = None
    # How long the module's search and its group check with the bind
    # took, in ms, when it says (for the agent's debug log).
    find_ms: typing.Optional[float] = None
    bind_ms: typing.Optional[float] = None

    def __post_init__(self):
        object.__setattr__(self, 'address', pci_address(self.address,
                                                        'address'))
        if self.address is None:
            raise InvalidLocator('address', 'an attach answers the address '
                                            'of the function it found')
        for name in ('found', 'bound'):
            if not isinstance(getattr(self, name), bool):
                raise InvalidLocator(name, '%r is not true or false'
                                     % (getattr(self, name),))
        members = self.members
        if not isinstance(members, (list, tuple)):
            raise InvalidLocator('members', 'must be a list of PCI '
                                            'addresses')
        object.__setattr__(self, 'members', tuple(
            pci_address(m, 'members') for m in members))
        for name in ('iommu_group', 'vfio_node', 'message'):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidLocator(name, '%r is not text' % (value,))
        for name in ('find_ms', 'bind_ms'):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or
                                      not isinstance(value, (int, float))):
                raise InvalidLocator(name, '%r is not a number of ms'
                                     % (value,))
        if self.error is not None and (
                not isinstance(self.error, str) or
                not _CODE.fullmatch(self.error)):
            raise InvalidLocator('error', '%r is not an error code'
                                 % (self.error,))

    @property
    def ok(self):
        return self.error is None

    def to_primitive(self):
        value = dataclasses.asdict(self)
        value['members'] = list(self.members)
        return value

    @classmethod
    def from_primitive(cls, value):
        if not isinstance(value, dict):
            raise InvalidLocator('(all)', 'an attach result is a dict, not '
                                 '%s' % type(value).__name__)
        if value.get('address') is None:
            raise InvalidLocator('address', 'an attach answers the address '
                                            'of the function it found')
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: value[n] for n in names if value.get(n) is not None})
