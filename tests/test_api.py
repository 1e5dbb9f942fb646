"""The request API as a client meets it over a real loopback socket: concurrency (an idle connection, a burst of
32 clients), bodies (size caps after gzip/deflate, hostile headers), Faults in the user's terms, the token kept out
of client messages, and the fields Haizea 1.1's own clients read (numeric states, hosts)."""
from __future__ import annotations

import gzip
import re
import socket
import threading
import xml.etree.ElementTree as ET
import xmlrpc.client
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run_cli
from optlease.domain.lease import LeaseState
from optlease.engine.api import make_server
from optlease.engine.daemon import Manager
from optlease.formats.config import parse_config
from optlease.formats.daemon_config import daemon_config

LEASE = ('<lease preemptible="true"><nodes><node-set numnodes="{n}"><res type="CPU" amount="100"/>'
         '<res type="Memory" amount="512"/></node-set></nodes><start>{start}</start>'
         '<duration time="00:30:00"/><software><disk-image id="foo.img" size="1024"/></software></lease>')
BEST_EFFORT = LEASE.format(n=1, start="")
# what a Fault may never show: Python's classes, exceptions, parsers, tracebacks
INTERNALS = re.compile(r"<class|Error\b|Exception|Traceback|expat|Api\.|\bint\(\)|object at 0x")


class Daemon:
    """A Manager with its API on a free loopback port, in this process; steps are taken by the test."""

    def __init__(self, tmp_path, resources: str = "2 CPU:100 Memory:1024", token: str | None = None) -> None:
        text = daemon_config(port=0, persistence_file="none", resources=resources,
                             scheduling={"suspension": "none", "backfilling": "off"})
        self.manager = Manager(parse_config(text, str(tmp_path / "d.conf"), tmp_path))
        self.server = make_server(self.manager, "127.0.0.1:0", token)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/{token or ''}"
        self.thread: threading.Thread | None = None

    def serve(self) -> "Daemon":
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        return self

    def proxy(self, timeout: float = 10) -> xmlrpc.client.ServerProxy:
        return xmlrpc.client.ServerProxy(self.url, transport=_Timeout(timeout), allow_none=True)

    def close(self) -> None:
        if self.thread is not None:
            self.server.shutdown()
        self.server.server_close()
        self.manager.stop()


class _Timeout(xmlrpc.client.Transport):
    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def make_connection(self, host):
        conn = super().make_connection(host)
        conn.timeout = self.timeout
        return conn


@pytest.fixture
def daemon(tmp_path):
    made: list[Daemon] = []

    def make(**kwargs) -> Daemon:
        made.append(Daemon(tmp_path, **kwargs))
        return made[-1]
    yield make
    for d in made:
        d.close()


