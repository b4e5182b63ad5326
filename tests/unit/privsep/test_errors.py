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

"""The privileged functions' errors (composable.privsep.errors): one
type a module, a code and a message, rebuilt by oslo.privsep's client
from their class and arguments."""

import errno
import socket

from oslo_privsep import comm
from oslo_privsep import daemon
from oslo_utils import importutils
import pytest

from composable import privsep
from composable.privsep import compute as priv_compute
from composable.privsep import cxl as priv_cxl
from composable.privsep import errors
from composable.privsep import fabric as priv_fabric
from composable.privsep import lio as priv_lio
from composable.privsep import memory as priv_memory


@pytest.mark.parametrize('exc,code', [
    (OSError(errno.EBUSY, 'Device or resource busy'), 'BUSY'),
    (PermissionError(errno.EACCES, 'Permission denied'), 'NOT_PERMITTED'),
    (OSError(errno.EPERM, 'Operation not permitted'), 'NOT_PERMITTED'),
    (OSError(errno.ENOSPC, 'No space left on device'), 'NO_SPACE'),
    (OSError(errno.EEXIST, 'File exists'), 'EXISTS'),
    (FileNotFoundError(errno.ENOENT, 'No such file or directory'),
     'NOT_FOUND'),
    (OSError(errno.ENODEV, 'No such device'), 'NO_DEVICE'),
    (OSError(errno.EISDIR, 'Is a directory'), 'WRONG_TYPE'),
    (OSError(errno.ETIMEDOUT, 'Connection timed out'), 'TIMED_OUT'),
    (OSError(errno.EIO, 'Input/output error'), 'OS_ERROR'),
    (ValueError('bad'), 'INVALID_ARGUMENT'),
    (TypeError('bad'), 'INVALID_ARGUMENT'),
    (RuntimeError('bug'), 'INTERNAL')])
def test_every_error_has_a_code(exc, code):
    assert errors.error_code(exc) is errors.ErrorCode[code]

    @errors.typed(priv_cxl.CxlError)
    def failing():
        raise exc

    with pytest.raises(priv_cxl.CxlError) as caught:
        failing()
    assert caught.value.code is errors.ErrorCode[code]
    assert caught.value.args == (caught.value.code.value,
                                 caught.value.message)


def test_the_message_is_the_text_without_the_errno_number():
    plain = OSError(errno.EBUSY, 'region0 is committed')
    assert errors.error_message(plain) == 'region0 is committed'
    opened = PermissionError(errno.EACCES, 'Permission denied',
                             '/sys/bus/cxl/devices/region0/commit')
    assert errors.error_message(opened) == (
        'Permission denied: /sys/bus/cxl/devices/region0/commit')
    assert errors.error_message(ValueError('not a name')) == 'not a name'
    assert errors.error_message(RuntimeError()) == 'RuntimeError'


def test_a_typed_error_leaves_as_it_is():
    raised = priv_lio.LioError(errors.ErrorCode.REFUSED, 'LIO: no')

    @errors.typed(priv_memory.MemoryNodeError)
    def failing():
        raise raised

    with pytest.raises(priv_lio.LioError) as caught:
        failing()
    assert caught.value is raised


def test_an_unknown_code_is_internal():
    error = priv_cxl.CxlError('a-code-of-a-newer-daemon', 'what it said')
    assert error.code is errors.ErrorCode.INTERNAL
    assert str(error) == 'what it said'


@pytest.fixture
def in_daemon():
    """oslo.privsep's daemon side, in this process."""
    privsep.sys_admin_pctxt.set_client_mode(False)
    yield daemon.Daemon(None, privsep.sys_admin_pctxt)
    privsep.sys_admin_pctxt.set_client_mode(True)


def _through_the_channel(server, name, args):
    """What the privsep client raises when the daemon's ``name(*args)``
    fails: the daemon answers (class path, arguments), the channel's
    serialiser carries them, the client calls the class with them."""
    reply = server._process_cmd('msg-1', comm.Message.CALL, name, args, {})
    assert reply[0] == comm.Message.ERR.value
    left, right = socket.socketpair()
    try:
        comm.Serializer(left).send(reply)
        received = next(iter(comm.Deserializer(right)))
    finally:
        left.close()
        right.close()
    return importutils.import_class(received[1])(*received[2])


@pytest.mark.parametrize('name,args,error_class,code,text', [
    ('composable.privsep.memory.create_extent_file',
     ('relative/dir', 'extent-1', 1), priv_memory.MemoryNodeError,
     'INVALID_ARGUMENT', 'is not an absolute directory path'),
    ('composable.privsep.memory.remove_extent_file',
     ('/', 'tmp'), priv_memory.MemoryNodeError, 'WRONG_TYPE',
     '//tmp is a directory'),
    ('composable.privsep.memory.tgtadm', ('--op show',),
     priv_memory.MemoryNodeError, 'INVALID_ARGUMENT',
     'tgtadm arguments must be a list of strings'),
    ('composable.privsep.compute.mkswap', ('/tmp',),
     priv_compute.ComputeError, 'INVALID_ARGUMENT',
     '/tmp is not a device under /dev'),
    ('composable.privsep.fabric.switchtec', (['rm', '-rf', '/'],),
     priv_fabric.FabricError, 'INVALID_ARGUMENT', 'switchtec'),
    ('composable.privsep.cxl.release_dax', ('../etc',),
     priv_cxl.CxlError, 'INVALID_ARGUMENT',
     'is not a CXL, DAX or memory sysfs name')])
def test_errors_cross_the_privsep_channel_with_their_code(
        in_daemon, name, args, error_class, code, text):
    rebuilt = _through_the_channel(in_daemon, name, args)
    assert type(rebuilt) is error_class
    assert rebuilt.code is errors.ErrorCode[code]
    assert text in rebuilt.message and str(rebuilt) == rebuilt.message


def test_a_lio_error_crosses_the_privsep_channel(in_daemon, monkeypatch):
    def no_module(name):
        raise ImportError(name)

    monkeypatch.setattr(priv_lio.importlib, 'import_module', no_module)
    rebuilt = _through_the_channel(
        in_daemon, 'composable.privsep.memory.lio_target_names', ())
    assert type(rebuilt) is priv_lio.LioError
    assert rebuilt.code is errors.ErrorCode.NOT_INSTALLED
    assert 'rtslib-fb' in rebuilt.message
