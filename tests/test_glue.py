"""GLUE 1.1 in and out: a Cluster/SubCluster/Host read as the site from XML and from LDIF, a corpus of broken
documents refused with one line each, the round trip through the published CE, the same schedule as the site
written as LWF, the CE's LDIF read by python-ldap's LDIF parser, and a daemon whose published state agrees with
list-leases, show-queue and list-hosts at the same instant."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from lxml import etree

from conftest import INSTANCES, run_cli
from optlease.engine.grid_state import ce_in_simulation
from optlease.errors import InputError
from optlease.formats.config import load_config
from optlease.formats.glue import load_glue_site, parse_glue_site
from optlease.formats.glue_ce import CEState, write_ldif, write_xml
from optlease.formats.lwf import Workload, load_lwf
from optlease.formats.lwf_write import dump_lwf
from test_sss import schedule

GRID = INSTANCES / "grid"
BROKEN = Path(__file__).parent / "data" / "grid" / "broken-glue"
CLUSTER = [{"CPU": 200, "Memory": 2048, "Swap": 4096}] * 2 + [{"CPU": 100, "Memory": 1024},
                                                              {"CPU": 100, "Memory": 1536}]


@pytest.mark.parametrize("name", ["cluster.glue.xml", "cluster.glue.ldif"])
def test_cluster_read_as_site(name):
    site = load_glue_site(GRID / name)
    assert list(site.nodes) == CLUSTER
    assert site.resource_types == ("CPU", "Memory", "Swap")
    assert site.details[0]["OperatingSystem/Name"] == "Debian"


def test_hosts_inherit_their_subcluster():
    site = load_glue_site(GRID / "cluster.glue.xml")
    assert [d["name"] for d in site.details] == ["dual-1", "dual-2", "wn5", "wn6"]


BROKEN_GLUE = {
    "no-ramsize.xml": "has no MainMemory/RAMSize",
    "no-smpsize.xml": "no Architecture/SMPSize",
    "uneven-nodes.xml": "PhysicalCPUs 3 is not a whole number of SMPSize 2 nodes",
    "negative-memory.xml": "RAMSize '-512' is not a whole number",
    "unknown-attribute.xml": "<Flux>: not a GLUE attribute",
    "hosts-conflict.xml": "PhysicalCPUs 8 conflicts with its hosts' SMPSize",
    "no-cluster.xml": "<Grid>: holds no <Cluster>",
    "malformed.xml": "malformed XML",
    "not-a-line.ldif": "not an LDIF `attribute: value` line",
    "changetype.ldif": "only content records are read",
    "url-value.ldif": "values read from URLs",
    "bad-base64.ldif": "bad base64 value",
    "no-dn.ldif": "an LDIF entry starts with dn:",
    "twice.ldif": "GlueSubClusterPhysicalCPUs is given 2 times",
    "nothing.ldif": "no GLUE subcluster or host",
    "not-utf8.ldif": "not UTF-8 text",
    "unicode-digit.xml": "PhysicalCPUs '²' is not a whole number",
}


@pytest.mark.parametrize("name", sorted(BROKEN_GLUE))
def test_broken_documents_give_one_line_with_the_place(name):
    path = BROKEN / name
    with pytest.raises(InputError) as info:
        load_glue_site(path)
    text = str(info.value)
    assert "\n" not in text and BROKEN_GLUE[name] in text
    assert text.startswith(f"{path}"), text


def test_every_broken_document_is_in_the_table():
    assert {p.name for p in BROKEN.iterdir()} == set(BROKEN_GLUE)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="dn:GlueSubClusterUniqueIDPhysicalCPUs 0123\n=,-", max_size=200))
def test_any_ldif_text_gives_a_site_or_an_input_error(text):
    try:
        parse_glue_site(text.encode())
    except InputError as exc:
        assert "\n" not in str(exc)


def ce(**kw) -> CEState:
    base = dict(host="ce.example.org", port=42493, version="0.1.0", total_cpus=6, running=1, waiting=2,
                free_cpus=3, estimated_response=0, worst_response=60)
    return CEState(**{**base, **kw})


@pytest.mark.parametrize("write", [write_ldif, write_xml], ids=["ldif", "xml"])
def test_cluster_round_trips_through_the_published_ce(write):
    site = load_glue_site(GRID / "cluster.glue.xml")
    again = parse_glue_site(write(ce(), site).encode())
    assert again.nodes == site.nodes and again.resource_types == site.resource_types
    assert again.details[0]["OperatingSystem/Name"] == "Debian"


def test_a_site_from_glue_schedules_as_the_same_site_written_as_lwf(tmp_path):
    conf = GRID / "quickstart-glue.conf"
    trace = load_lwf(INSTANCES / "quickstart" / "quickstart.lwf")
    lwf = tmp_path / "with-site.lwf"
    lwf.write_bytes(dump_lwf(Workload(trace.name, trace.requests, site=load_glue_site(GRID / "cluster.glue.xml"))))
    cfg = load_config(conf, {"simulation": {"resources": "in-tracefile"}, "tracefile": {"tracefile": str(lwf)}})
    assert schedule(load_config(conf)) == schedule(cfg)


def test_ldif_is_read_by_python_ldap():
    ldif = pytest.importorskip("ldif", reason="python-ldap (Debian libldap2-dev, libsasl2-dev to build)")
    site = load_glue_site(GRID / "cluster.glue.xml")
    text = write_ldif(ce(host="cé.example.org"), site)   # a non-ASCII value must go out in base64
    parser = ldif.LDIFRecordList(io.BytesIO(text.encode()), max_entries=0)
    parser.parse()
    records = dict(parser.all_records)
    ce_dn = "GlueCEUniqueID=cé.example.org:42493/jobmanager-optlease-default,mds-vo-name=resource,o=grid"
    entry = records[ce_dn]
    assert entry["GlueCEStateTotalJobs"] == [b"3"] and entry["GlueCEInfoLRMSType"] == [b"optlease"]
    assert entry["GlueCEStateStatus"] == [b"Production"]
    assert sum(b"GlueSubCluster" in r.get("objectClass", []) for r in records.values()) == 3


def test_simulation_published_at_an_instant(cli):
    """The quickstart at 00:45: the AR (lease 2) runs on all four nodes and lease 1 waits suspended for it to end
    at 01:00, which is when a new one-core lease would find room."""
    state, site = ce_in_simulation(load_config(INSTANCES / "quickstart" / "quickstart.conf"), 45 * 60)
    assert (state.running, state.waiting, state.free_cpus, state.total_cpus) == (1, 1, 0, 4)
    assert state.jobs == [(1, "CHECKPOINTED"), (2, "RUNNING")]
    assert state.estimated_response == 15 * 60 and state.worst_response >= state.estimated_response
    proc = cli("glue", "-c", INSTANCES / "quickstart" / "quickstart.conf", "--at", "00:45:00", "--format", "xml")
    assert proc.returncode == 0, proc.stderr
    root = etree.fromstring(proc.stdout.encode())
    assert root.findtext("State/EstimatedResponseTime") == "900" and root.findtext("Info/LRMSType") == "optlease"


@pytest.mark.parametrize("args, message", [
    (["--format", "json"], "--format 'json': expected ldif or xml"),
    (["--at", "00:10:00"], "--at is for a simulation"),
    (["-c", str(INSTANCES / "quickstart" / "quickstart.conf")], "needs --at TIME"),
    (["-c", str(INSTANCES / "quickstart" / "quickstart.conf"), "--at", "soon"], "--at 'soon'"),
], ids=["format", "at-without-conf", "conf-without-at", "bad-at"])
def test_glue_refuses_bad_options_in_one_line(cli, args, message):
    proc = cli("glue", *args)
    assert proc.returncode != 0 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def timeless(text: str) -> str:
    """A published CE without its response times, which count down with the daemon's clock."""
    return re.sub(r"ResponseTime(>|: )\d+", r"ResponseTime\1", text)


