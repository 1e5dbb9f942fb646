"""The daemon as users run it: `optlease serve` as a process on a free loopback port, the client commands as
processes, SQLite files in a temporary folder; kill -9 and restart; malformed requests; `serve --stop`."""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import xmlrpc.client

import pytest
from lxml import etree

from conftest import REPO, daemon_config, run_cli, wait_until
from optlease.cli.lease_cmds import lease_xml
from optlease.formats.lease_states import label_of_code
from mqtt_broker import free_port


@pytest.fixture
def site(tmp_path):
    port = free_port()
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(port))
    return conf, f"http://127.0.0.1:{port}"


def start_fg(conf) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "serve", "-c", str(conf), "--fg"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # a bound on start-up only, so that a daemon that never answers fails the test (start-up took over 30 s at load
    # 27 on 2 cores)
    wait_until(lambda: proc.poll() is not None or ping(conf), 90, "daemon start")
    assert proc.poll() is None, proc.stderr.read()
    return proc


def ping(conf) -> bool:
    port = conf.read_text().split("listen: 127.0.0.1:")[1].split()[0]
    try:
        return xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}").test_func() == 0
    except OSError:
        return False


def table(server, *extra) -> dict[int, list[str]]:
    out = run_cli("list-leases", "-s", server, *extra, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "Type", "State", "Starting"]
    rows = {}
    for line in lines[1:]:
        cells = line.split()
        rows[int(cells[0])] = cells
    return rows


def states(server) -> dict[int, str]:
    return {i: row[2] for i, row in table(server, "--all").items()}


