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

"""The console scripts. Imported before any of them imports oslo.messaging.

composable runs on native threads (oslo.messaging's threading executor),
never on eventlet. Two things, done here because every console script
imports this package first:

- oslo.service, which oslo.messaging imports at load time, picks its
  eventlet backend unless told otherwise: it is told to use its threading
  backend (a process that chose a backend before keeps its choice);
- futurist, which oslo.service's threading backend uses, imports eventlet
  whenever it is installed (to know whether it could use green threads),
  and eventlet's import prints a nine-line EventletDeprecationWarning. That
  one warning, which neither composable nor its users can act on, is
  ignored;
- eventlet imports dnspython, whose DNSSEC algorithms touch cryptography's
  DSA classes at import; cryptography 51 deprecates DSA and warns four
  times at every start, about DNSSEC code composable never runs. Those
  warnings (from ``dns.dnssecalgs`` only) are ignored too.

Every other warning is left as it is.
"""

import importlib
import warnings

from oslo_service import backend as _service_backend

# eventlet/__init__.py: warnings.warn(_DEPRECATED, EventletDeprecationWarning)
# where _DEPRECATED starts with a newline, then "Eventlet is deprecated."
EVENTLET_DEPRECATION = r'\s*Eventlet is deprecated\.'

warnings.filterwarnings('ignore', message=EVENTLET_DEPRECATION)
# dns/dnssecalgs/dsa.py: ``dsa.DSAPublicKey`` and friends, read at import,
# warn through cryptography's deprecated-attribute hook (its message starts
# with "DSA is deprecated"); the warning is attributed to that module.
DNSSEC_DSA_DEPRECATION = r'DSA is deprecated'
warnings.filterwarnings('ignore', message=DNSSEC_DSA_DEPRECATION,
                        module=r'dns\.dnssecalgs\.')


def _backend():
    """oslo.service's threading backend, when it can be loaded (it needs
    the ``threading`` extra of oslo.service, which requirements.txt asks
    for); its eventlet one otherwise, as before."""
    try:
        importlib.import_module('oslo_service.backend._threading')
    except ImportError:
        return _service_backend.BackendType.EVENTLET
    return _service_backend.BackendType.THREADING


if hasattr(_service_backend, 'register_backend_default_hook'):
    _service_backend.register_backend_default_hook(_backend)
