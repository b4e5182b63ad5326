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

import datetime
import re
import threading

from oslo_utils import timeutils
from oslo_utils import uuidutils

from composable.common import exception

_SECRET_KEY = re.compile(r'(password|secret|token|credential|key)', re.I)
MASK = '***'


def utcnow():
    """Naive UTC now, as stored in the database."""
    return timeutils.utcnow().replace(tzinfo=None, microsecond=0)


def to_naive_utc(value):
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value


def isotime(value):
    if value is None:
        return None
    return value.replace(microsecond=0).isoformat() + 'Z'


def is_uuid_like(value):
    return uuidutils.is_uuid_like(value)


def mask_secrets(info):
    """Copy of a driver_info dict with every secret-looking value masked.

    Used for API output and logs: fabric credentials are stored but never
    shown back.
    """
    if not isinstance(info, dict):
        return info
    masked = {}
    for key, value in info.items():
        if isinstance(value, dict):
            masked[key] = mask_secrets(value)
        elif _SECRET_KEY.search(str(key)) and value not in (None, ''):
            masked[key] = MASK
        else:
            masked[key] = value
    return masked


def remembered_per_function(inspect_signature):
    """``inspect_signature`` (a function of a function, such as
    inspect.getfullargspec) remembered per function, for libraries that
    inspect the same functions on every request: the signature of a
    function never changes while the process runs. Bound methods share
    their function's entry; what cannot be a key is inspected every time.
    """
    specs = {}

    def remembered(func):
        key = getattr(func, '__func__', func)
        try:
            return specs[key]
        except KeyError:
            spec = specs[key] = inspect_signature(func)
            return spec
        except TypeError:
            return inspect_signature(func)

    remembered.remembers = True
    return remembered


def call_with_timeout(func, timeout, what, name=None):
    """func(), run in a daemon thread; DriverTimeout (about ``what``) when
    it takes longer than ``timeout`` seconds.

    A call that times out keeps running in its thread: callers use this
    for idempotent operations only, which the next attempt redoes or
    undoes. What func raises is raised here.
    """
    result = {}

    def run():
        try:
            result['value'] = func()
        except BaseException as exc:  # re-raised in the caller
            result['error'] = exc

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise exception.DriverTimeout(what=what, timeout=timeout)
    if 'error' in result:
        raise result['error']
    return result.get('value')
