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

"""The errors of the privileged functions, as they cross the privsep
channel: one exception type a module (composable.privsep.cxl.CxlError,
memory.ExtentFileError, lio.LioError, compute.ComputeError,
fabric.FabricError), each a PrivilegedError carrying an ErrorCode and a
message. Callers decide by the code, never by an errno number or an
exception's text.

oslo.privsep's client raises what the daemon raised by importing its
class and calling it with its arguments: a PrivilegedError's arguments
are the code's value and the message, both text, so the error the
caller gets is the one raised.

(composable.privsep.pci_sysfs has its own PciError and ErrorCode of the
same shape: that file also runs alone, with the standard library only,
inside a test machine's guest.)

Only the standard library is imported here.
"""

import enum
import errno
import functools


class ErrorCode(str, enum.Enum):
    """Why a privileged function failed."""

    # An argument that is not what it must be (a name, a size, a
    # command the function does not run).
    INVALID_ARGUMENT = 'invalid_argument'
    # The kernel refused: it needs root, or the file is not to be
    # touched.
    NOT_PERMITTED = 'not_permitted'
    # The kernel answered busy: something still uses the object (a
    # region made after another on a device, pages that cannot move).
    BUSY = 'busy'
    # No room left (a tmpfs full, a memory device with no free decoder).
    NO_SPACE = 'no_space'
    # The object exists already, and not as asked (an extent file of
    # another size).
    EXISTS = 'exists'
    # The object is not there.
    NOT_FOUND = 'not_found'
    # The device, driver or kernel interface needed is not there.
    NO_DEVICE = 'no_device'
    # The object is not of the kind asked for (not a regular file, a
    # directory).
    WRONG_TYPE = 'wrong_type'
    # The work did not end within its time.
    TIMED_OUT = 'timed_out'
    # What the function needs is not installed (a command, a library).
    NOT_INSTALLED = 'not_installed'
    # A command or library refused the work (tgtadm, mount, rtslib).
    REFUSED = 'refused'
    # Any other error of the kernel.
    OS_ERROR = 'os_error'
    # A fault of the function itself.
    INTERNAL = 'internal'

    @classmethod
    def parse(cls, value):
        """The code ``value`` names; INTERNAL for one this release does
        not know (a newer daemon's)."""
        try:
            return cls(value)
        except ValueError:
            return cls.INTERNAL


class PrivilegedError(Exception):
    """A privileged function failed: ``code`` (an ErrorCode) says why,
    ``message`` says it in words.

    Its arguments are the code's value and the message, so that the
    privsep daemon's client, which rebuilds an exception from its class
    and arguments, raises the same error."""

    def __init__(self, code, message):
        code = ErrorCode.parse(code)
        super().__init__(code.value, str(message))
        self.code = code
        self.message = str(message)

    def __str__(self):
        return self.message


_ERRNO_CODES = {
    errno.EACCES: ErrorCode.NOT_PERMITTED,
    errno.EPERM: ErrorCode.NOT_PERMITTED,
    errno.EBUSY: ErrorCode.BUSY,
    errno.ENOSPC: ErrorCode.NO_SPACE,
    errno.EEXIST: ErrorCode.EXISTS,
    errno.ENOENT: ErrorCode.NOT_FOUND,
    errno.ENODEV: ErrorCode.NO_DEVICE,
    errno.ENXIO: ErrorCode.NO_DEVICE,
    errno.EISDIR: ErrorCode.WRONG_TYPE,
    errno.ENOTDIR: ErrorCode.WRONG_TYPE,
    errno.ETIMEDOUT: ErrorCode.TIMED_OUT,
}


def error_code(exc):
    """The ErrorCode of any exception a privileged function raised."""
    if isinstance(exc, PrivilegedError):
        return exc.code
    if isinstance(exc, OSError):
        return _ERRNO_CODES.get(exc.errno, ErrorCode.OS_ERROR)
    if isinstance(exc, (ValueError, TypeError, LookupError)):
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.INTERNAL


def error_message(exc):
    """What ``exc`` says: an OSError's text and file name (without its
    errno number, which the code stands for), anything else's text."""
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename is not None:
            return '%s: %s' % (exc.strerror, exc.filename)
        return exc.strerror
    return str(exc) or type(exc).__name__


def typed(error_class):
    """A decorator: whatever the function raises leaves as an
    ``error_class`` (a PrivilegedError) with its code; one raised
    already leaves as it is."""
    def decorate(func):
        @functools.wraps(func)
        def typed_call(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except PrivilegedError:
                raise
            except Exception as exc:
                raise error_class(error_code(exc),
                                  error_message(exc)) from None
        return typed_call
    return decorate
