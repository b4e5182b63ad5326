from composable.api import schemas

KINDS = ['memory', 'gpu', 'pci']

_CREATE = schemas.obj({
    'name': schemas.name,
    'kind': {'type': 'string', 'enum': KINDS},
    'fabric': schemas.ident,
    'device_class': {'type': 'string', 'pattern': '^[A-Z0-9_]+$',
                     'minLength': 1, 'maxLength': 16},
    'traits': schemas.traits,
    'reserved': {'type': 'integer', 'minimum': 0, 'maximum': schemas.MAX_MB},
    # Memory pools only: extent size in MiB (at least 4, at most 1 TiB).
    'step_size': {'type': 'integer', 'minimum': 4, 'maximum': 2 ** 20},
    'description': schemas.description,
}, required=['name', 'kind', 'fabric'])

_UPDATE = schemas.obj({
    'name': schemas.name,
    'reserved': {'type': 'integer', 'minimum': 0, 'maximum': schemas.MAX_MB},
    'traits': schemas.traits,
    'description': schemas.description,
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
