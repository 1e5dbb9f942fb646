"""SSS node objects (SSS-NODE 3.1.0) in and out: every example of the specification read, the site's units and
names, a corpus of broken documents refused with one line each, the round trip back to SSS, the same schedule as
the site written as LWF, and the daemon's live hosts published as node objects (XML-RPC and list-hosts)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from lxml import etree

from conftest import INSTANCES, run_cli
from optlease.engine.run import simulate
from optlease.errors import InputError
from optlease.formats.config import load_config
from optlease.formats.lwf import Workload, load_lwf
from optlease.formats.lwf_write import dump_lwf
from optlease.formats.schedule_json import schedule_document
from optlease.formats.sss import parse_sss, load_sss
from optlease.formats.sss_write import HostState, write_sss

DATA = Path(__file__).parent / "data" / "grid"
GRID = INSTANCES / "grid"


def node(body: str, attrs: str = "") -> bytes:
    return f"<Node{attrs}><Id>n</Id>{body}</Node>".encode()


# -- the specification's examples ---------------------------------------------------------------------------------

def test_spec_simple_example():
    site = load_sss(DATA / "sss-simple.xml")
    assert site.nodes == ({"CPU": 200, "Memory": 512},)
    assert site.details[0]["name"] == "Node64"


def test_spec_elaborate_example():
    site = load_sss(DATA / "sss-elaborate.xml")
    assert site.nodes == ({"CPU": 1600, "Memory": 512, "Swap": 512},)
    d = site.details[0]
    assert (d["name"], d["features"], d["opsys"], d["arch"]) == ("Netpipe2", ["BigMem", "NetOC12"], "AIX", "Power4")
    assert d["available"] == {"CPU": 700, "Memory": 143}


# The spec's fragments (sections 4.1-4.3), placed in the smallest node that holds them; typographic quotes made ASCII.
BASE = "<Processors>1</Processors><Memory>64</Memory>"


@pytest.mark.parametrize("body, check", [
    pytest.param('<Extension type="Chemistry" name="Software">NWChem</Extension>'
                 f"<Configured>{BASE}</Configured>",
                 lambda s: s.details[0]["extensions"] == [{"name": "Software", "type": "Chemistry", "value": "NWChem"}],
                 id="4.1-extension"),
    pytest.param('<Configured><Processors>16</Processors><Memory units="MB">512</Memory></Configured>',
                 lambda s: s.nodes[0] == {"CPU": 1600, "Memory": 512}, id="4.2-configured"),
    pytest.param(f'<Configured>{BASE}</Configured><Available><Processors>7</Processors>'
                 '<Memory units="MB">256</Memory></Available>',
                 lambda s: s.details[0]["available"] == {"CPU": 700, "Memory": 256}, id="4.2-available"),
    pytest.param(f'<Configured>{BASE}</Configured><Utilized><Processors>8</Processors>'
                 '<Memory metric="Average">207</Memory></Utilized>',
                 lambda s: s.nodes[0] == {"CPU": 100, "Memory": 64}, id="4.2-utilized"),
    pytest.param('<Configured><Processors wallDuration="1234" consumptionRate="0.63">4</Processors>'
                 '<Memory metric="Max" units="GB">483</Memory></Configured>',
                 lambda s: s.nodes[0] == {"CPU": 400, "Memory": 483 * 1024}, id="4.3-consumables"),
    pytest.param(f'<Configured>{BASE}<Resource name="License" type="MATLAB">1</Resource>'
                 '<Resource name="Telescope" type="Zoom2000" wallDuration="750" metric="KX">10</Resource>'
                 '</Configured>',
                 lambda s: (s.nodes[0]["License/MATLAB"], s.nodes[0]["Telescope/Zoom2000"]) == (1, 10),
                 id="4.3-resource"),
])
def test_spec_fragments(body, check):
    assert check(parse_sss(node(body)))


@pytest.mark.parametrize("text, names", [
    pytest.param("node[1-5]", ["node1", "node2", "node3", "node4", "node5"], id="4.4-range"),
    pytest.param("node[5-6,77]", ["node5", "node6", "node77"], id="range-list"),
    pytest.param("cn[08-10].local", ["cn08", "cn09", "cn10"], id="zero-padded"),
])
def test_spec_node_ranges(text, names):
    site = parse_sss(f"<Node><Id>{text}</Id><Configured>{BASE}</Configured></Node>".encode())
    expected = [n + ".local" if text.endswith(".local") else n for n in names]
    assert [d["name"] for d in site.details] == expected
    assert len(site.nodes) == len(names)


def test_lists_counts_states_and_units():
    doc = (f'<Data><Node count="2"><Id>a</Id><Name aggregation="List" delimiter=";">x;y</Name>'
           f'<Configured><Processors>2</Processors><Memory units="GB">1.5</Memory><Disk units="kB">2047</Disk>'
           f'</Configured></Node>'
           f'<Node><Id>b</Id><State>Offline</State><Configured>{BASE}</Configured></Node>'
           f'<Node><Id>c</Id><Online>false</Online><Configured>{BASE}</Configured></Node>'
           f'<Node><Id>d</Id><State>Busy</State><Configured>{BASE}</Configured></Node></Data>').encode()
    site = parse_sss(doc)
    assert [d["name"] for d in site.details] == ["x-1", "x-2", "y-1", "y-2", "d"]
    # 1.5 GB is 1536 MB; 2047 kB is not a whole MB and rounds down: a node never offers more than it has
    assert site.nodes[0] == {"CPU": 200, "Memory": 1536, "Disk": 1}
    assert site.resource_types == ("CPU", "Memory", "Disk")


# -- broken documents ----------------------------------------------------------------------------------------------

BROKEN = {
    "unknown-units": "<Memory>: unknown units 'furlongs'",
    "negative-amount": "<Memory>: negative amount -512",
    "conflicting-duplicate": "<Memory>: Memory given twice with different amounts",
    "duplicate-node": "node 'n1' is described twice",
    "no-id": "<Node>: has 0 <Id> elements",
    "no-configured": "has 0 <Configured> elements",
    "no-memory": "<Configured>: has no Processors or no Memory",
    "fractional-processors": "1.5 processors is not a whole number",
    "not-a-number": "amount 'two' is not a number",
    "unknown-element": "<Cheese>: is not a consumable resource",
    "resource-without-name": "<Resource>: has no name= attribute",
    "bad-range": "range part '5-2' is empty",
    "bad-count": "count='-3' is not a whole number",
    "unknown-state": "unknown state 'sleepy'",
    "all-offline": "no node is online",
    "node-reference": "is a reference to a node",
    "no-node": "<Data>: holds no <Node> element",
    "malformed": "malformed XML",
    "smart-quotes": "malformed XML",
    "too-big": "more than 2147483647 site units",
    "entity": "without DTDs or entities",
    "unicode-count": "count='²' is not a whole number",
    "huge-exponent": "amount 1e400 is too large",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_documents_give_one_line_with_the_place(name):
    path = DATA / "broken" / f"{name}.xml"
    with pytest.raises(InputError) as info:
        load_sss(path)
    text = str(info.value)
    assert "\n" not in text and BROKEN[name] in text
    assert re.match(rf"{re.escape(str(path))}:\d+: ", text), text


def test_every_broken_document_is_in_the_table():
    assert {p.stem for p in (DATA / "broken").glob("*.xml")} == set(BROKEN)


def test_a_count_times_a_range_is_bounded():
    doc = node(f"<Configured>{BASE}</Configured>", ' count="100000"').replace(b"<Id>n</Id>", b"<Id>n[1-100000]</Id>")
    with pytest.raises(InputError, match="count=100000 times 100000 names is more than 100000 nodes"):
        parse_sss(doc)


def test_an_oversized_document_is_refused_before_parsing():
    with pytest.raises(InputError, match="more than optlease reads"):
        parse_sss(b" " * (16 * 2**20 + 1))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_site_or_an_input_error(data):
    try:
        site = parse_sss(data)
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert site.nodes


# -- round trips ---------------------------------------------------------------------------------------------------

def configured(doc: str) -> list[tuple[str, dict[str, int]]]:
    site = parse_sss(doc.encode())
    return [(d["name"], n) for d, n in zip(site.details, site.nodes)]


def test_sss_written_back_has_the_same_configured_resources():
    site = load_sss(GRID / "cluster.sss.xml")
    hosts = [HostState(d["name"], dict(n), {t: 0 for t in n}, details=d) for d, n in zip(site.details, site.nodes)]
    again = parse_sss(write_sss(hosts).encode())
    assert again.nodes == site.nodes and again.resource_types == site.resource_types
    assert [d["name"] for d in again.details] == [d["name"] for d in site.details]
    assert again.details[2]["extensions"] == site.details[2]["extensions"]
    assert again.details[0]["features"] == ["fast-disk"]


def test_the_written_document_follows_the_spec():
    hosts = [HostState("h1", {"CPU": 200, "Memory": 1024, "License/MATLAB": 1}, {"CPU": 100, "Memory": 512}),
             HostState("h2", {"CPU": 100, "Memory": 512}, {}, online=False)]
    root = etree.fromstring(write_sss(hosts).encode())
    assert root.tag == "Data"
    for elem in root:
        assert elem.tag == "Node" and elem.findtext("Id") and elem.findtext("State") in ("Idle", "Busy", "Offline")
        assert [c.tag for c in elem if c.tag in ("Configured", "Available", "Utilized")] == [
            "Configured", "Available", "Utilized"]
    h1 = root[0]
    assert h1.findtext("State") == "Busy"
    assert h1.findtext("Available/Processors") == "1" and h1.findtext("Utilized/Memory") == "512"
    assert h1.find("Configured/Resource").attrib == {"name": "License", "type": "MATLAB"}
    assert root[1].findtext("State") == "Offline" and root[1].findtext("Available/Processors") == "0"


def schedule(cfg, tracefile=None):
    res = simulate(cfg, tracefile)
    return json.dumps(schedule_document(res.site, res.leases, cfg.get("simulation", "starttime")), sort_keys=True)


def test_a_site_from_sss_schedules_as_the_same_site_written_as_lwf(tmp_path):
    conf = GRID / "quickstart-sss.conf"
    from_sss = schedule(load_config(conf))
    trace = load_lwf(INSTANCES / "quickstart" / "quickstart.lwf")
    lwf = tmp_path / "with-site.lwf"
    lwf.write_bytes(dump_lwf(Workload(trace.name, trace.requests, site=load_sss(GRID / "cluster.sss.xml"))))
    cfg = load_config(conf, {"simulation": {"resources": "in-tracefile"}, "tracefile": {"tracefile": str(lwf)}})
    assert from_sss == schedule(cfg)
    # three nodes are online (node4 is Offline): the schedule maps onto exactly those
    assert len(json.loads(from_sss)["site"]["nodes"]) == 3


def test_a_missing_sss_file_names_it(cli, tmp_path):
    conf = tmp_path / "c.conf"
    text = (GRID / "quickstart-sss.conf").read_text().replace("sss:cluster.sss.xml", "sss:nowhere.xml")
    conf.write_text(text.replace("../quickstart/quickstart.lwf", str(INSTANCES / "quickstart" / "quickstart.lwf")))
    proc = cli("simulate", "-c", conf)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "nowhere.xml" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# -- the daemon's hosts --------------------------------------------------------------------------------------------

def test_daemon_publishes_its_hosts_as_sss(tmp_path):
    from test_api import BEST_EFFORT, Daemon
    d = Daemon(tmp_path, resources="2 CPU:100 Memory:1024").serve()
    try:
        proxy = d.proxy()
        assert proxy.create_lease(BEST_EFFORT) == 1
        d.manager.step(d.manager.now())   # at the request's arrival (the real clock may have passed 0)
        doc = proxy.get_hosts_sss()
        listed = run_cli("list-hosts", "-s", d.url, "--format", "sss", timeout=30)
        bad = run_cli("list-hosts", "-s", d.url, "--format", "yaml", timeout=30)
    finally:
        d.close()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == doc
    assert bad.returncode != 0 and "--format 'yaml'" in bad.stderr and "Traceback" not in bad.stderr
    nodes = etree.fromstring(doc.encode())
    used = [(n.findtext("State"), n.findtext("Utilized/Processors"), n.findtext("Available/Memory"))
            for n in nodes]
    # the best-effort lease (100 CPU, 512 MB) runs on one of the two nodes now
    assert sorted(used) == [("Busy", "1", "512"), ("Idle", "0", "1024")]
    assert parse_sss(doc.encode()).nodes == ({"CPU": 100, "Memory": 1024},) * 2


def test_a_daemon_on_an_sss_site_publishes_its_names_and_features(tmp_path):
    from test_api import Daemon
    d = Daemon(tmp_path, resources=f"sss:{GRID / 'cluster.sss.xml'}").serve()
    try:
        proxy = d.proxy()
        doc = proxy.get_hosts_sss()
        bad = None
        try:
            proxy.get_glue("json")
        except Exception as exc:     # an XML-RPC Fault: one line, in the user's terms
            bad = str(exc)
    finally:
        d.close()
    root = etree.fromstring(doc.encode())
    assert [n.findtext("Name") for n in root] == ["node1", "node2", "node3"]
    assert [f.text for f in root[0].iter("Feature")] == ["fast-disk"] and root[0].findtext("Opsys") == "Linux"
    assert root[2].find("Extension").attrib == {"type": "Chemistry", "name": "Software"}
    assert parse_sss(doc.encode()).nodes == load_sss(GRID / "cluster.sss.xml").nodes
    assert bad is not None and "get_glue: format 'json' is not ldif or xml" in bad and "\n" not in bad


TYPES = st.sampled_from(["Disk", "Swap", "Network", "License/MATLAB", "Telescope"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**7),
                          st.dictionaries(TYPES, st.integers(0, 10**6), max_size=3)), min_size=1, max_size=6))
def test_any_hosts_written_as_sss_read_back_with_the_same_configured_resources(nodes):
    """Safety: publishing never changes a capacity, whatever the amounts (fractions of a core included)."""
    hosts = [HostState(f"h{i}", {"CPU": cpu, "Memory": mem, **extra}, {"CPU": cpu // 2})
             for i, (cpu, mem, extra) in enumerate(nodes)]
    site = parse_sss(write_sss(hosts).encode())
    assert list(site.nodes) == [h.configured for h in hosts]
    assert [d["available"]["CPU"] for d in site.details] == [h.configured["CPU"] - h.configured["CPU"] // 2
                                                              for h in hosts]


@settings(max_examples=150, deadline=None)
@given(st.from_regex(r"-?[0-9]{0,3}(\.[0-9]{0,3})?([eE]-?[0-9]{1,3})?", fullmatch=True) | st.text(max_size=8),
       st.sampled_from(["", "B", "kB", "GB", "Doggabyte", "Mb/s", "cores", "%"]),
       st.sampled_from(["Processors", "Memory", "Disk", "Network", 'Resource name="x"']),
       st.from_regex(r"[a-z]{0,2}(\[[0-9,\-]{0,6}\])?", fullmatch=True), st.sampled_from(["", "1", "3", "0"]))
def test_any_amount_units_and_name_give_a_site_or_one_line(amount, units, tag, name, count):
    """Safety: no amount, unit, name pattern or count makes the reader fail with anything but one line."""
    close = tag.split()[0]
    attrs = f' units="{units}"' if units else ""
    amount = amount.replace("<", "").replace("&", "")
    doc = (f'<Node{f" count={chr(34)}{count}{chr(34)}" if count else ""}><Id>{name or "n"}</Id><Configured>'
           f'{BASE if close != "Processors" and close != "Memory" else ""}'
           f'<{tag}{attrs}>{amount}</{close}>'
           f'{"<Memory>1</Memory>" if close == "Processors" else "<Processors>1</Processors>" if close == "Memory" else ""}'
           f'</Configured></Node>')
    try:
        site = parse_sss(doc.encode())
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(0 <= v <= 2**31 - 1 for n in site.nodes for v in n.values())
