"""Haizea's client commands against a running daemon: `request-lease`, `cancel-lease`, `list-leases`,
`show-queue`, `list-hosts` (each with `-s SERVER`, Haizea's XML-RPC URL)."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli import listing
from optlease.cli.app import app
from optlease.cli.rpc import Refused, rpc as _rpc

DEFAULT_SERVER = listing.DEFAULT_SERVER
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


def _fail(message: str) -> typer.Exit:
    print(f"optlease: error: {message}", file=sys.stderr)
    return typer.Exit(1)


def call(server: str, method: str, *args):
    """One XML-RPC call; a daemon that is not there or a refusal becomes one line and exit 1."""
    try:
        return _rpc(server, method, *args)
    except Refused as exc:
        raise _fail(str(exc)) from None


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
        except (Refused, etree.XMLSyntaxError, AttributeError, ValueError):
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


HEADER = listing.COLUMNS


def lease_rows(xmls: list[str]) -> list[tuple[str, ...]]:
    """Table rows from the server's <lease> strings (Haizea's numeric states shown by name)."""
    try:
        return listing.lease_rows(xmls)
    except Refused as exc:
        raise _fail(str(exc)) from None


def print_table(header, rows) -> None:
    """Haizea's layout: left-aligned columns, each widened to its longest value when needed (one write for the
    whole table)."""
    sys.stdout.write(listing.format_table(rows, header))


@app.command("list-leases")
def list_leases(
    server: Server = DEFAULT_SERVER,
    all_leases: Annotated[bool, typer.Option("-a", "--all", help="Also list done, cancelled and rejected "
                                             "leases.")] = False,
    debug: Debug = False,
) -> None:
    """List the leases in the system (not done or cancelled ones, unless --all)."""
    try:
        table = listing.list_leases(server, all_leases)
    except Refused as exc:
        raise _fail(str(exc)) from None
    sys.stdout.write(table)


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
