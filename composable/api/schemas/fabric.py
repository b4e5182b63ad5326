from composable.api import schemas

_CREATE = schemas.obj({
    'name': schemas.name,
    'driver': {'type': 'string', 'minLength': 1, 'maxLength': 64},
    'driver_info': schemas.free_object,
    'aggregate_uuid': schemas.nullable_uuid,
    'description': schemas.description,
}, required=['name', 'driver'])

_UPDATE = schemas.obj({
    'name': schemas.name,
    'driver_info': schemas.free_object,
    'aggregate_uuid': schemas.nullable_uuid,
    'description': schemas.description,
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
