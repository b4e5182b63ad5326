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

"""What a Redfish fabric's zones, endpoints and connections say about
which device is given to which host, and which hosts could be given it.

The driver reads a fabric once per operation into a :class:`Zoning` and
asks it; nothing here talks HTTP.

- A host is a computer system; its *initiator* endpoints are those whose
  ConnectedEntities name (with role Initiator) the system or a processor
  or memory of it (``/redfish/v1/Systems/<id>/...``).
- A zone of endpoints whose initiators all belong to one system is that
  system's *own* zone: a target endpoint in it is given to that system.
  A Connection from one of the system's initiators to a target does the
  same on services that connect endpoints instead.
- Reachability, where the service says it: an own zone's
  ``Links.Endpoints@Redfish.AllowableValues`` (what the zone may be
  given), a zone of endpoints shared by several systems' initiators (or
  the fabric's ``Default`` zone), and a ``ZoneOfZones`` holding a
  system's own zone and a zone that holds the device. Where the service
  says none of these, every host with an initiator on the fabric can
  reach every device.
"""

from composable.fabric.redfish import models


class Zoning(object):

    def __init__(self, fabric, systems_path):
        self.fabric = fabric
        self.systems_path = systems_path.rstrip('/')
        # Endpoint URIs in the order the fabric lists them.
        self.listed = []
        self.endpoints = {}
        self.zones = {}
        self.connections = {}
        # URI -> why it could not be read (endpoints, zones, connections).
        self.unreadable = {}
        self._members = {}
        self._initiators = {}

    # ------------------------------------------------------- building

    def add(self, item):
        if isinstance(item, models.Endpoint):
            self.endpoints[item.uri] = item
        elif isinstance(item, models.FabricZone):
            self.zones[item.uri] = item
        else:
            self.connections[item.uri] = item

    def finish(self):
        for uri, endpoint in self.endpoints.items():
            systems = endpoint.initiator_systems(self.systems_path)
            if systems:
                self._initiators[uri] = systems
        for zone in self.zones.values():
            members = set(zone.endpoints)
            members.update(e.uri for e in self.endpoints.values()
                           if zone.uri in e.zones)
            self._members[zone.uri] = members
        return self

    # ------------------------------------------------------- queries

    def members(self, zone_uri):
        return self._members.get(zone_uri, set())

    def is_initiator(self, uri):
        return uri in self._initiators

    def initiators_of(self, system):
        return sorted(uri for uri, systems in self._initiators.items()
                      if system in systems)

    def zone_systems(self, zone_uri):
        found = set()
        for uri in self.members(zone_uri):
            found.update(self._initiators.get(uri, ()))
        return found

    def own_zones(self, system):
        """The zones of endpoints whose initiators are the system's
        only, by URI."""
        return sorted((z for z in self.zones.values()
                       if z.holds_endpoints
                       and self.zone_systems(z.uri) == {system}),
                      key=lambda z: z.uri)

    def _shared_zones(self):
        return [z for z in self.zones.values()
                if z.zone_type == models.DEFAULT_ZONE or (
                    z.holds_endpoints and len(self.zone_systems(z.uri)) > 1)]

    def bindable_systems(self):
        """Systems a device can be given to at all: those with an
        initiator on the fabric (by their own zone, a connection, or a
        zone made for them)."""
        found = set()
        for systems in self._initiators.values():
            found.update(systems)
        return found

    def connections_of(self, system, uri):
        mine = set(self.initiators_of(system))
        return sorted((c for c in self.connections.values()
                       if uri in c.targets and mine & set(c.initiators)),
                      key=lambda c: c.uri)

    def holders(self, uri):
        """The systems the target endpoint is given to, by URI."""
        found = set()
        for zone in self.zones.values():
            if not zone.holds_endpoints or uri not in self.members(zone.uri):
                continue
            systems = self.zone_systems(zone.uri)
            if len(systems) == 1:
                found.update(systems)
        for connection in self.connections.values():
            if uri in connection.targets:
                for initiator in connection.initiators:
                    found.update(self._initiators.get(initiator, ()))
        return sorted(found)

    def says_reach(self):
        """True when the service tells which hosts may be given what."""
        return any(z.allowed is not None or z.zone_type == models.ZONE_OF_ZONES
                   for z in self.zones.values()) or bool(self._shared_zones())

    def reach(self, uri):
        """The systems that can be given the target endpoint, by URI."""
        if not self.says_reach():
            return sorted(self.bindable_systems())
        found = set(self.holders(uri))
        own = {}
        for zone in self.zones.values():
            systems = self.zone_systems(zone.uri)
            if zone.holds_endpoints and len(systems) == 1:
                own[zone.uri] = next(iter(systems))
                if zone.allowed and uri in zone.allowed:
                    found.update(systems)
        for zone in self._shared_zones():
            if uri in self.members(zone.uri):
                found.update(self.zone_systems(zone.uri))
        for outer in self.zones.values():
            if outer.zone_type != models.ZONE_OF_ZONES:
                continue
            inner = set(outer.contains)
            inner.update(z.uri for z in self.zones.values()
                         if outer.uri in z.contained_by)
            if any(uri in self.members(z) for z in inner):
                found.update(own[z] for z in inner if z in own)
        return sorted(found)

    def zone_for(self, system, uri):
        """The system's own zone to add the endpoint to, where the system
        has several: the one whose
        ``Links.Endpoints@Redfish.AllowableValues`` lists it, else one
        that a ZoneOfZones joins with a zone holding it
        (``ContainsZones`` / ``ContainedByZones``), else one on the switch
        the endpoint is connected to (the zone's ``InvolvedSwitches``,
        its members' switch entities and ports), else one that does not
        say what it may be given; by URI among equals. A zone whose
        allowable values leave the endpoint out is never asked: None
        when every zone of the system is such a one."""
        zones = self.own_zones(system)
        switches = self._endpoint_switches(uri)

        def rank(zone):
            if zone.allowed is not None and uri in zone.allowed:
                return 0
            if zone.allowed is not None:
                return None
            if self._joined_with(zone, uri):
                return 1
            if switches and switches & self._zone_switches(zone):
                return 2
            return 3

        ranked = [(rank(z), z.uri, z) for z in zones]
        ranked = [item for item in ranked if item[0] is not None]
        return min(ranked, key=lambda item: item[:2])[2] if ranked else None

    def _joined_with(self, zone, uri):
        """True when a ZoneOfZones holds ``zone`` and a zone holding the
        endpoint."""
        for outer in self.zones.values():
            if outer.zone_type != models.ZONE_OF_ZONES:
                continue
            inner = set(outer.contains)
            inner.update(z.uri for z in self.zones.values()
                         if outer.uri in z.contained_by)
            if zone.uri in inner and any(
                    uri in self.members(z) for z in inner if z != zone.uri):
                return True
        return False

    def _endpoint_switches(self, uri):
        endpoint = self.endpoints.get(uri)
        return endpoint.switches if endpoint is not None else set()

    def _zone_switches(self, zone):
        found = set(zone.switches)
        for member in self.members(zone.uri):
            found.update(self._endpoint_switches(member))
        return found

    def unknown_reason(self, endpoint):
        """Why what the endpoint is given to cannot be told this round,
        or None."""
        for uri in endpoint.zones + endpoint.connections:
            if uri in self.unreadable:
                return 'its zone or connection %s could not be read: %s' % (
                    uri, self.unreadable[uri])
        bad_zones = [u for u in self.unreadable if u.startswith(
            (self.fabric.zones or '\0') + '/')]
        if bad_zones and not endpoint.has_zone_links:
            return ('zone %s could not be read (%s), and the endpoint does '
                    'not say which zones it is in' %
                    (bad_zones[0], self.unreadable[bad_zones[0]]))
        for zone in self.zones.values():
            if endpoint.uri not in self.members(zone.uri):
                continue
            lost = sorted(u for u in self.members(zone.uri)
                          if u in self.unreadable)
            if lost:
                return ('it is in zone %s with endpoint %s, which could not '
                        'be read: %s' % (zone.uri, lost[0],
                                         self.unreadable[lost[0]]))
        return None