def post(port: int, body: bytes, headers: dict[str, str] | None = None, path: str = "/") -> tuple[int, bytes]:
    """One raw HTTP POST; the status code and the body of the answer."""
    head = {"Content-Type": "text/xml", "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    request = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode("latin-1") + b"\r\n" + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def call_body(method: str, *params) -> bytes:
    return xmlrpc.client.dumps(params, method, allow_none=True).encode()


# -- concurrency ---------------------------------------------------------------------------------------------------

def test_an_idle_connection_blocks_no_one(daemon):
    d = daemon(token="s3cret").serve()
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as idle:
        idle.sendall(b"POST /s3cret HTTP/1.1\r\n")          # a request that never ends
        assert d.proxy(timeout=5).create_lease(BEST_EFFORT) == 1
        assert d.proxy(timeout=5).test_func() == 0


def test_a_burst_of_32_clients_is_queued_and_answered(daemon):
    """32 clients connect while the server accepts nobody (busy): each handshake completes at once (no SYN
    retries), and once it serves, every client gets its answer."""
    d = daemon()
    clients = []
    try:
        for _ in range(32):
            s = socket.socket()
            s.settimeout(0.5)            # a dropped SYN is first retried after 1 s
            s.connect(("127.0.0.1", d.port))
            clients.append(s)
        body = call_body("create_lease", BEST_EFFORT)
        for s in clients:
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
        d.serve()
        ids = []
        for s in clients:
            s.settimeout(10)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
            ids.append(xmlrpc.client.loads(answer.partition(b"\r\n\r\n")[2])[0][0])
    finally:
        for s in clients:
            s.close()
    assert sorted(ids) == list(range(1, 33))


def test_32_concurrent_clients_all_answered(daemon):
    d = daemon().serve()
    with ThreadPoolExecutor(32) as pool:
        ids = list(pool.map(lambda _: d.proxy().create_lease(BEST_EFFORT), range(64)))
    assert sorted(ids) == list(range(1, 65))
    assert len(d.manager.all) == 64


# -- bodies and headers --------------------------------------------------------------------------------------------

BOMB = gzip.compress(b"<" + b" " * (18 * 1024 * 1024), 9)        # 18 MB of spaces in about 18 KB


@pytest.mark.parametrize("headers, body, status", [
    pytest.param({"Content-Encoding": "gzip"}, BOMB, 413, id="gzip-bomb"),
    pytest.param({"Content-Encoding": "deflate"}, zlib.compress(b" " * (300 * 1024)), 413, id="deflate-300KB"),
    pytest.param({"Content-Encoding": "gzip"}, b"not gzip at all", 400, id="gzip-garbage"),
    pytest.param({"Content-Encoding": "gzip"}, gzip.compress(call_body("test_func"))[:-6], 400, id="gzip-truncated"),
    pytest.param({"Content-Encoding": "br"}, b"x", 415, id="unknown-encoding"),
    pytest.param({"Content-Length": "\u00b2"}, b"x", 400, id="superscript-length"),
    pytest.param({"Content-Length": "+1"}, b"x", 400, id="signed-length"),
    pytest.param({"Content-Length": "9999999"}, b"x", 413, id="huge-length"),
], )
def test_hostile_bodies_are_refused_with_a_status(daemon, headers, body, status):
    d = daemon().serve()
    assert post(d.port, body, headers)[0] == status
    assert d.proxy().test_func() == 0
    assert d.manager.all == {}


@pytest.mark.parametrize("encoding, pack", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_compressed_requests_within_the_cap_are_served(daemon, encoding, pack):
    d = daemon().serve()
    status, answer = post(d.port, pack(call_body("create_lease", BEST_EFFORT)), {"Content-Encoding": encoding})
    assert status == 200 and xmlrpc.client.loads(answer)[0] == (1,)


# -- Faults in the user's terms ------------------------------------------------------------------------------------

NESTED = b"<?xml version='1.0'?><methodCall><methodName>create_lease</methodName><params><param><value>" + \
    b"<array><data><value>" * 50000 + b"</value></data></array>" * 50000 + b"</value></param></params></methodCall>"


@pytest.mark.parametrize("body, fragment", [
    pytest.param(b"<methodCall><methodName>test_func", "not a well-formed XML-RPC call", id="malformed-xmlrpc"),
    pytest.param(b"\x00\xff garbage", "not a well-formed XML-RPC call", id="binary"),
    pytest.param(NESTED[:250_000], "not a well-formed XML-RPC call", id="deep-nesting"),
    pytest.param(call_body("create_lease", LEASE.format(n="\u00b2", start="")), "numnodes", id="superscript"),
    pytest.param(call_body("create_lease", BEST_EFFORT, BEST_EFFORT), "wrong arguments", id="two-args"),
    pytest.param(call_body("create_lease", [1, 2]), "XML string", id="list-arg"),
    pytest.param(call_body("cancel_lease", "\u0663"), "not a whole number", id="arabic-indic-id"),
    pytest.param(call_body("cancel_lease", {"a": 1}), "not a whole number", id="struct-id"),
    pytest.param(call_body("get_lease", "1_0"), "not a whole number", id="underscore-id"),
    pytest.param(call_body("x" * 5000), "unknown method", id="long-method-name"),
    pytest.param(call_body("_dispatch", "test_func", ()), "unknown method", id="private-method"),
])
def test_faults_name_no_internals(daemon, body, fragment):
    d = daemon().serve()
    status, answer = post(d.port, body)
    assert status == 200
    with pytest.raises(xmlrpc.client.Fault) as fault:
        xmlrpc.client.loads(answer)
    message = fault.value.faultString
    assert fragment in message and "\n" not in message and len(message) < 300, message
    assert not INTERNALS.search(message), message
    assert d.proxy().test_func() == 0


# -- the token -----------------------------------------------------------------------------------------------------

def test_client_messages_never_show_the_token(daemon):
    d = daemon(token="t0psecret").serve()
    wrong = run_cli("cancel-lease", "-l", "7", "-s", d.url, timeout=30)          # a Fault from the daemon
    dead = run_cli("list-leases", "-s", "http://127.0.0.1:1/t0psecret", timeout=30)   # nobody listens
    path = run_cli("list-leases", "-s", d.url + "x", timeout=30)               # a wrong token: 404
    for out in (wrong, dead, path):
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert "t0psecret" not in out.stderr + out.stdout, out.stderr
    assert "no lease 7" in wrong.stderr and "404" in path.stderr and "http://127.0.0.1:1/..." in dead.stderr


# -- Haizea 1.1's clients ------------------------------------------------------------------------------------------
# haizea-list-leases and haizea-show-queue read each string with Lease.from_xml_string and print id, type, state
# (through Lease.state_str, keyed by the numeric code), the requested start and duration and len(requested
# resources); haizea-list-hosts prints id, hostname, cpu and mem of each get_hosts entry.
HAIZEA_STATE_STR = {0: "New", 1: "Pending", 2: "Rejected", 3: "Scheduled", 4: "Queued", 5: "Cancelled",
                    6: "Preparing", 7: "Ready", 8: "Active", 9: "Suspending", 10: "Suspended-Pending",
                    11: "Suspended-Queued", 12: "Suspended-Scheduled", 13: "Migrating", 14: "Resuming",
                    15: "Resumed-Ready", 16: "Done", 17: "Fail", 18: "Rejected by user"}


def haizea_reads(text: str) -> dict:
    """The fields Haizea 1.1's client takes from one lease string, read the way it reads them."""
    elem = ET.fromstring(text)
    start = elem.find("start")
    kind = "Best-effort" if len(start) == 0 else ("Immediate" if start[0].tag == "now" else "AR")
    software = elem.find("software")
    if software.find("disk-image") is not None:
        int(software.find("disk-image").get("size"))
    else:
        assert software.find("none") is not None
    assert elem.get("preemptible").capitalize() in ("True", "False")
    nodes = sum(int(ns.get("numnodes")) for ns in elem.find("nodes").findall("node-set"))
    for res in elem.iter("res"):
        int(res.get("amount"))
    return {"id": int(elem.get("id")), "type": kind, "state": HAIZEA_STATE_STR[int(elem.get("state"))],
            "start_req": start[0].get("time") if kind == "AR" else None,
            "duration_req": elem.find("duration").get("time"), "numnodes": nodes}


@pytest.fixture
def busy_site(daemon):
    """One node: a best-effort lease running, one queued behind it (no backfilling), an AR booked ahead."""
    d = daemon(resources="1 CPU:100 Memory:1024").serve()
    proxy = d.proxy()
    assert proxy.create_lease(BEST_EFFORT) == 1
    assert proxy.create_lease(BEST_EFFORT) == 2
    assert proxy.create_lease(LEASE.format(n=1, start='<exact time="+02:00:00"/>')) == 3
    d.manager.step(d.manager.now())   # at the requests' arrival (the real clock may have passed 0)
    return d, proxy


def test_haizea_list_leases_reads_every_lease(busy_site):
    d, proxy = busy_site
    rows = sorted((haizea_reads(x) for x in proxy.get_leases()), key=lambda r: r["id"])
    assert [(r["id"], r["type"], r["state"], r["numnodes"]) for r in rows] == [
        (1, "Best-effort", "Active", 1), (2, "Best-effort", "Queued", 1), (3, "AR", "Scheduled", 1)]
    assert rows[0]["duration_req"] == "00:30:00.00"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.00", rows[2]["start_req"])


def test_haizea_show_queue_reads_the_queue(busy_site):
    _, proxy = busy_site
    assert [haizea_reads(x)["state"] for x in proxy.get_queue()] == ["Queued"]
    assert [haizea_reads(x)["id"] for x in proxy.get_queue()] == [2]


def test_haizea_list_hosts_reads_each_host(busy_site):
    _, proxy = busy_site
    (host,) = proxy.get_hosts()
    assert (host["id"], host["cpu"], host["mem"]) == (1, 100, 1024) and isinstance(host["hostname"], str)


def test_optlease_client_names_the_states_again(busy_site):
    d, _ = busy_site
    listed = run_cli("list-leases", "-s", d.url, timeout=30)
    queue = run_cli("show-queue", "-s", d.url, timeout=30)
    assert listed.returncode == 0 and queue.returncode == 0, listed.stderr + queue.stderr
    states = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines()[1:]}
    assert states == {"1": "Active", "2": "Queued", "3": "Scheduled"}
    assert [line.split()[2] for line in queue.stdout.splitlines()[1:]] == ["Queued"]


def test_bench_daemon_prints_its_figures_with_no_failed_call():
    import json
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_daemon.py"), "--requests", "64",
                          "--preload", "50", "--clients", "32"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["accepted"] == 64 and figures["failed_calls"] == {} and figures["started"] == 64
    assert figures["leases_before"] == 50 and figures["request_to_start_ms"]["p95"] is not None


def test_a_client_trickling_bytes_is_cut_off(daemon, monkeypatch):
    """A byte every 0.2 s never trips the idle timeout; the request's deadline cuts it off all the same."""
    import time

    from optlease.engine import api_http

    monkeypatch.setattr(api_http, "READ_DEADLINE", 1.0)
    d = daemon().serve()
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as slow:
        closed = False
        for byte in b"POST / HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 200:
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.2)
            slow.setblocking(False)
            try:
                closed = slow.recv(100) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            slow.setblocking(True)
            if closed:
                break
        assert closed
    assert d.proxy().test_func() == 0


