"""`optlease list-leases`: the lease table fetched, checked and printed, without typer (the command's common forms
are run from here before the rest of the CLI is imported: a listing of 100,000 leases costs its start as much as
its rows).

Against optlease's daemon the table comes formatted and compressed, in pages of at most 32,768 rows from one
snapshot (`engine.lease_table`): the client inflates each block within its bound, checks it (printable ASCII,
the row count it was announced with) and writes it. Against an older optlease it reads `list_leases` (tab-separated
rows), and against Haizea's server `get_leases` (its <lease> XML), and formats those itself, the same way.
"""
from __future__ import annotations

import base64
import binascii
import os
import re
import sys
import zlib

from optlease.cli.rpc import Client, Refused, unknown_method
from optlease.formats.table_layout import COLUMNS, format_table, header

DEFAULT_SERVER = "http://localhost:42493"
PLANNED = ("Scheduled", "Active")   # states in which a best-effort lease has a planned start and end
MAX_WIDTH = 64                      # no column of the table is wider (a lease id has at most 19 digits)
MAX_BLOCK_ROWS = 1 << 16            # rows a block may announce (the daemon sends 1,024 at most)
MAX_PAGES = 1 << 20
_NOT_PRINTABLE = re.compile(rb"[^ -~\n]")


def list_leases(server: str, include_finished: bool) -> str:
    """The whole table as `list-leases` prints it (header, then a line a lease); Refused (one line) if the
    server cannot be read or sends what is not a lease table."""
    client = Client(server, bounded=True)
    try:
        try:
            return _table(client, include_finished)
        except Refused as exc:
            if not unknown_method(exc):
                raise
        try:
            return _from_rows(client("list_leases", include_finished))       # an optlease before lease_table
        except Refused as exc:
            if not unknown_method(exc):
                raise
        # Haizea's own server: its <lease> XML, which may be larger than a bounded answer
        old = Client(server)
        try:
            xmls = old("get_leases", True) if include_finished else old("get_leases")
        finally:
            old.close()
        return format_table(lease_rows(xmls))
    finally:
        client.close()


def _table(client: Client, include_finished: bool) -> str:
    first = client("lease_table", include_finished)
    if not isinstance(first, dict) or not all(k in first for k in ("token", "widths", "rows", "pages", "page")):
        raise Refused("the server sent a lease table that is not one")
    widths, pages, token = first["widths"], first["pages"], first["token"]
    if not (isinstance(widths, list) and len(widths) == len(COLUMNS)
            and all(type(w) is int and low <= w <= MAX_WIDTH for w, (_, low) in zip(widths, COLUMNS))):
        raise Refused("the server sent a lease table with columns that are not the table's")
    if type(pages) is not int or not 1 <= pages <= MAX_PAGES or not isinstance(token, str):
        raise Refused("the server sent a lease table with a page count that is not one")
    line_bytes = sum(widths) + 1
    blocks = _blocks(first["page"], line_bytes)
    for number in range(1, pages):
        blocks += _blocks(client("lease_table_page", token, number), line_bytes)
    rows = sum(rows for rows, _ in blocks)
    if rows != first["rows"]:
        raise Refused(f"the server announced {first['rows']} leases and sent {rows}")
    body = b"\n".join(text for rows, text in blocks if rows)
    return header(widths) + "\n" + (body.decode("ascii") + "\n" if body else "")


def _blocks(page, line_bytes: int) -> list[tuple[int, bytes]]:
    """A page's blocks, inflated and checked: (rows, lines)."""
    if not isinstance(page, list):
        raise Refused("the server sent a page of the lease table that is not a list of blocks")
    out = []
    for block in page:
        if not (isinstance(block, list) and len(block) == 2 and type(block[0]) is int
                and 0 <= block[0] <= MAX_BLOCK_ROWS and isinstance(block[1], str)):
            raise Refused("the server sent a block of the lease table that is not [rows, text]")
        rows, packed = block
        limit = rows * line_bytes
        try:
            inflater = zlib.decompressobj()
            text = inflater.decompress(base64.b64decode(packed, validate=True), limit + 1)
        except (binascii.Error, ValueError, zlib.error):
            raise Refused("the server sent a block of the lease table that does not inflate") from None
        if len(text) > limit or inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
            raise Refused(f"the server sent a block of the lease table larger than its {rows} rows")
        if _NOT_PRINTABLE.search(text) or (rows and text.count(b"\n") != rows - 1) or (not rows and text):
            raise Refused("the server sent a block of the lease table that is not its rows")
        out.append((rows, text))
    return out


def _from_rows(table) -> str:
    """An older optlease's `list_leases`: a lease a line, its columns separated by tabs."""
    if not isinstance(table, str):
        raise Refused("the server sent a lease table that is not text")
    rows = [tuple(line.split("\t")) for line in table.split("\n")] if table else []
    if any(len(row) != len(COLUMNS) for row in rows):
        raise Refused("the server sent a lease table with rows of the wrong width")
    return format_table(rows)


def lease_rows(xmls) -> list[tuple[str, ...]]:
    """Table rows from the server's <lease> strings (Haizea's numeric states shown by name); Refused if they are
    not Haizea's <lease> XML."""
    from lxml import etree

    from optlease.formats.lease_states import label_of_code
    from optlease.formats.lwf import safe_parser
    from optlease.numbers import parse_whole

    bad = Refused("the server sent a lease that is not Haizea's <lease> XML")
    # one parse for the whole listing (100,000 leases parse in one call, not in 100,000): each string must be one
    # <lease> element, so the listing has exactly as many children as strings, all <lease>
    try:
        listing = etree.fromstring(b"<leases>" + "".join(xmls).encode() + b"</leases>", safe_parser())
        if len(listing) != len(xmls) or any(elem.tag != "lease" for elem in listing):
            raise ValueError("not one <lease> per string")
    except (etree.XMLSyntaxError, ValueError, TypeError):
        raise bad from None
    rows = []
    for elem in listing:
        try:
            numnodes = str(sum(parse_whole(ns.get("numnodes", "1")) for ns in elem.iter("node-set")))
        except (ValueError, AttributeError):
            raise bad from None
        exact = elem.find("start/exact")
        now = elem.find("start/now")
        start = exact.get("time") if exact is not None else ("Now" if now is not None else "Unspecified")
        state = label_of_code(elem.get("state", "?"))
        planned = state in PLANNED
        if exact is None and now is None and planned and elem.get("start-time"):   # an immediate lease's is Now
            start = elem.get("start-time")
        end = elem.get("end-time") or (elem.get("planned-end") if planned else None) or "Unspecified"
        kind = elem.get("type") or ("AR" if exact is not None else "Immediate" if now is not None
                                    else "Best-effort")
        dur = elem.find("duration")
        rows.append((elem.get("id", "?"), kind, state, start, end,
                     dur.get("time", "?") if dur is not None else "?", numnodes))
    return rows


def fast_main(args: list[str]) -> int | None:
    """`list-leases [-s SERVER] [-a] [-D]` run without typer: the exit status; None for any other form (help, an
    unknown option), which the full CLI then parses."""
    server, include_finished, rest = os.environ.get("OPTLEASE_SERVER") or DEFAULT_SERVER, False, list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-a", "--all"):
            include_finished = True
        elif arg in ("-D", "--debug"):
            pass
        elif arg in ("-s", "--server") and rest:
            server = rest.pop(0)
        elif arg.startswith("--server="):
            server = arg.partition("=")[2]
        else:
            return None
    try:
        table = list_leases(server, include_finished)
    except Refused as exc:
        print(f"optlease: error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(table)
    return 0
