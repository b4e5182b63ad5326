from composable.api import schemas

# RFC 3720 caps an iSCSI name at 223 bytes.
_iqn = {'type': ['string', 'null'], 'minLength': 1, 'maxLength': 223}

_CREATE = schemas.obj({
    'name': schemas.name,
    'fabric': schemas.ident,
    'initiator_iqn': _iqn,
    'partition_id': schemas.short_string,
    'properties': schemas.free_object,
}, required=['name', 'fabric'])

_UPDATE = schemas.obj({
    'initiator_iqn': _iqn,
    'partition_id': schemas.short_string,
    'properties': schemas.free_object,
})

CREATE = {'1.0': _CREATE}
UPDATE = {'1.0': _UPDATE}
