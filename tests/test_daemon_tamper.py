"""A journal edited behind the daemon's back: a forged or altered `defer` event (catch-up's) stops `serve` with one
line naming the entry, never a traceback, and the file keeps every row (removing the forged entry restores it)."""
from __future__ import annotations

import sqlite3

import pytest

from conftest import daemon_config, run_cli
from optlease.engine.api import parse_lease_xml
from optlease.engine.daemon import Manager
from optlease.formats.config import parse_config

BE = ('<lease preemptible="true"><nodes><node-set numnodes="{n}"><res type="CPU" amount="100"/>'
      '<res type="Memory" amount="512"/></node-set></nodes><start/><duration time="{d}"/></lease>')
AR = ('<lease preemptible="false"><nodes><node-set numnodes="1"><res type="CPU" amount="100"/>'
      '<res type="Memory" amount="512"/></node-set></nodes><start><exact time="+00:10:00"/></start>'
      '<duration time="00:10:00"/></lease>')


def build(tmp_path):
    """A daemon's file: lease 1 best-effort and active since 0, lease 2 an AR scheduled, lease 3 done; last step
    at 2. The configuration `serve` reads it with."""
    conf = tmp_path / "d.conf"
    conf.write_text(daemon_config(1))      # never listens: the start stops before
    cfg = parse_config(conf.read_text(), str(conf), tmp_path)
    m = Manager(cfg)
    m.clock.now = lambda: 0
    for xml in (BE.format(n=2, d="00:30:00"), AR, BE.format(n=1, d="00:00:01")):
        m.submit(lambda i, t, xml=xml: parse_lease_xml(xml, i, t, m.origin, m.site), xml)
    for t in (0, 1, 2):
        m.step(t)
    assert [m.all[i].state.value for i in (1, 2, 3)] == ["active", "scheduled", "done"]
    m.stop()
    return conf, tmp_path / "state.db"


def rows(db) -> list[str]:
    with sqlite3.connect(db) as con:
        return list(con.iterdump())


@pytest.mark.parametrize("t, lease_id, why", [
    (2, 999, "there is no lease 999"),
    (2, None, "it names no lease"),
    (2, 2, "not best-effort"),                 # would have put an AR in the best-effort queue
    (2, 3, "nothing of it was begun"),         # a finished lease back in the system
    (2, 1, "was not begun at 2"),              # active since 0: a step at 2 began nothing of it
    (10**15, 1, "not at 1000000000000000"),
    (-5, 1, "not at -5"),
])
def test_a_forged_defer_event_stops_serve_in_one_line_and_loses_nothing(tmp_path, t, lease_id, why):
    conf, db = build(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO events (t, kind, lease_id) VALUES (?, 'defer', ?)", (t, lease_id))
    before = rows(db)
    run = run_cli("serve", "-c", conf, "--fg", timeout=60)
    assert run.returncode == 2        # a file optlease cannot use: an input error
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "(defer at" in run.stderr and why in run.stderr and "was not written by optlease" in run.stderr
    assert rows(db) == before                   # nothing written, nothing lost
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM events WHERE kind='defer'")
    m = Manager(parse_config(conf.read_text(), str(conf), tmp_path))
    try:
        assert [m.all[i].state.value for i in (1, 2, 3)] == ["active", "scheduled", "done"]
        assert not [n for n in m.notes if "recorded as" in n]
    finally:
        m.stop()
