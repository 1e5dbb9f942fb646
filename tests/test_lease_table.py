"""The lease table `optlease list-leases` reads (engine.lease_table: rows formatted, compressed and cached by
block of lease ids, sent in bounded pages from one snapshot) shows exactly what the plain rows show: on random
daemons, after every kind of change, in blocks and pages small enough that every listing spans several, and
through the CLI as a user runs it. A stale block, a snapshot that moves, and a hostile server or client are
caught."""
from __future__ import annotations

import base64
import random
import threading
import xmlrpc.client
import zlib
from xmlrpc.server import SimpleXMLRPCServer

import pytest

from conftest import run_cli
from optlease.cli import listing
from optlease.cli.rpc import Refused
from optlease.engine import lease_table, lease_views
from optlease.engine.api import make_server

from test_daemon_index import make, request


class Served:
    """A daemon of the random tests with its API on a free loopback port."""

    def __init__(self, tmp_path, name: str) -> None:
        self.m, _ = make(tmp_path, name, indexed=True)
        self.server = make_server(self.m, "127.0.0.1:0", None)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def plain(self, include_finished: bool) -> str:
        """The table from the plain rows (`list_leases`, a row a lease, formatted by the client), the reference;
        the same as from Haizea's get_leases XML."""
        proxy = xmlrpc.client.ServerProxy(self.url)
        table = listing.format_table([tuple(line.split("\t")) for line in proxy.list_leases(include_finished)
                                      .split("\n") if line])
        assert table == listing.format_table(listing.lease_rows(proxy.get_leases(include_finished)))
        return table

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.m.stop()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 ids and pages of 2 blocks: a listing of a few dozen leases spans many of both."""
    monkeypatch.setattr(lease_views, "BLOCK_BITS", 2)
    monkeypatch.setattr(lease_table, "PAGE_BLOCKS", 2)


def drive(m, rng: random.Random, ops: int):
    """Random changes: requests of every kind, time passing (starts, ends), cancellations."""
    now = [max(1, m.last_t)]
    m.clock.now = lambda: now[0]
    for op in range(ops):
        what = rng.choices(("request", "advance", "cancel"), (6, 3, 1))[0]
        if what == "request":
            m.submit(request(random.Random(rng.random()), rng.choice(("be", "be", "ar", "im"))))
            m.step(m.now())
        elif what == "advance":
            now[0] += rng.choice((1, 60, 600, 3600))
            while (t := m.next_instant()) is not None and t < now[0]:
                m.step(t)
            m.step(now[0])
        else:
            live = list(m.sched.leases)
            if live:
                m.cancel(rng.choice(sorted(live)))
        yield op


def drain(m, rng: random.Random, ops: int) -> None:
    """`drive` run to its end: the changes without a look between them."""
    for _ in drive(m, rng, ops):
        pass


@pytest.mark.parametrize("seed", range(4), ids=lambda s: f"seed{s}")
def test_the_table_is_the_plain_rows_after_every_change(tmp_path, small_blocks, seed):
    with Served(tmp_path, f"d{seed}") as d:
        rng = random.Random(seed)
        for op in drive(d.m, rng, 40):
            if op % 3 == 0:
                for flag in (False, True):
                    assert listing.list_leases(d.url, flag) == d.plain(flag), (op, flag)
            if op % 3 == 1:         # get_leases' answer, encoded from cached blocks, is the one dumps writes
                for flag in (False, True):
                    xmls = d.server.instance.get_leases(flag)
                    assert d.m.table.get_leases(flag) == xmlrpc.client.dumps(
                        (xmls,), methodresponse=True, allow_none=True, encoding="utf-8").encode(), (op, flag)
                    assert xmlrpc.client.ServerProxy(d.url).get_leases(flag) == xmls
        assert len(d.m.views.listing(True)) > 4 * 2 * 2       # the last listing spanned more than two pages


def test_the_cli_prints_the_plain_table(tmp_path):
    with Served(tmp_path, "cli") as d:
        drain(d.m, random.Random(7), 30)
        for args, flag in (((), False), (("--all",), True), (("-a", "-D"), True)):
            out = run_cli("list-leases", "-s", d.url, *args, timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout == d.plain(flag)
        typer_path = run_cli("list-leases", "--server", d.url, "--all", "--debug", timeout=60)
        assert typer_path.stdout == d.plain(True)


def test_a_listing_is_one_snapshot(tmp_path, small_blocks):
    """Pages asked after a change still show the leases as they were at the first page."""
    with Served(tmp_path, "snap") as d:
        drain(d.m, random.Random(3), 60)
        proxy = xmlrpc.client.ServerProxy(d.url)
        first = proxy.lease_table(True)
        assert first["pages"] > 2
        before = [proxy.lease_table_page(first["token"], n) for n in range(first["pages"])]
        # every answer is bounded: at most PAGE_BLOCKS blocks, each of at most a block's ids
        assert before[0] == first["page"]
        assert all(0 < len(page) <= lease_table.PAGE_BLOCKS for page in before)
        assert all(0 < rows <= 1 << lease_views.BLOCK_BITS for page in before for rows, _ in page)
        drain(d.m, random.Random(4), 10)
        assert [proxy.lease_table_page(first["token"], n) for n in range(first["pages"])] == before
        assert proxy.lease_table(True)["token"] != first["token"]
        assert listing.list_leases(d.url, True) == d.plain(True)


def test_old_listings_are_dropped(tmp_path, small_blocks):
    with Served(tmp_path, "old") as d:
        proxy = xmlrpc.client.ServerProxy(d.url)
        tokens = [proxy.lease_table(False)["token"] for _ in range(lease_table.SNAPSHOTS + 1)]
        with pytest.raises(xmlrpc.client.Fault, match="that listing is gone"):
            proxy.lease_table_page(tokens[0], 0)
        assert proxy.lease_table_page(tokens[-1], 0) == []


@pytest.mark.parametrize("args, fragment", [
    (("nope", 0), "that listing is gone"),
    (("x" * 100_000, 0), "token must be a short string"),
    ((7, 0), "token must be a short string"),
    ((None, "1"), "token must be a short string"),
    (("TOKEN", -1), "not -1"),
    (("TOKEN", 2**31 - 1), "not 2147483647"),
    (("TOKEN", True), "page must be a whole number"),
    (("TOKEN", 1.5), "page must be a whole number"),
    (("TOKEN",), "wrong arguments"),
], ids=["unknown", "huge", "int-token", "nil", "negative", "past-the-end", "bool", "double", "one-arg"])
def test_a_hostile_page_request_is_one_line(tmp_path, args, fragment):
    with Served(tmp_path, "hostile") as d:
        proxy = xmlrpc.client.ServerProxy(d.url, allow_none=True)
        token = proxy.lease_table(False)["token"]
        args = tuple(token if a == "TOKEN" else a for a in args)
        with pytest.raises(xmlrpc.client.Fault) as fault:
            proxy.lease_table_page(*args)
        message = fault.value.faultString
        assert fragment in message and "\n" not in message and len(message) < 300, message
        with pytest.raises(xmlrpc.client.Fault, match="must be true or false"):
            proxy.lease_table("yes")


def packed(text: bytes) -> str:
    return base64.b64encode(zlib.compress(text)).decode()


WIDTHS = [5, 14, 11, 24, 24, 14, 7]
GOOD = b" 1    Best-effort   Queued     Unspecified             Unspecified             00:10:00.00   1"


class FakeServer:
    """An XML-RPC server whose lease_table answers what the test says (a broken or hostile lease manager)."""

    def __init__(self, first, pages=None) -> None:
        self.server = SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False, allow_none=True)
        self.server.register_function(lambda flag=False: first, "lease_table")
        self.server.register_function(lambda token, n: (pages or {}).get(n, []), "lease_table_page")
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def first_page(page, rows=1, widths=WIDTHS, pages=1) -> dict:
    return {"token": "t", "widths": widths, "rows": rows, "pages": pages, "page": page}


BOMB = base64.b64encode(zlib.compress(b"a" * (20 * 1024 * 1024))).decode()


@pytest.mark.parametrize("first, fragment", [
    (first_page([[1, packed(GOOD)]]), None),
    ("a string", "not one"),
    (first_page([[1, packed(GOOD)]], widths=[5, 14]), "columns"),
    (first_page([[1, packed(GOOD)]], widths=[5, 14, 11, 24, 24, 14, 10_000]), "columns"),
    (first_page([[1, packed(GOOD)]], pages=0), "page count"),
    (first_page([[1, "not base64!"]]), "does not inflate"),
    (first_page([[1, base64.b64encode(b"not zlib").decode()]]), "does not inflate"),
    (first_page([[1, BOMB]]), "larger than its 1 rows"),
    (first_page([[1, packed(GOOD[:-12] + b"\x1b]0;owned\x07")]]), "not its rows"),
    (first_page([[1, packed(b" 1\n 2")]]), "not its rows"),
    (first_page([[2, packed(GOOD)]], rows=2), "not its rows"),
    (first_page([[1, packed(GOOD)]], rows=5), "announced 5 leases and sent 1"),
    (first_page([["1", packed(GOOD)]]), "not [rows, text]"),
    (first_page([[1, packed(GOOD)]], pages=3), None),        # pages 1 and 2 are empty
    (first_page({"a": 1}), "not a list of blocks"),
], ids=["good", "string", "short-widths", "wide-column", "no-pages", "not-base64", "not-zlib", "zip-bomb",
        "escape-sequence", "extra-row", "missing-row", "wrong-total", "string-count", "empty-pages", "struct"])
def test_the_client_refuses_a_table_that_is_not_one(first, fragment):
    with FakeServer(first) as fake:
        if fragment is None:
            assert listing.list_leases(fake.url, False).splitlines()[1] == GOOD.decode()
            return
        with pytest.raises(Refused) as refused:
            listing.list_leases(fake.url, False)
        assert fragment in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_the_client_reads_no_answer_past_its_bound(monkeypatch):
    with FakeServer(first_page([[1, packed(GOOD)]], rows=1) | {"padding": "x" * 5000}) as fake:
        monkeypatch.setattr("optlease.cli.rpc.MAX_ANSWER_BYTES", 4000)
        with pytest.raises(Refused, match="larger than 4000 bytes"):
            listing.list_leases(fake.url, False)


def test_haizea_server_without_the_table_is_listed_from_its_xml(tmp_path):
    """Against Haizea's own server (no lease_table, no list_leases) the client reads get_leases."""
    with Served(tmp_path, "haizea") as d:
        drain(d.m, random.Random(11), 20)
        xmls = xmlrpc.client.ServerProxy(d.url).get_leases()
        haizea = SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False, allow_none=True)
        haizea.register_function(lambda *flag: xmls, "get_leases")
        threading.Thread(target=haizea.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{haizea.server_address[1]}"
            assert listing.list_leases(url, False) == d.plain(False)
        finally:
            haizea.shutdown()
            haizea.server_close()
