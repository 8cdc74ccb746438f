"""The site's V-IPU controllers as the hooks use them: a client each, the one of a job by its
hosts (a job is under one controller: Slurm's topology joins no two), and each in turn for what
covers them all (the reap, the health pass, metrics), so that one controller down or slow costs
only its own Pods' jobs.

Functions that take `client` take a single VipuClient (a site of one controller, and the tests
written for it) or a Clients; `clients_of` makes either a Clients."""

from __future__ import annotations

from ..errors import ConfigError
from ..vipu import VipuClient


class Clients:
    def __init__(self, site, made: dict[str, VipuClient] | None = None):
        self.site = site
        self.several = len(site.controllers) > 1
        self.by_name = made if made is not None else {c.name: site.vipu_client(c) for c in site.controllers}

    def __len__(self) -> int:
        return len(self.by_name)

    def items(self) -> list[tuple[str, VipuClient]]:
        """(controller name, client), in the site's order."""
        return list(self.by_name.items())

    def of(self, hosts) -> VipuClient:
        """The client of the controller of a job on `hosts` (ConfigError: they span two, or none)."""
        if not self.several:
            return next(iter(self.by_name.values()))
        return self.by_name[self.site.controller_of(hosts).name]

    def owner(self, record: dict | None) -> str | None:
        """The controller of a creation record's job (its hosts): the site's only one, or None
        when the record cannot say (an older record without hosts on a site of several)."""
        if not self.several:
            return self.site.controllers[0].name
        hosts = (record or {}).get("hosts")
        if not isinstance(hosts, list) or not hosts:
            return None
        try:
            return self.site.controller_of(hosts).name
        except ConfigError:
            return None

    def of_record(self, record: dict | None) -> VipuClient | None:
        """The client of a creation record's job; None when the record cannot say, or its
        controller is not among these clients (a prolog making room has its own alone)."""
        return self.by_name.get(self.owner(record) or "")

    def set_observer(self, observer) -> None:
        for client in self.by_name.values():
            client.observer = observer


def clients_of(site, client) -> Clients:
    """`client` as a Clients: itself, or the one client of a site of one controller."""
    if isinstance(client, Clients):
        return client
    controllers = site.controllers
    if len(controllers) == 1:
        return Clients(site, {controllers[0].name: client})
    if client.controller is None:
        raise ConfigError(f"the site has {len(controllers)} V-IPU controllers; give the hooks a client of each")
    return Clients(site, {client.controller: client})  # one controller's: its jobs' entries alone
