"""The daemon's durable state: SQLite in WAL mode at `[general] persistence-file` (`none`: in memory).

Four tables. `requests` holds every accepted request (its JSON, and the XML it came as); `events` is the ordered
journal of what changed the scheduler (a request arriving, a cancellation, a scheduling step at an instant,
enactment failing or requeueing a lease, and a node going `down` when its host went silent or coming back `up`;
the leases a node took down with it are journaled first, as their own `fail` and `requeue` events);
`leases` and `reservations` hold every lease's state, progress and planned reservations as of the last step.
Each write is committed before the daemon acknowledges anything that depends on it.

On restart the daemon replays the journal into a fresh LeaseScheduler (the scheduler is deterministic: the same
inputs at the same instants give the same state), then checks the result against the `leases` rows.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest
from optlease.scheduling.records import Lease

SCHEMA_VERSION = "3"     # 2: enactment's `fail` and `requeue` events; 3: a node going `down` and coming `up`
DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, arrival INTEGER NOT NULL, body TEXT NOT NULL,
                                     xml TEXT);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL,
                                   kind TEXT NOT NULL CHECK (kind IN ('request', 'cancel', 'step', 'fail',
                                                                  'requeue', 'down', 'up')),
                                   lease_id INTEGER, node INTEGER);
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL,
                                   accumulated INTEGER NOT NULL, first_start INTEGER, end_time INTEGER,
                                   reason TEXT);
CREATE TABLE IF NOT EXISTS reservations (lease_id INTEGER NOT NULL, n INTEGER NOT NULL, kind TEXT NOT NULL,
                                         start INTEGER NOT NULL, end_time INTEGER NOT NULL, state TEXT NOT NULL,
                                         mapping TEXT NOT NULL, PRIMARY KEY (lease_id, n));
"""


def request_to_json(req: LeaseRequest) -> str:
    return json.dumps({"id": req.id, "kind": req.kind.value, "arrival": req.arrival, "duration": req.duration,
                       "vms": list(req.vms), "preemptible": req.preemptible, "start": req.start,
                       "software": None if req.software is None else [req.software.id, req.software.size],
                       "deadline": req.deadline, "extra": req.extra}, separators=(",", ":"))


def request_from_json(text: str) -> LeaseRequest:
    d = json.loads(text)
    sw = d.get("software")
    return LeaseRequest(id=d["id"], kind=LeaseKind(d["kind"]), arrival=d["arrival"], duration=d["duration"],
                        vms=tuple(d["vms"]), preemptible=d["preemptible"], start=d["start"],
                        software=None if sw is None else DiskImage(sw[0], sw[1]), deadline=d.get("deadline"),
                        extra=d.get("extra") or {})


def lease_fingerprint(lease: Lease) -> tuple:
    """What a lease row and its reservation rows record: unchanged fingerprint, nothing to write."""
    rrs = reservations_of(lease)
    return (lease.state, lease.accumulated, lease.end, len(rrs),
            tuple((rr.start, rr.end, rr.state) for rr in rrs[-4:]))


def reservations_of(lease: Lease) -> list:
    out = []
    for vmrr in lease.vmrrs:
        out.extend((*vmrr.pre, vmrr, *vmrr.post))
    return out


@dataclass
class Journal:
    """What a persistence file holds, in the order to replay it."""

    epoch: int | None
    requests: dict[int, LeaseRequest]
    events: list[tuple[int, str, int | None]]     # (t, kind, lease_id); for `down` and `up`: (t, kind, node)
    states: dict[int, str]                        # lease id -> state recorded at the last step
    reasons: dict[int, str | None] = None         # lease id -> its recorded reason (why it failed)


