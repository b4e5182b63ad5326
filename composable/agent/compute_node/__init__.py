"""Compute-node side of composable leases: attaching leased memory to
this host (host mode) or to its guests (guest mode)."""
