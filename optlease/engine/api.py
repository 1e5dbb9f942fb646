"""The request API: Haizea's XML-RPC interface (`create_lease`, `cancel_lease`, `get_leases`, `get_lease`,
`get_queue`, `get_hosts`, `test_func`), so Haizea's own clients work unchanged.

Lease XML is read with the project's safe parser (no DTD, no entities, no network) and checked against the site
before anything is stored; every refusal is an XML-RPC Fault with a one-line message. With a token configured the
server answers only on the path `/<token>` (clients put it in the URL: `http://host:42493/<token>`).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from datetime import datetime
from xmlrpc.client import Fault

from lxml import etree

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.engine.api_http import ApiServer, Encoded
from optlease.engine.daemon import Manager
from optlease.engine.grid_state import ce_state, host_states
from optlease.engine.lease_views import view_of, view_xml
from optlease.formats.glue_ce import write_ldif, write_xml
from optlease.errors import InputError
from optlease.formats import lwf
from optlease.formats.sss_write import write_sss
from optlease.formats.timefmt import format_duration, format_time
from optlease.numbers import parse_whole

MAX_XML_BYTES = 64 * 1024
MAX_SECONDS = 100 * 365 * 86400        # no lease lasts or starts more than a century from now
MAX_LEASE_ID = 2**63 - 1               # what SQLite stores


def parse_lease_xml(xml: str, lease_id: int, arrival: int, origin: datetime, site: Site) -> LeaseRequest:
    """One <lease> element as a request arriving now; InputError (one line) for anything the site cannot take."""
    data = xml.encode() if isinstance(xml, str) else xml
    if not isinstance(data, bytes):
        raise InputError("the lease must be given as an XML string")
    if len(data) > MAX_XML_BYTES:
        raise InputError(f"lease XML is {len(data)} bytes; at most {MAX_XML_BYTES} are accepted")
    try:
        root = etree.fromstring(data, lwf.safe_parser())
    except etree.XMLSyntaxError as exc:
        raise InputError(f"malformed lease XML: {exc.msg}") from None
    if root is None or root.tag != "lease":
        raise InputError(f"root element is <{getattr(root, 'tag', '?')}>, expected <lease>")
    if root.getroottree().docinfo.doctype or root.getroottree().docinfo.internalDTD is not None:
        raise InputError("lease XML may not have a DOCTYPE (no DTDs or entities are accepted)")
    _check_numbers(root, site)
    reader = lwf._Reader("lease", origin)
    try:
        req = reader.lease(root, lease_id, arrival, None)
    except InputError as exc:
        raise InputError(exc.message) from None
    if req.duration > MAX_SECONDS:
        raise InputError(f"duration {format_duration(req.duration)} is too long (at most 100 years)")
    if req.kind is LeaseKind.AR:
        if req.start < arrival:
            raise InputError(f"start time {format_time(origin, req.start)} is in the past")
        if req.start - arrival > MAX_SECONDS:
            raise InputError("start time is more than 100 years away")
    for vm in req.vms:
        for rtype, amount in vm.items():
            if rtype not in site.resource_types:
                raise InputError(f"resource type {rtype!r} is not one the site has "
                                 f"({' '.join(site.resource_types)})")
            most = site.largest[rtype]
            if amount > most:
                raise InputError(f"{rtype} {amount} per node is more than any node has ({most})")
    extra = {k: v for k, v in req.extra.items() if k != "source"}
    return dataclasses.replace(req, extra=extra)


def _check_numbers(root, site: Site) -> None:
    """Before the reader expands node sets: no absurd counts or amounts. A number the strict grammar refuses is
    left to the reader, which says so with its place."""
    total = 0
    for node_set in root.iter("node-set"):
        raw = (node_set.get("numnodes") or "").strip()
        try:
            total += parse_whole(raw, None)
        except ValueError:
            continue
        if len(raw) > 12:
            raise InputError(f"numnodes={raw[:20]} is far too large")
    if total > len(site.nodes):
        raise InputError(f"the lease asks for {total} nodes; the site has {len(site.nodes)}")
    for res in root.iter("res"):
        raw = (res.get("amount") or "").strip()
        try:
            amount = parse_whole(raw, None)
        except ValueError:
            continue
        if len(raw) > 12 or amount > lwf.MAX_AMOUNT:
            raise InputError(f"amount={raw[:20]} of {res.get('type')} is far too large")


def lease_to_xml(lease, origin: datetime) -> str:
    """A lease as Haizea's get_leases returns it (`optlease.engine.lease_views.view_xml`; manager's lock held)."""
    return view_xml(view_of(lease), origin)


class Api:
    """The functions the XML-RPC server exposes; every failure is a Fault with one line."""

    def __init__(self, manager: Manager, address: tuple[str, int] = ("localhost", 0)) -> None:
        self.m = manager
        self.address = address     # where clients reach this API: the GLUE CE's host and gatekeeper port

    def _dispatch(self, method: str, params: tuple):
        """A call over XML-RPC (get_leases answers its encoded array: `_get_leases_encoded`)."""
        func = getattr(self, ENCODED.get(method, method), None) if method in API_METHODS else None
        if func is None:
            raise Fault(1, f"unknown method {str(method)[:40]!r}")
        try:
            return func(*params)
        except Fault:
            raise
        except TypeError:
            # the exception names Python's own functions; the user needs the method's arguments
            raise Fault(1, f"{method}: wrong arguments ({API_METHODS[method]})") from None
        except InputError as exc:
            raise Fault(1, str(exc).replace("\n", " ")) from None

    def create_lease(self, lease_xml: str) -> int:
        m = self.m
        if not isinstance(lease_xml, (str, bytes)):
            raise InputError("create_lease takes the lease as an XML string")
        xml = lease_xml if isinstance(lease_xml, str) else lease_xml.decode("utf-8", "replace")
        return m.submit(lambda i, arrival: parse_lease_xml(lease_xml, i, arrival, m.origin, m.site), xml)

    def cancel_lease(self, lease_id: int) -> int:
        self.m.cancel(_lease_id(lease_id))
        return 0

    def get_leases(self, include_finished: bool = False) -> list[str]:
        """Leases in the system (Haizea's meaning); `True` adds finished, cancelled and rejected ones. Read from
        the views published after the last commit: the manager's lock is not taken."""
        views = self.m.views
        return [views.xml(view) for view in views.listing(_flag(include_finished, "get_leases"))]

    def _get_leases_encoded(self, include_finished: bool = False) -> Encoded:
        """get_leases as the server sends it: its answer encoded from the blocks cached since the last one."""
        return Encoded(self.m.table.get_leases(_flag(include_finished, "get_leases")))

    def list_leases(self, include_finished: bool = False) -> str:
        """optlease's `list-leases` table, one lease a line, its columns separated by tabs: what get_leases says,
        in a fraction of the bytes and of the client's work (a listing of 100,000 leases in well under a
        second)."""
        views = self.m.views
        return "\n".join("\t".join(views.row(view))
                         for view in views.listing(_flag(include_finished, "list_leases")))

    def lease_table(self, include_finished: bool = False) -> dict:
        """optlease's `list-leases` table, formatted and compressed, from one snapshot: {token, widths, rows,
        pages, page}, `page` the first of `pages` (each at most 32,768 rows); the others by `lease_table_page`."""
        return self.m.table.open(_flag(include_finished, "lease_table"))

    def lease_table_page(self, token: str, number: int) -> list:
        """Page `number` (1 to pages - 1) of the listing `token`: [[rows, base64 of the zlib'd lines], ...]."""
        return self.m.table.page(token, number)

    def get_lease(self, lease_id: int) -> str:
        views = self.m.views
        view = views.get(_lease_id(lease_id))
        if view is None:
            raise InputError(f"no lease {lease_id}")
        return views.xml(view)

    def get_queue(self) -> list[str]:
        m = self.m
        with m.lock:
            return [lease_to_xml(lease, m.origin) for lease in m.sched.queue]

    def get_hosts(self) -> list[dict]:
        m = self.m
        with m.lock:
            infos = m.enactor.hosts()
            out = []
            for i in m.site.node_ids:
                name = m.host(i)
                cap = m.site.capacity(i)
                info = infos.get(name)
                out.append({"id": i, "hostname": name, "cpu": cap.get("CPU", 0), "mem": cap.get("Memory", 0),
                            "capacity": {k: v for k, v in cap.items()},
                            "alive": True if info is None else bool(info.alive)})
            return out

    def get_hosts_sss(self) -> str:
        """The hosts as SSS node objects (`<Data>` of `<Node>`s): Configured, Available and Utilized now."""
        with self.m.lock:
            return write_sss(host_states(self.m))

    def get_glue(self, fmt: str = "ldif") -> str:
        """The lease manager as a GLUE 1.1 Computing Element with its cluster, now: `ldif` or `xml`."""
        if fmt not in ("ldif", "xml"):
            raise InputError(f"get_glue: format {str(fmt)[:30]!r} is not ldif or xml")
        m = self.m
        with m.lock:
            ce = ce_state(m.sched, m.now(), *self.address, accepting=not m.stopping.is_set())
            return (write_ldif if fmt == "ldif" else write_xml)(ce, m.site)

    def test_func(self) -> int:
        return 0


# methods whose answer over XML-RPC is encoded from cached parts, and the function that encodes it
ENCODED = {"get_leases": "_get_leases_encoded"}
# each method and the arguments it takes, as a refusal states them
API_METHODS = {"create_lease": "one lease XML string", "cancel_lease": "one lease id",
               "get_leases": "none, or True to include finished leases",
               "list_leases": "none, or True to include finished leases", "get_lease": "one lease id",
               "lease_table": "none, or True to include finished leases",
               "lease_table_page": "the listing's token and a page number",
               "get_queue": "none", "get_hosts": "none", "get_hosts_sss": "none",
               "get_glue": "none, or ldif or xml",
               "test_func": "none"}


def _flag(value, method: str) -> bool:
    """A yes/no argument: XML-RPC's boolean, or 0 and 1 (what a client without booleans sends); anything else is
    refused rather than read as true (a string "false" is truthy)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InputError(f"{method}: include_finished must be true or false, not {str(value)[:24]!r}")


def _lease_id(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(f"lease id {str(value)[:24]!r} is not a whole number")
    try:
        return parse_whole(str(value).strip(), 1, MAX_LEASE_ID)
    except ValueError as exc:
        raise InputError(f"lease id {exc}") from None


# HOST:PORT, the host a name or IPv4 address without colons, or an IPv6 address in brackets ([::1]:8000)
_LISTEN = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]{2,45})\]|(?P<host>[A-Za-z0-9.-]{0,253})):(?P<port>[^:]*)", re.ASCII)


def parse_listen(text: str) -> tuple[str, int]:
    match = _LISTEN.fullmatch(text.strip())
    if not match:
        hint = " (an IPv6 address goes in brackets: [::1]:8000)" if text.count(":") > 1 or "[" in text else ""
        raise InputError(f"[daemon] listen: {text[:80]!r} is not HOST:PORT{hint}")
    try:
        number = parse_whole(match["port"], 0, 65535)
    except ValueError as exc:
        raise InputError(f"[daemon] listen: {text!r} is not HOST:PORT (port {exc})") from None
    if match["v6"] is not None:
        try:
            return str(ipaddress.IPv6Address(match["v6"])), number
        except ValueError:
            raise InputError(f"[daemon] listen: {match['v6']!r} is not an IPv6 address") from None
    return match["host"] or "127.0.0.1", number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(manager: Manager, listen: str, token: str | None) -> ApiServer:
    host, port = parse_listen(listen)
    if not is_loopback(host) and not token:
        raise InputError(f"[daemon] listen: {host} is not loopback; set [daemon] token to let others in")
    server = ApiServer((host, port), token)
    server.register_instance(Api(manager, server.server_address[:2]))
    return server
