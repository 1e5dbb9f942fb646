"""Haizea's client commands against a running daemon: `request-lease`, `cancel-lease`, `list-leases`,
`show-queue`, `list-hosts` (each with `-s SERVER`, Haizea's XML-RPC URL)."""
from __future__ import annotations

import http.client
import socket
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Annotated, Optional
from urllib.parse import urlsplit

import typer

from optlease.cli.app import app

DEFAULT_SERVER = "http://localhost:42493"
TIMEOUT = 30.0
DECISION_WAIT = 5.0     # seconds request-lease waits for the first round to accept or reject the lease
Server = Annotated[str, typer.Option("-s", "--server", help="URL of the optlease (or Haizea) XML-RPC server.",
                                     envvar="OPTLEASE_SERVER")]
Debug = Annotated[bool, typer.Option("-D", "--debug", help="Accepted for Haizea compatibility.", hidden=True)]
MAX_AMOUNT = 2**31 - 1      # as lease XML allows (optlease.formats.lwf)


def whole(low: int, high: int):
    """A typer parser for a whole-number option: ASCII digits within [low, high] (`+5`, `1_0` and other
    scripts' digits, which int() takes, are refused)."""
    from optlease.numbers import parse_whole

    def parse(text) -> int:
        try:
            return parse_whole(str(text), low, high)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return parse


class _Transport(xmlrpc.client.Transport):
    def make_connection(self, host):
        conn = super().make_connection(host)
        conn.timeout = TIMEOUT
        return conn


def _fail(message: str) -> typer.Exit:
    print(f"optlease: error: {message}", file=sys.stderr)
    return typer.Exit(1)


def public_url(server: str) -> str:
    """The server URL as messages show it: the path (where the daemon's token goes) and any user:password
    replaced by `...`, so that an error message pasted into a ticket gives no secret away."""
    parts = urlsplit(server)
    host = parts.netloc.rpartition("@")[2]
    secret = parts.path not in ("", "/", "/RPC2") or "@" in parts.netloc or parts.query
    return f"{parts.scheme}://{host}/..." if secret else f"{parts.scheme}://{host}{parts.path}"


class _Refused(Exception):
    """A call that failed, with the one line that says why."""


def call(server: str, method: str, *args):
    """One XML-RPC call; a daemon that is not there or a refusal becomes one line and exit 1."""
    try:
        return _rpc(server, method, *args)
    except _Refused as exc:
        raise _fail(str(exc)) from None


def _rpc(server: str, method: str, *args):
    if not server.startswith(("http://", "https://")):
        raise _Refused(f"server {public_url(server) if '://' in server else 'URL'} is not an http:// URL")
    shown = public_url(server)
    transport = xmlrpc.client.SafeTransport() if server.startswith("https://") else _Transport()
    try:
        proxy = xmlrpc.client.ServerProxy(server, transport=transport, allow_none=True)
        return getattr(proxy, method)(*args)
    except xmlrpc.client.Fault as exc:
        raise _Refused(_redact(str(exc.faultString).replace("\n", " "), server)) from None
    except xmlrpc.client.ProtocolError as exc:
        raise _Refused(f"{shown}: {exc.errcode} {_redact(exc.errmsg, server)}") from None
    except (OSError, http.client.HTTPException, socket.timeout, ValueError) as exc:
        why = _redact(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__, server)
        raise _Refused(f"cannot reach the lease manager at {shown} ({why}); is `optlease serve` running?") \
            from None


def _redact(text: str, server: str) -> str:
    path = urlsplit(server).path.strip("/")
    text = text.replace(server, public_url(server))
    return text.replace(path, "...") if path and path != "RPC2" else text


def lease_xml(start: str, duration: str, numnodes: int, preemptible: Optional[bool], cpu: int, mem: int,
              image: Optional[str], image_size: Optional[int]) -> str:
    from lxml import etree

    if start not in ("now", "best_effort") and not start.startswith("+") and not (len(start) >= 10
                                                                                  and start[4] == "-"):
        raise _fail(f"-t {start!r}: give an ISO time, +DD:HH:MM:SS, 'now' or 'best_effort'")
    if duration == "unlimited":
        raise _fail("-d unlimited: leases without an end are not supported; give HH:MM:SS")
    lease = etree.Element("lease")
    if preemptible is not None:
        lease.set("preemptible", "true" if preemptible else "false")
    nodes = etree.SubElement(etree.SubElement(lease, "nodes"), "node-set", numnodes=str(numnodes))
    etree.SubElement(nodes, "res", type="CPU", amount=str(cpu))
    etree.SubElement(nodes, "res", type="Memory", amount=str(mem))
    start_el = etree.SubElement(lease, "start")
    if start == "now":
        etree.SubElement(start_el, "now")
    elif start != "best_effort":
        etree.SubElement(start_el, "exact", time=start)
    etree.SubElement(lease, "duration", time=duration)
    software = etree.SubElement(lease, "software")
    if image:
        etree.SubElement(software, "disk-image", id=image, size=str(image_size or 0 or 1))
    else:
        etree.SubElement(software, "none")
    return etree.tostring(lease, encoding="unicode")