def test_daemon_glue_agrees_with_the_lease_commands(tmp_path):
    """Two nodes: lease 1 (1 node) runs, lease 2 (2 nodes) waits in the queue (no backfilling) until lease 1 ends
    at 00:30, an AR (lease 3) is booked at 02:00, an immediate lease (4) that cannot fit is rejected and is no
    job of the CE."""
    from test_api import BEST_EFFORT, LEASE, Daemon
    d = Daemon(tmp_path, resources="2 CPU:100 Memory:1024").serve()
    try:
        proxy = d.proxy()
        # each step at the daemon's own now: a request arrives at the real clock's instant, and a step at a fixed
        # instant would leave it unread when a loaded machine lets a second or more pass before it
        proxy.create_lease(BEST_EFFORT)
        d.manager.step(d.manager.now())
        proxy.create_lease(LEASE.format(n=2, start=""))
        proxy.create_lease(LEASE.format(n=1, start='<exact time="+02:00:00"/>'))
        proxy.create_lease(LEASE.format(n=2, start="<now/>"))
        d.manager.step(d.manager.now())
        assert not d.manager.inbox, "a request was left for a later step"
        published = proxy.get_glue("xml")
        ldif_text = proxy.get_glue()
        listed = run_cli("list-leases", "-s", d.url, timeout=30)
        queue = run_cli("show-queue", "-s", d.url, timeout=30)
        hosts = run_cli("list-hosts", "-s", d.url, "--format", "sss", timeout=30)
        again = proxy.get_glue("xml")
        via_cli = run_cli("glue", "-s", d.url, "--format", "ldif")
    finally:
        d.close()
    # nothing but the daemon's real clock moved while the commands ran: the same instant of the plan
    assert timeless(again) == timeless(published)
    assert via_cli.returncode == 0 and timeless(via_cli.stdout) == timeless(ldif_text)
    root = etree.fromstring(published.encode())
    states = [line.split()[2] for line in listed.stdout.splitlines()[1:]]
    assert sorted(states) == ["Active", "Queued", "Scheduled"]
    assert int(root.findtext("State/RunningJobs")) == states.count("Active") == 1
    assert int(root.findtext("State/WaitingJobs")) == len(states) - states.count("Active") == 2
    assert int(root.findtext("State/TotalJobs")) == len(states)
    queued = [line.split()[0] for line in queue.stdout.splitlines()[1:]]
    assert [j.findtext("LocalID") for j in root.iter("Job") if j.findtext("Status") == "WAITING"] == queued == ["2"]
    free = sum(int(n.findtext("Available/Processors")) for n in etree.fromstring(hosts.stdout.encode()))
    assert int(root.findtext("State/FreeCPUs")) == free == 1
    # the new lease would queue behind lease 2, which needs both nodes once lease 1 ends at 00:30 (counted from
    # the daemon's now, a few seconds after lease 1 started: the slack is the real clock's, not the plan's)
    assert 25 * 60 < int(root.findtext("State/EstimatedResponseTime")) <= 30 * 60
    assert root.findtext("State/Status") == "Production"
    assert re.search(r"^GlueCEStateWaitingJobs: 2$", ldif_text, re.M)
    assert "4" not in [j.findtext("LocalID") for j in root.iter("Job")]


