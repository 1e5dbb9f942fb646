"""The `list-leases` table as the daemon serves it: formatted, compressed and cached by block of lease ids, taken
as one immutable snapshot, and sent in pages of bounded size.

A listing of 100,000 leases must cost the daemon little and the client less. The published views
(`engine.lease_views`) are grouped in blocks of 1,024 ids; a listing formats only the blocks published since the
last one (each row once per view), and keeps, per block, its lines as the client prints them (Haizea's columns,
each as wide as the longest value of the listing) compressed once: the client only inflates and writes them.
The first call takes a snapshot of every block (references to immutable cached strings, taken in one cut: the
listing shows one published state, as a single `get_leases` does) and answers its first page; the client asks for
the others by the snapshot's token. Every answer holds at most PAGE_BLOCKS blocks, so no message grows with the
leases in the system; at most SNAPSHOTS listings are kept, each for SNAPSHOT_TTL seconds.
"""
from __future__ import annotations

import base64
import secrets
import threading
import time
import zlib
from collections import OrderedDict

from optlease.engine.lease_views import FINISHED, LeaseViews
from optlease.errors import InputError
from optlease.formats.table_layout import MIN_WIDTHS, format_lines, widths_of

PAGE_BLOCKS = 32             # blocks per answer: at most 32,768 rows, about 4 MiB of text before compression
SNAPSHOTS = 8                # listings being paged at once; a ninth drops the oldest
SNAPSHOT_TTL = 120.0         # seconds a listing's pages stay available after its first page
_RESPONSE_HEAD = b"<?xml version='1.0'?>\n<methodResponse>\n<params>\n<param>\n<value><array><data>\n"
_RESPONSE_TAIL = b"</data></array></value>\n</param>\n</params>\n</methodResponse>\n"


def _escape(text: str) -> str:
    """XML-RPC's escaping of a string (xmlrpc.client.escape)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Block:
    """One block's views and rows (id order) for both listings, their column widths, its packed text per width,
    and its leases' XML as get_leases' answer holds them."""

    __slots__ = ("views", "rows", "widths", "packed", "xml")

    def __init__(self, views: tuple[list, list], rows: tuple[list, list], widths: tuple) -> None:
        self.views = views        # (views in the system, every view)
        self.rows = rows          # (their rows, every row)
        self.widths = widths      # (their widths, every row's)
        self.packed: dict = {}    # (include_finished, table widths) -> (rows, base64 of the zlib'd lines)
        self.xml: list = [None, None]     # per include_finished: the <value>s of get_leases' array, encoded


class LeaseTable:
    """The cached blocks of the table and the snapshots being paged."""

    def __init__(self, views: LeaseViews) -> None:
        self.views = views
        self._blocks: dict[int, _Block] = {}
        self._lock = threading.Lock()                       # one listing built at a time
        self._snapshots: OrderedDict[str, tuple[float, list[list]]] = OrderedDict()

    def open(self, include_finished: bool) -> dict:
        """A new listing: its token, column widths, rows and pages, and its first page."""
        with self._lock:
            self._refresh()
            flavor = 1 if include_finished else 0
            blocks = [self._blocks[key] for key in sorted(self._blocks)]
            blocks = [block for block in blocks if block.rows[flavor]]
            widths = tuple(max(column) for column in zip(MIN_WIDTHS, *(b.widths[flavor] for b in blocks)))
            packed = [self._pack(block, flavor, widths) for block in blocks]
            pages = [packed[i:i + PAGE_BLOCKS] for i in range(0, len(packed), PAGE_BLOCKS)] or [[]]
            now = time.monotonic()
            for token in [t for t, (at, _) in self._snapshots.items() if now - at > SNAPSHOT_TTL]:
                del self._snapshots[token]
            while len(self._snapshots) >= SNAPSHOTS:
                self._snapshots.popitem(last=False)
            token = secrets.token_hex(8)
            self._snapshots[token] = (now, pages)
        return {"token": token, "widths": list(widths), "rows": sum(rows for rows, _ in packed),
                "pages": len(pages), "page": pages[0]}

    def page(self, token, number) -> list[list]:
        """Page `number` (0 to pages - 1) of the listing `token`: [[rows, base64 of the zlib'd lines], ...]."""
        if not isinstance(token, str) or len(token) > 64:
            raise InputError("lease_table_page: the listing token must be a short string")
        if isinstance(number, bool) or not isinstance(number, int):
            raise InputError("lease_table_page: the page must be a whole number")
        with self._lock:
            found = self._snapshots.get(token)
        if found is None or time.monotonic() - found[0] > SNAPSHOT_TTL:
            raise InputError("lease_table_page: that listing is gone (too old, or never made): list again")
        pages = found[1]
        if not 0 <= number < len(pages):
            raise InputError(f"lease_table_page: the listing has pages 0 to {len(pages) - 1}, not {number}")
        return pages[number]

    def _refresh(self) -> None:
        """Format again the blocks published since the last listing (each changed view's row once)."""
        row = self.views.row
        for key, views in self.views.take_dirty().items():
            every = [row(view) for view in views]
            live = [view for view in views if view.state not in FINISHED]
            if len(live) == len(views):
                widths = widths_of(every)
                self._blocks[key] = _Block((views, views), (every, every), (widths, widths))
            else:
                in_system = [row for view, row in zip(views, every) if view.state not in FINISHED]
                self._blocks[key] = _Block((live, views), (in_system, every),
                                           (widths_of(in_system), widths_of(every)))

    def get_leases(self, include_finished: bool) -> bytes:
        """get_leases' whole XML-RPC answer, as `xmlrpc.client.dumps` writes it (an array of each lease's XML),
        from each block's encoded <value>s: a block is encoded again only when one of its leases changed."""
        with self._lock:
            self._refresh()
            flavor = 1 if include_finished else 0
            parts = [_RESPONSE_HEAD]
            for key in sorted(self._blocks):
                block = self._blocks[key]
                if block.xml[flavor] is None:
                    xml = self.views.xml
                    block.xml[flavor] = "".join([f"<value><string>{_escape(xml(view))}</string></value>\n"
                                                 for view in block.views[flavor]]).encode("utf-8", "xmlcharrefreplace")
                parts.append(block.xml[flavor])
            parts.append(_RESPONSE_TAIL)
        return b"".join(parts)

    @staticmethod
    def _pack(block: _Block, flavor: int, widths: tuple) -> list:
        """[rows, base64 of the zlib'd lines] of a block at these table widths (once per widths)."""
        packed = block.packed.get((flavor, widths))
        if packed is None:
            rows = block.rows[flavor]
            text = format_lines(rows, widths).encode("ascii", "replace")
            packed = [len(rows), base64.b64encode(zlib.compress(text, 1)).decode("ascii")]
            block.packed = {key: value for key, value in block.packed.items() if key[0] != flavor}
            block.packed[(flavor, widths)] = packed
        return packed