@app.command("request-lease")
def request_lease(
    server: Server = DEFAULT_SERVER,
    file: Annotated[Optional[Path], typer.Option("-f", "--file", help="File with a <lease> XML description.",
                                                 dir_okay=False)] = None,
    start: Annotated[Optional[str], typer.Option("-t", "--start", help="Start: ISO time, +DD:HH:MM:SS from now, "
                                                 "'now' or 'best_effort'.")] = None,
    duration: Annotated[Optional[str], typer.Option("-d", "--duration", help="Duration [DD:]HH:MM:SS.")] = None,
    numnodes: Annotated[Optional[int], typer.Option("-n", "--numnodes", parser=whole(1, 100_000),
                                                    help="Number of nodes.")] = None,
    preemptible: Annotated[Optional[bool], typer.Option("--preemptible/--non-preemptible",
                                                        help="Whether the lease may be preempted.")] = None,
    cpu: Annotated[int, typer.Option("-c", "--cpu", parser=whole(1, MAX_AMOUNT), help="CPU per node, 100 = one "
                                     "core (Haizea's unit, as list-hosts shows): 50 is half a core, 400 four "
                                     "vCPUs.")] = 100,
    mem: Annotated[int, typer.Option("-m", "--mem", parser=whole(1, MAX_AMOUNT), help="Memory per node (MB).")] = 1024,
    vmimage: Annotated[Optional[str], typer.Option("-i", "--vmimage", help="Disk image identifier.")] = None,
    vmimagesize: Annotated[Optional[int], typer.Option("-z", "--vmimagesize", parser=whole(1, MAX_AMOUNT),
                                                       help="Disk image size (MB).")] = None,
    debug: Debug = False,
) -> None:
    """Request a new lease (from options or from a <lease> XML file)."""
    if file is not None:
        try:
            xml = file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"{file}: {getattr(exc, 'strerror', None) or exc}") from None
    else:
        missing = [opt for opt, value in (("-t", start), ("-d", duration), ("-n", numnodes)) if value is None]
        if missing:
            raise _fail(f"give -f FILE, or {', '.join(missing)} (with -t, -d and -n)")
        xml = lease_xml(start, duration, numnodes, preemptible, cpu, mem, vmimage, vmimagesize)
    lease_id = call(server, "create_lease", xml)
    state, reason = _first_decision(server, lease_id)
    if state == "Rejected":
        raise _fail(f"lease {lease_id} was rejected: {reason or 'no reason given'}")
    print("Lease submitted correctly.")
    print(f"Lease ID: {lease_id}")


def _first_decision(server: str, lease_id) -> tuple[str | None, str | None]:
    """The lease's state and reason once the lease manager's first round has seen it (at most DECISION_WAIT
    seconds; a server without `get_lease`, such as Haizea's, says nothing)."""
    from lxml import etree

    from optlease.formats.lease_states import label_of_code
    from optlease.formats.lwf import safe_parser

    deadline = time.monotonic() + DECISION_WAIT
    while True:
        try:
            elem = etree.fromstring(_rpc(server, "get_lease", lease_id).encode(), safe_parser())
        except (_Refused, etree.XMLSyntaxError, AttributeError, ValueError):
            return None, None   # submitted all the same: only what the lease manager says next is unknown
        state = label_of_code(elem.get("state", "?"))
        if state not in ("New", "Pending") or time.monotonic() > deadline:
            return state, elem.get("reason")
        time.sleep(0.05)


@app.command("cancel-lease")
def cancel_lease(
    lease: Annotated[int, typer.Option("-l", "--lease", parser=whole(1, 2**63 - 1),
                                       help="ID of the lease to cancel.")],
    server: Server = DEFAULT_SERVER,
    debug: Debug = False,
) -> None:
    """Cancel a lease."""
    call(server, "cancel_lease", lease)
    print(f"Lease {lease} cancelled.")


HEADER = (("ID", 5), ("Type", 14), ("State", 11), ("Starting time", 24), ("Ending time", 24), ("Duration", 14),
          ("Nodes", 7))
PLANNED = ("Scheduled", "Active")   # states in which a best-effort lease has a planned start and end


