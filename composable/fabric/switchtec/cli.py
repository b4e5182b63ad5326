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

"""The switchtec CLI commands the driver runs, and what their answers
mean.

Commands are built here and run through the privileged function
composable.privsep.fabric.switchtec (which checks them again). A command
that exits non-zero becomes a DriverError carrying what the CLI printed:
the message, and for errors of the switch firmware the MRPC command and
error code (``exc.kwargs['mrpc']``, ``exc.kwargs['mrpc_error']``).
"""

from oslo_log import log as logging

from composable.common import exception
from composable.fabric.switchtec import parsers
from composable.privsep import fabric as priv_fabric

LOG = logging.getLogger(__name__)

PAX_ALL = 'PAX_ALL'
HVD_DETAIL = 'HVD_DETAIL'


class SwitchtecCli(object):
    """One switch (``device``) through one ``switchtec`` executable."""

    def __init__(self, device, program='switchtec', timeout=30,
                 runner=None):
        self.device = device
        self.program = program
        self.timeout = timeout
        self._runner = runner or priv_fabric.switchtec

    # ------------------------------------------------------------ commands

    def gfms_dump(self, dump_type, hvd_id=None):
        argv = ['fabric', 'gfms_dump', self.device, '-t', dump_type]
        if hvd_id is not None:
            argv += ['-d', str(int(hvd_id))]
        return self._run(argv)

    def pax_all(self):
        return self._parsed(parsers.parse_pax_all, self.gfms_dump(PAX_ALL),
                            'fabric gfms_dump -t %s' % PAX_ALL)

    def hvd_detail(self, hvd_id):
        return self._parsed(parsers.parse_hvd_detail,
                            self.gfms_dump(HVD_DETAIL, hvd_id),
                            'fabric gfms_dump -t %s' % HVD_DETAIL)

    def gfms_bind(self, switch_index, phys_port, logical_port, pdfid):
        self._run(['fabric', 'gfms_bind', self.device,
                   '-s', str(switch_index), '-p', str(phys_port),
                   '-l', str(logical_port), '-f', parsers.pdfid(pdfid)])

    def gfms_unbind(self, switch_index, phys_port, logical_port):
        self._run(['fabric', 'gfms_unbind', self.device,
                   '-s', str(switch_index), '-p', str(phys_port),
                   '-l', str(logical_port)])

    def port_bind(self, partition, logical_port, phys_port):
        self._run(['port-bind', self.device, '-p', str(partition),
                   '-l', str(logical_port), '-f', str(phys_port)])

    def port_unbind(self, partition, logical_port):
        self._run(['port-unbind', self.device, '-p', str(partition),
                   '-l', str(logical_port)])

    def port_bind_info(self, phys_port=None):
        argv = ['port-bind-info', self.device]
        if phys_port is not None:
            argv += ['-f', str(phys_port)]
        return self._parsed(parsers.parse_port_bind_info, self._run(argv),
                            'port-bind-info')

    # -------------------------------------------------------------- helpers

    def _what(self, argv):
        words = argv[:2] if argv[0] == 'fabric' else argv[:1]
        return 'switchtec %s on %s' % (' '.join(words), self.device)

    def _run(self, argv):
        full = [self.program] + list(argv)
        what = self._what(argv)
        try:
            rc, out, err = self._runner(full, self.timeout)
        except priv_fabric.FabricError as exc:
            # Refused by the privileged side before anything ran.
            raise exception.DriverError(
                reason='%s was refused: %s' % (what, exc))
        if rc is None:
            raise exception.DriverTimeout(what=what, timeout=self.timeout)
        if rc != 0:
            raise self._error(what, rc, err)
        return out

    @staticmethod
    def _error(what, rc, stderr):
        found = parsers.parse_error(stderr)
        if found is None:
            text = ' '.join((stderr or '').split())[:300]
            return exception.DriverError(
                reason='%s failed (exit %s)%s' % (
                    what, rc, ': %s' % text if text else ''),
                exit_code=rc)
        reason = '%s failed: %s' % (what, found['message'])
        if found['mrpc']:
            reason += ' (MRPC %s, error %s)' % (found['mrpc'], found['code'])
        return exception.DriverError(reason=reason, exit_code=rc,
                                     message_text=found['message'],
                                     mrpc=found['mrpc'],
                                     mrpc_error=found['code'])

    def _parsed(self, parser, out, command):
        try:
            return parser(out)
        except parsers.ParseError as exc:
            LOG.warning('Unexpected output of switchtec %(cmd)s on '
                        '%(dev)s: %(out)r', {'cmd': command,
                                             'dev': self.device,
                                             'out': (out or '')[:2000]})
            raise exception.DriverError(
                reason='switchtec %s on %s printed output the driver '
                       'cannot read (%s)' % (command, self.device, exc))
