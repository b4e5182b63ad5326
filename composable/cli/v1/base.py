#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""The create, list, show, set and delete commands of every kind of API object.

Each command class names a ``resource``; osc-lib gives every subclass its
own ``log`` (module and class name), so failures are reported under the
command that ran.
"""

from osc_lib.command import command

from composable.cli import utils


class Resource(object):
    """How the commands name, fetch and print one kind of API object."""

    def __init__(self, collection, label, dest=None, metavar=None,
                 render=utils.show):
        self.collection = collection
        self.label = label
        self.noun = label.lower()
        self.dest = dest or self.noun
        self.plural_dest = self.dest + 's'
        self.metavar = metavar or '<%s>' % self.noun.replace(' ', '-')
        self.render = render

    def add_ident(self, parser):
        parser.add_argument(self.dest, metavar=self.metavar,
                            help='%s (name or UUID)' % self.label)

    def add_idents(self, parser):
        parser.add_argument(self.plural_dest, metavar=self.metavar,
                            nargs='+',
                            help='%s(s) to delete (name or UUID)' % self.label)

    def ident(self, parsed_args):
        return getattr(parsed_args, self.dest)

    def idents(self, parsed_args):
        return getattr(parsed_args, self.plural_dest)

    def manager(self, app):
        return getattr(app.client_manager.composable, self.collection)


class _ResourceMixin(object):
    resource = None

    @property
    def manager(self):
        return self.resource.manager(self.app)


class CreateCommand(_ResourceMixin, command.ShowOne):
    """``create``: POST the fields built from the options, show the result.

    Subclasses add their options in ``get_parser``.
    """

    def fields(self, parsed_args):
        raise NotImplementedError()

    def take_action(self, parsed_args):
        # The client is set up before the options are checked, so a broken
        # client configuration is reported ahead of a usage mistake.
        manager = self.manager
        return self.resource.render(manager.create(**self.fields(parsed_args)))


class ListCommand(_ResourceMixin, command.Lister):
    """``list``: filters, --long, then the paging and sorting options."""

    columns = ()
    long_columns = ()
    # parsed_args attributes sent as list filters of the same name, in
    # this order (the order of the query string).
    filters = ()

    def add_filters(self, parser):
        """Add the filter options, shown before --long."""

    def list_filters(self, parsed_args):
        return {name: getattr(parsed_args, name) for name in self.filters}

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        self.add_filters(parser)
        parser.add_argument('--long', action='store_true', default=False,
                            help='Show more fields')
        utils.add_list_options(parser)
        return parser

    def take_action(self, parsed_args):
        columns = list(self.columns)
        if parsed_args.long:
            columns += self.long_columns
        filters = self.list_filters(parsed_args)
        filters.update(utils.list_params(parsed_args))
        items = self.manager.list(limit=parsed_args.limit, **filters)
        return utils.table(items, columns)


class ShowCommand(_ResourceMixin, command.ShowOne):
    """``show``: one object named by its positional argument.

    Commands acting on one object (``lease bind``) override take_action.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        self.resource.add_ident(parser)
        return parser

    def take_action(self, parsed_args):
        return self.resource.render(
            self.manager.get(self.resource.ident(parsed_args)))


class SetCommand(ShowCommand):
    """``set``: PATCH the changed fields; with none, show the object."""

    def add_options(self, parser):
        """Add the options naming what to change."""

    def changes(self, parsed_args):
        """The fields to send, from the options given."""
        return {}

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        self.add_options(parser)
        return parser

    def take_action(self, parsed_args):
        fields = self.changes(parsed_args)
        if not fields:
            return super().take_action(parsed_args)
        return self.resource.render(
            self.manager.update(self.resource.ident(parsed_args), **fields))


class DeleteCommand(_ResourceMixin, command.Command):
    """``delete``: each object given; fails if any of them failed."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        self.resource.add_idents(parser)
        return parser

    def take_action(self, parsed_args):
        utils.delete_all(self.log, self.resource.idents(parsed_args),
                         self.manager.delete, self.resource.noun)