def lease_rows(xmls: list[str]) -> list[tuple[str, ...]]:
    """Table rows from the server's <lease> strings (Haizea's numeric states shown by name)."""
    from lxml import etree

    from optlease.formats.lease_states import label_of_code
    from optlease.formats.lwf import safe_parser
    from optlease.numbers import parse_whole

    rows = []
    # one parse for the whole listing (100,000 leases parse in one call, not in 100,000): each string must be one
    # <lease> element, so the listing has exactly as many children as strings, all <lease>
    try:
        listing = etree.fromstring(b"<leases>" + "".join(xmls).encode() + b"</leases>", safe_parser())
        if len(listing) != len(xmls) or any(elem.tag != "lease" for elem in listing):
            raise ValueError("not one <lease> per string")
    except (etree.XMLSyntaxError, ValueError, TypeError):
        raise _fail("the server sent a lease that is not Haizea's <lease> XML") from None
    for elem in listing:
        try:
            numnodes = str(sum(parse_whole(ns.get("numnodes", "1")) for ns in elem.iter("node-set")))
        except (ValueError, AttributeError):
            raise _fail("the server sent a lease that is not Haizea's <lease> XML") from None
        exact = elem.find("start/exact")
        now = elem.find("start/now")
        start = exact.get("time") if exact is not None else ("Now" if now is not None else "Unspecified")
        state = label_of_code(elem.get("state", "?"))
        planned = state in PLANNED
        if exact is None and planned and elem.get("start-time"):
            start = elem.get("start-time")
        end = elem.get("end-time") or (elem.get("planned-end") if planned else None) or "Unspecified"
        kind = elem.get("type") or ("AR" if exact is not None else "Immediate" if now is not None
                                    else "Best-effort")
        dur = elem.find("duration")
        rows.append((elem.get("id", "?"), kind, state, start, end,
                     dur.get("time", "?") if dur is not None else "?", numnodes))
    return rows


def print_table(header, rows) -> None:
    """Haizea's layout: left-aligned columns, each widened to its longest value when needed (one write for the
    whole table: a listing of 100,000 leases is one call, not 100,000)."""
    header = tuple((name, max([width] + [len(row[i]) + 2 for row in rows])) for i, (name, width) in enumerate(header))
    line = " " + "".join(f"{{:<{width}}}" for _, width in header)
    out = [" " + "".join(f"{name:<{width}}" for name, width in header)]
    out.extend(line.format(*row).rstrip() for row in rows)
    sys.stdout.write("\n".join(out) + "\n")


@app.command("list-leases")
def list_leases(
    server: Server = DEFAULT_SERVER,
    all_leases: Annotated[bool, typer.Option("-a", "--all", help="Also list done, cancelled and rejected "
                                             "leases.")] = False,
    debug: Debug = False,
) -> None:
    """List the leases in the system (not done or cancelled ones, unless --all)."""
    try:
        # optlease's server sends the table itself (tab-separated rows): a fraction of get_leases' bytes and parsing
        table = _rpc(server, "list_leases", all_leases)
    except _Refused as exc:
        if "unknown method" not in str(exc):
            raise _fail(str(exc)) from None
        # another Haizea server: its <lease> XML
        xmls = call(server, "get_leases", True) if all_leases else call(server, "get_leases")
        print_table(HEADER, lease_rows(xmls))
        return
    if not isinstance(table, str):
        raise _fail("the server sent a lease table that is not text")
    rows = [tuple(line.split("\t")) for line in table.split("\n")] if table else []
    if any(len(row) != len(HEADER) for row in rows):
        raise _fail("the server sent a lease table with rows of the wrong width")
    print_table(HEADER, rows)


@app.command("show-queue")
def show_queue(server: Server = DEFAULT_SERVER, debug: Debug = False) -> None:
    """Show the best-effort queue."""
    rows = lease_rows(call(server, "get_queue"))
    if not rows:
        print("Queue is empty.")
        return
    print_table(HEADER, rows)


@app.command("list-hosts")
def list_hosts(server: Server = DEFAULT_SERVER, debug: Debug = False,
               fmt: Annotated[str, typer.Option("--format", help="table, or sss: SSS node objects (Configured, "
                                                "Available, Utilized now).")] = "table") -> None:
    """List the hosts the lease manager schedules on."""
    if fmt not in ("table", "sss"):
        raise _fail(f"--format {fmt[:30]!r}: expected table or sss")
    if fmt == "sss":
        print(call(server, "get_hosts_sss"), end="")
        return
    hosts = call(server, "get_hosts")
    rows = [(str(h.get("id")), str(h.get("hostname")), str(h.get("cpu")), str(h.get("mem")),
             "up" if h.get("alive", True) else "down") for h in hosts]
    print_table((("ID", 5), ("Hostname", 16), ("CPU", 8), ("Memory", 10), ("State", 6)), rows)
