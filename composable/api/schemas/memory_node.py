from composable.api import schemas

TRANSPORTS = ['iser', 'tcp']

_CREATE = schemas.obj({
    'name': schemas.name,
    'pool': schemas.ident,
    'capacity_mb': schemas.size_mb,
    'reserved_mb': schemas.reserved_mb,
    'exporter': {'type': 'string', 'minLength': 1, 'maxLength': 64},
    'portal': schemas.short_string,
    'transport': {'type': 'string', 'enum': TRANSPORTS},
    'enabled': {'type': 'boolean'},
}, required=['name', 'pool', 'capacity_mb'])

_UPDATE = schemas.obj({
    'capacity_mb': schemas.size_mb,
    'reserved_mb': schemas.reserved_mb,
    'portal': schemas.short_string,
    'transport': {'type': 'string', 'enum': TRANSPORTS},
    'enabled': {'type': 'boolean'},
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