def test_response_error_script_on_a_trace_checked_by_hand():
    """ert.lwf: the estimate at 00:00 is 0 and lease 3 waits 0; at 00:10 it is 6600 s (a one-hour hole opens only
    after lease 2 ends at 02:00) and lease 4 waits 1200 s; at 00:20 no 1-node lease follows."""
    import subprocess
    import sys

    from conftest import REPO
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "glue_response_error.py"), "-c",
                          str(Path(__file__).parent / "data" / "grid" / "ert.conf")],
                         capture_output=True, text=True, check=True, timeout=120)
    figures = json.loads(out.stdout)
    assert (figures["publications"], figures["compared"]) == (3, 2)
    assert (figures["mean_estimate_s"], figures["mean_wait_s"], figures["mean_abs_error_s"]) == (3300, 600, 2700)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["PhysicalCPUs", "LogicalCPUs", "Architecture/SMPSize", "MainMemory/RAMSize",
                                 "MainMemory/VirtualSize", "Name"]), max_size=6),
       st.lists(st.text(alphabet="0123456789-.e ²x", max_size=6), min_size=6, max_size=6),
       st.integers(0, 3))
def test_any_subcluster_gives_a_site_or_one_line(keys, values, hosts):
    """Safety: whatever a subcluster's counts say, the reader gives a site or one line, never more than it can
    plan for."""
    def elem(key, value):
        outer, _, inner = key.partition("/")
        return f"<{outer}><{inner}>{value}</{inner}></{outer}>" if inner else f"<{key}>{value}</{key}>"
    body = "".join(elem(k, v) for k, v in zip(keys, values)) + "<Host><Name>h</Name></Host>" * hosts
    try:
        site = parse_glue_site(f"<Cluster><SubCluster>{body}</SubCluster></Cluster>".encode())
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert 1 <= len(site.nodes) <= 100_000
        assert all(n["CPU"] >= 100 and n["Memory"] >= 1 for n in site.nodes)


@pytest.mark.parametrize("stopping, down, status", [
    (False, False, "Production"), (False, True, "Queueing"), (True, False, "Draining"), (True, True, "Closed"),
], ids=["serving", "hosts-down", "stopping", "stopping-hosts-down"])
def test_daemon_status_follows_its_hosts_and_its_stop(tmp_path, stopping, down, status):
    from test_api import Daemon
    d = Daemon(tmp_path, resources="2 CPU:100 Memory:1024").serve()
    try:
        with d.manager.lock:
            if down:
                for node in (1, 2):
                    d.manager.sched.table.take_down(node)
            if stopping:
                d.manager.stopping.set()
        root = etree.fromstring(d.proxy().get_glue("xml").encode())
    finally:
        d.close()
    assert root.findtext("State/Status") == status
    assert root.findtext("State/FreeCPUs") == ("0" if down else "2")