# -- the listing's flag --------------------------------------------------------------------------------------------

def raw_call(method: str, value_xml: str) -> bytes:
    """A call with one parameter written by hand (types and sizes Python's marshaller refuses to send)."""
    return (f"<?xml version='1.0'?><methodCall><methodName>{method}</methodName><params><param><value>"
            f"{value_xml}</value></param></params></methodCall>").encode()


@pytest.mark.parametrize("body, fragment", [
    pytest.param(call_body("list_leases", "false"), "must be true or false", id="string-false"),
    pytest.param(call_body("list_leases", "yes"), "must be true or false", id="string-yes"),
    pytest.param(call_body("list_leases", 2), "must be true or false", id="int-2"),
    pytest.param(call_body("list_leases", -1), "must be true or false", id="int-minus-1"),
    pytest.param(call_body("list_leases", 1.0), "must be true or false", id="double"),
    pytest.param(call_body("list_leases", None), "must be true or false", id="nil"),
    pytest.param(call_body("list_leases", [True]), "must be true or false", id="array"),
    pytest.param(call_body("list_leases", {"include_finished": True}), "must be true or false", id="struct"),
    pytest.param(raw_call("list_leases", "<i8>9223372036854775807</i8>"), "must be true or false", id="i8-max"),
    pytest.param(raw_call("list_leases", "<int>" + "9" * 5000 + "</int>"), "", id="int-5000-digits"),
    pytest.param(raw_call("list_leases", "<string>" + "x" * 100_000 + "</string>"), "must be true or false",
                 id="string-100k"),
    pytest.param(call_body("list_leases", True, True), "wrong arguments", id="extra-param"),
    pytest.param(call_body("list_leases", True, "x", {"a": 1}), "wrong arguments", id="three-params"),
    pytest.param(call_body("get_leases", "true"), "must be true or false", id="get-leases-string"),
])
def test_the_listing_flag_refuses_anything_but_a_boolean(daemon, body, fragment):
    """`list_leases` (and `get_leases`) take one yes/no flag: any other type or size is one line, with no internal
    name, and the service goes on (a string "false" used to list the finished leases: it is truthy)."""
    d = daemon().serve()
    d.proxy().create_lease(BEST_EFFORT)
    status, answer = post(d.port, body)
    assert status in (200, 400), status
    if status == 200:
        with pytest.raises(xmlrpc.client.Fault) as fault:
            xmlrpc.client.loads(answer)
        message = fault.value.faultString
        assert fragment in message and "\n" not in message and len(message) < 300, message
        assert not INTERNALS.search(message), message
    proxy = d.proxy()
    assert proxy.list_leases(True).count("\n") == 0 and proxy.list_leases(False).startswith("1\t")
    assert proxy.list_leases(0) == proxy.list_leases(False) and proxy.list_leases(1) == proxy.list_leases(True)