def request(server, *args) -> int:
    out = run_cli("request-lease", "-s", server, *args, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "Lease submitted correctly."
    return int(out.stdout.splitlines()[1].removeprefix("Lease ID: "))


def test_leases_go_scheduled_active_done_and_serve_stop(site):
    conf, server = site
    out = run_cli("serve", "-c", conf, timeout=40)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Started optlease daemon with pid")
    try:
        assert request(server, "-t", "+00:00:15", "-d", "00:00:02", "-n", "1", "--non-preemptible",
                       "-c", "100", "-m", "512", "-i", "foobar.img", "-z", "600") == 1
        rows = table(server)
        assert rows[1][1:3] == ["AR", "Scheduled"] and rows[1][-2:] == ["00:00:02.00", "1"]
        ar_start = " ".join(rows[1][3:5])
        assert request(server, "-t", "best_effort", "-d", "00:00:02", "-n", "4", "-c", "100", "-m", "512") == 2
        # lease 3 (all nodes, 16 s) cannot run between lease 2 and the AR, so it holds aggressive backfilling's one
        # future booking until the AR is over, and lease 4 waits in the queue
        assert request(server, "-t", "best_effort", "-d", "00:00:16", "-n", "4") == 3
        assert request(server, "-t", "best_effort", "-d", "01:00:00", "-n", "4") == 4
        rows = table(server, "--all")
        assert rows[2][1] == "Best-effort" and rows[2][2] in ("Scheduled", "Active", "Done")
        # a best-effort lease shows where the plan starts and ends it once it has one; a queued one has none
        assert rows[2][3] != "Unspecified" or rows[2][2] == "Done"
        # lease 4 waits in the queue until it heads it, then gets its reservation after the others
        assert rows[4][2] in ("Queued", "Scheduled")
        assert (rows[4][3:5] == ["Unspecified", "Unspecified"]) == (rows[4][2] == "Queued"), rows[4]
        queue = run_cli("show-queue", "-s", server).stdout.splitlines()
        assert queue == ["Queue is empty."] or {line.split()[0] for line in queue[1:]} <= {"2", "3", "4"}, queue
        hosts = run_cli("list-hosts", "-s", server).stdout.splitlines()
        assert hosts[0].split() == ["ID", "Hostname", "CPU", "Memory", "State"]
        assert [h.split()[1] for h in hosts[1:]] == ["simul-1", "simul-2", "simul-3", "simul-4"]
        cancel = run_cli("cancel-lease", "-l", "4", "-s", server)
        assert cancel.returncode == 0, cancel.stderr
        seen: dict[int, list[str]] = {1: [], 2: [], 3: []}

        def all_done():
            now = states(server)
            for i in seen:
                if not seen[i] or seen[i][-1] != now[i]:
                    seen[i].append(now[i])
            return all(now[i] == "Done" for i in seen)

        # lease 3 ends about 35 s after the first request at the earliest; a loaded machine needs more
        wait_until(all_done, 60, "every lease done")
        # the AR ran from its exact start (its 2 s of Active may fall between two polls on a loaded machine: the
        # daemon's log says when it started the AR's VMs)
        assert seen[1][-1] == "Done"
        log = (conf.parent / "state.db.log").read_text()
        assert re.search(r"^\[%s\] VMSCHED +Started VMs for lease 1 on nodes" % re.escape(ar_start), log, re.M), \
            ar_start
        assert states(server)[4] == "Cancelled"
        again = run_cli("cancel-lease", "-l", "4", "-s", server)
        assert again.returncode == 1 and "already cancelled" in again.stderr
    finally:
        stop = run_cli("serve", "-c", conf, "--stop", timeout=40)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith("Stopped optlease daemon")
    assert not (conf.parent / "state.db.pid").exists()
    gone = run_cli("list-leases", "-s", server)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "is `optlease serve` running?" in gone.stderr
    assert run_cli("serve", "-c", conf, "--stop").returncode == 1


def api_states(server) -> dict[int, str]:
    """Each lease's state by name, read over the API: a `list-leases` process takes seconds on a loaded machine,
    longer than the AR below is Active."""
    leases = (etree.fromstring(x.encode()) for x in xmlrpc.client.ServerProxy(server).get_leases(True))
    return {int(e.get("id")): label_of_code(e.get("state")) for e in leases}


def test_kill9_then_restart_loses_nothing(site):
    conf, server = site
    proc = start_fg(conf)
    try:
        # the AR starts 2 s after it is requested and runs 8 s: the requests go over the API (four `request-lease`
        # processes took 10 s at load 20, and the AR was Done before it was looked at)
        api = xmlrpc.client.ServerProxy(server)
        assert api.create_lease(lease_xml("+00:00:02", "00:00:08", 2, False, 100, 1024, None, None)) == 1
        for duration, nodes in (("00:00:03", 2), ("00:00:02", 4), ("00:00:02", 1)):
            api.create_lease(lease_xml("best_effort", duration, nodes, None, 100, 1024, None, None))
        wait_until(lambda: api_states(server)[1] == "Active", 10, "the AR to start")
        before = api_states(server)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc = start_fg(conf)
        after = api_states(server)
        assert sorted(after) == [1, 2, 3, 4]
        order = ["Queued", "Scheduled", "Active", "Done"]
        for i, state in before.items():
            assert after[i] == state or (state in order and after[i] in order[order.index(state):]), (before, after)
        assert request(server, "-t", "best_effort", "-d", "00:00:01", "-n", "1") == 5
        wait_until(lambda: set(states(server).values()) == {"Done"}, 30, "the run to finish after the restart")
    finally:
        proc.kill()
        proc.wait(timeout=10)


BILLION = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<lease><nodes><node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="1"/></node-set>
</nodes><start/><duration time="&lol3;"/></lease>"""
XXE = """<?xml version="1.0"?><!DOCTYPE l [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<lease><nodes><node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="1"/></node-set>
</nodes><start/><duration time="&x;"/></lease>"""
GOOD = ('<lease><nodes><node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="1"/>'
        '</node-set></nodes><start/><duration time="00:00:01"/></lease>')

CLI_CORPUS = [
    ["-t", "best_effort", "-d", "00:00:01", "-n", "0"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "-3"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "5"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "99999999999999999999"],
    ["-t", "best_effort", "-d", "00:00:00", "-n", "1"],
    ["-t", "best_effort", "-d", "-00:00:05", "-n", "1"],
    ["-t", "best_effort", "-d", "999999999:00:00:00", "-n", "1"],
    ["-t", "best_effort", "-d", "soon", "-n", "1"],
    ["-t", "yesterday", "-d", "00:00:01", "-n", "1"],
    ["-t", "2001-01-01 00:00:00", "-d", "00:00:01", "-n", "1"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "1", "-c", "0"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "1", "-c", "101"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "1", "-m", "999999999999"],
    ["-t", "best_effort", "-d", "00:00:01", "-n", "1", "--frobnicate"],
    ["-t", "best_effort"],
]
API_CORPUS = [
    ("create_lease", ("<lease",)), ("create_lease", (BILLION,)), ("create_lease", (XXE,)),
    ("create_lease", ("<lease/>",)), ("create_lease", ("not xml at all",)), ("create_lease", (42,)),
    ("create_lease", (GOOD.replace('"100"', '"-5"'),)), ("create_lease", (GOOD.replace("<start/>", ""),)),
    ("create_lease", (GOOD.replace("00:00:01", "00:00:01" + "x" * 70000),)),
    ("create_lease", ()), ("cancel_lease", ("abc",)), ("cancel_lease", (999,)), ("get_lease", (999,)),
    ("no_such_method", ()),
]


def test_malformed_requests_are_refused_in_one_line(site, tmp_path):
    conf, server = site
    proc = start_fg(conf)
    try:
        for args in CLI_CORPUS:
            out = run_cli("request-lease", "-s", server, *args, timeout=30)
            assert out.returncode in (1, 2), (args, out.stdout)
            assert out.stderr.count("\n") == 1 and out.stderr.startswith("optlease: error:"), (args, out.stderr)
        for name, xml in (("billion.xml", BILLION), ("xxe.xml", XXE), ("bad.xml", "<lease><nodes>")):
            (tmp_path / name).write_text(xml)
            out = run_cli("request-lease", "-s", server, "-f", tmp_path / name, timeout=30)
            assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        proxy = xmlrpc.client.ServerProxy(server, allow_none=True)
        for method, args in API_CORPUS:
            with pytest.raises(xmlrpc.client.Fault) as exc:
                getattr(proxy, method)(*args)
            assert "\n" not in exc.value.faultString, (method, exc.value.faultString)
        with socket.create_connection(("127.0.0.1", int(server.rsplit(":", 1)[1])), timeout=5) as s:
            s.sendall(b"POST / HTTP/1.0\r\nContent-Length: 9999999\r\n\r\n<garbage")
            assert b"413" in s.recv(200)
        assert proxy.test_func() == 0
        assert table(server) == {}
        (tmp_path / "good.xml").write_text(GOOD)
        assert request(server, "-f", tmp_path / "good.xml") == 1
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert proc.returncode == 0


def test_token_is_required_when_configured(tmp_path):
    port = free_port()
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(port, daemon="token: s3cret\n"))
    proc = start_fg_token(conf, port)
    try:
        refused = run_cli("list-leases", "-s", f"http://127.0.0.1:{port}")
        assert refused.returncode == 1 and "404" in refused.stderr
        assert run_cli("list-leases", "-s", f"http://127.0.0.1:{port}/s3cret").returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def start_fg_token(conf, port) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "serve", "-c", str(conf), "--fg"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        try:
            return xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}/s3cret").test_func() == 0
        except OSError:
            return proc.poll() is not None
    wait_until(up, 20, "daemon start")
    return proc


def test_it_serves_on_the_ipv6_loopback(tmp_path):
    """`listen: [::1]:PORT` binds an IPv6 socket, and the CLI reaches it by its bracketed URL."""
    port = free_port()
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(port).replace(f"listen: 127.0.0.1:{port}", f"listen: [::1]:{port}"))
    proc = subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "serve", "-c", str(conf), "--fg"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        server = f"http://[::1]:{port}"

        def up() -> bool:
            try:
                return xmlrpc.client.ServerProxy(server).test_func() == 0
            except OSError:
                return False
        wait_until(lambda: proc.poll() is not None or up(), 20, "daemon start on ::1")
        assert proc.poll() is None, proc.stderr.read()
        assert table(server) == {}
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_non_loopback_without_token_is_refused(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(free_port()).replace("listen: 127.0.0.1", "listen: 0.0.0.0"))
    out = run_cli("serve", "-c", conf, "--fg", timeout=30)
    assert out.returncode == 2 and "set [daemon] token" in out.stderr and out.stderr.count("\n") == 1


@pytest.mark.parametrize("listen, message", [
    ("127.0.0.1:99999", "port 99999 is too large"), ("127.0.0.1:http", "port 'http' is not a whole number"),
    ("127.0.0.1:", "is not HOST:PORT"), ("localhost", "is not HOST:PORT"), ("127.0.0.1:+80", "is not HOST:PORT"),
    ("[::]:4000", "is not loopback"), ("[::1", "goes in brackets"), ("::1:4000", "goes in brackets"),
    ("[::1]", "goes in brackets"), ("[fe80::zz]:4000", "is not HOST:PORT"), ("[1::2::3]:4000", "is not an IPv6"),
    ("my host:4000", "is not HOST:PORT"),
], ids=["port-too-large", "port-by-name", "no-port", "no-colon", "signed-port", "ipv6-any", "ipv6-unclosed",
        "ipv6-unbracketed", "ipv6-no-port", "ipv6-bad-digit", "ipv6-two-gaps", "space-in-host"])
def test_a_listen_address_it_cannot_serve_on_is_one_line(tmp_path, listen, message):
    port = free_port()
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(port).replace(f"listen: 127.0.0.1:{port}", f"listen: {listen}"))
    out = run_cli("serve", "-c", conf, "--fg", timeout=30)
    assert out.returncode == 2 and message in out.stderr and "[daemon] listen" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