class Store:
    def __init__(self, path: str | None) -> None:
        self.path = None if path in (None, "", "none") else path
        self.db = sqlite3.connect(self.path or ":memory:", check_same_thread=False, isolation_level=None)
        if self.path:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(DDL)
        row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif row[0] == "2":
            self._upgrade_from_2()
        elif row[0] != SCHEMA_VERSION:
            raise ValueError(f"persistence file has schema {row[0]}, this optlease writes {SCHEMA_VERSION}")
        self._seen: dict[int, tuple] = {}

    def _upgrade_from_2(self) -> None:
        """Schema 2 -> 3: the events table learns the `down` and `up` kinds and a node column (same rows)."""
        with self._tx():
            self.db.execute("ALTER TABLE events RENAME TO events_v2")
            self.db.execute(DDL[DDL.index("CREATE TABLE IF NOT EXISTS events"):].split(";")[0])
            self.db.execute("INSERT INTO events (seq, t, kind, lease_id) SELECT seq, t, kind, lease_id FROM events_v2")
            self.db.execute("DROP TABLE events_v2")
            self.db.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION,))

    # -- reading ----------------------------------------------------------------------------------------------
    def load(self) -> Journal:
        db = self.db
        epoch = db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
        requests = {i: request_from_json(body) for i, body in db.execute("SELECT id, body FROM requests")}
        events = [(t, kind, lid if node is None else node)
                  for t, kind, lid, node in db.execute("SELECT t, kind, lease_id, node FROM events ORDER BY seq")]
        states = dict(db.execute("SELECT id, state FROM leases"))
        reasons = dict(db.execute("SELECT id, reason FROM leases"))
        return Journal(None if epoch is None else int(epoch[0]), requests, events, states, reasons)

    def next_id(self) -> int:
        return (self.db.execute("SELECT MAX(id) FROM requests").fetchone()[0] or 0) + 1

    # -- writing (each method is one committed transaction) ---------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('epoch', ?)", (str(epoch),))

    def add_request(self, req: LeaseRequest, xml: str | None) -> None:
        with self._tx():
            self.db.execute("INSERT INTO requests VALUES (?, ?, ?, ?)", (req.id, req.arrival, request_to_json(req),
                                                                         xml))
            self.db.execute("INSERT INTO events (t, kind, lease_id) VALUES (?, 'request', ?)", (req.arrival, req.id))

    def add_cancel(self, t: int, lease: Lease) -> None:
        self.add_event(t, "cancel", lease)

    def add_event(self, t: int, kind: str, lease: Lease) -> None:
        """A change to one lease between steps: cancel (by its user), fail or requeue (by enactment)."""
        with self._tx():
            self.db.execute("INSERT INTO events (t, kind, lease_id) VALUES (?, ?, ?)", (t, kind, lease.id))
            self._write_leases([lease])

    def add_node_event(self, t: int, kind: str, node: int) -> None:
        """A node taken out of planning (`down`) or given back (`up`)."""
        with self._tx():
            self.db.execute("INSERT INTO events (t, kind, node) VALUES (?, ?, ?)", (t, kind, node))

    def add_step(self, t: int, leases: list[Lease]) -> None:
        with self._tx():
            self.db.execute("INSERT INTO events (t, kind) VALUES (?, 'step')", (t,))
            self._write_leases(leases)

    def remember(self, leases: list[Lease]) -> None:
        """After a replay: the rows already on disk describe these leases."""
        for lease in leases:
            self._seen[lease.id] = lease_fingerprint(lease)

    def _write_leases(self, leases: list[Lease]) -> None:
        db = self.db
        for lease in leases:
            fp = lease_fingerprint(lease)
            if self._seen.get(lease.id) == fp:
                continue
            self._seen[lease.id] = fp
            db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (lease.id, lease.kind.value, lease.state.value, lease.accumulated, lease.first_start,
                        lease.end, lease.reason))
            db.execute("DELETE FROM reservations WHERE lease_id=?", (lease.id,))
            db.executemany("INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(lease.id, n, rr.kind, rr.start, rr.end, rr.state, json.dumps(rr.mapping))
                            for n, rr in enumerate(reservations_of(lease))])

    def _tx(self):
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