@pytest.mark.parametrize("option, value", [("--fill-batch", "0"), ("--fill-batch", "-5"), ("--hosts", "many"),
                                           ("--in-system", "1e9"), ("--clients", "0")])
def test_the_scale_bench_refuses_counts_below_one_before_it_starts(option, value):
    """A batch of 0 would never fill, and no count can be below 1: the benchmark says which option and stops."""
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_daemon.py"), "--mode", "scale", option, value],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"argument {option}" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_bench_preload_steps_requests_that_arrive_after_the_last_step(tmp_path):
    """bench_daemon's preload with the real clock past its last step when the requests come (a loaded machine): each
    is stepped at its arrival and runs to Done (stepping at the last step again and again never took them: the bench
    spun until it was killed)."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("bench_daemon", REPO / "scripts" / "bench_daemon.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = daemon_config(port=0, persistence_file="none", resources=bench.SIMULATED_SITE, scheduling=bench.SCHEDULING)
    manager = Manager(parse_config(text, str(tmp_path / "b.conf"), tmp_path))
    manager.clock.now = lambda: 7       # the requests arrive at 7; the daemon's last step was at 0
    done = threading.Event()
    worker = threading.Thread(target=lambda: (bench.preload(manager, 5), done.set()), daemon=True)
    worker.start()
    try:
        assert done.wait(60), "the preload did not finish"
        assert {lease.state for lease in manager.all.values()} == {LeaseState.DONE} and len(manager.all) == 5
        assert min(lease.req.arrival for lease in manager.all.values()) == 7
    finally:
        manager.stop()


def test_the_scale_bench_fill_builds_what_requests_one_by_one_build(tmp_path):
    """bench_daemon's fill (batches of requests, each committed in the step that takes it) leaves the state that the
    same requests submitted one at a time leave: the same leases, running on the same hosts, with their VMs
    started, and all of it on disk (a restart from the file finds every lease as it was)."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("bench_daemon", REPO / "scripts" / "bench_daemon.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from optlease.engine.api import parse_lease_xml

    def placements(manager) -> dict:
        return {i: (lease.state.value, tuple(sorted(lease.last_vmrr().mapping.items())))
                for i, lease in manager.sched.leases.items()}

    states = []
    for how in ("batched", "one-by-one"):
        folder = tmp_path / how
        folder.mkdir()
        text = daemon_config(port=0, persistence_file=str(folder / "f.db"), resources="6 CPU:100 Memory:1024",
                             scheduling=bench.SCHEDULING)
        cfg = parse_config(text, str(folder / "f.conf"), folder)
        manager = Manager(cfg)
        manager.clock.now = lambda: 100     # both at one instant: one-by-one steps each request at the same time
        if how == "batched":
            bench.fill(manager, 45, 16)
        else:
            for _ in range(45):
                manager.submit(lambda i, t: parse_lease_xml(bench.SCALE_LEASE, i, t, manager.origin, manager.site),
                               bench.SCALE_LEASE)
                manager.step(manager.now())
        states.append(placements(manager))
        assert len(manager.sched.leases) == 45
        assert {f"lease-{i}-vm-1" for i in manager.sched.leases} <= set(manager.enactor.started_at)
        manager.stop()
        again = Manager(cfg)
        assert placements(again) == states[-1]
        again.stop()
    assert states[0] == states[1]
    assert {state for state, _ in states[0].values()} == {"active"}
