"""The daemon's durable state: SQLite in WAL mode at `[general] persistence-file` (`none`: in memory).

Seven tables. `requests` holds every accepted request (its JSON, and the XML it came as); `events` is the ordered
journal of what changed the scheduler (a request arriving, a cancellation, a scheduling step at an instant,
enactment failing or requeueing a lease, and a node going `down` when its host went silent or coming back `up`;
the leases a node took down with it are journaled first, as their own `fail` and `requeue` events);
`decisions` holds what a step's round model decided (`mapper: cpsat`), in the order the step asked, so that a
replay takes the same decisions instead of solving again; `leases` and `reservations` hold every lease's state,
progress and planned reservations as of the last step; `checkpoints` holds at most one checkpoint of the live
state (engine.checkpoint), written in the transaction that drops the journal entries it covers, and
`checkpoint_parts` its bytes, written ahead of it in parts when a forked child wrote it (engine.checkpoint_fork).
Each write is one transaction, committed before the daemon acknowledges anything that depends on it.

On restart the daemon replays the journal into a fresh LeaseScheduler (the scheduler is deterministic given the
journaled decisions: the same inputs at the same instants give the same state), then checks the result against
the `leases` rows. A file that is not an optlease persistence file, or that cannot be opened or written, is a
one-line `StoreError` naming the file.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest
from optlease.errors import InputError
from optlease.scheduling.records import Lease

# 2: enactment's `fail` and `requeue` events; 3: a node going `down` and coming `up`; 4: the rounds' decisions;
# 5: checkpoints; 6: catch-up's `defer` events; 7: checkpoints written in parts
SCHEMA_VERSION = "7"
TABLES = {"meta", "requests", "events", "leases", "reservations", "decisions", "checkpoints", "checkpoint_parts"}
PART = 1 << 20      # bytes of a checkpoint written in one transaction (other writers go between two)
DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, arrival INTEGER NOT NULL, body TEXT NOT NULL,
                                     xml TEXT);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL,
                                   kind TEXT NOT NULL CHECK (kind IN ('request', 'cancel', 'step', 'fail',
                                                                  'requeue', 'defer', 'down', 'up')),
                                   lease_id INTEGER, node INTEGER);
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL,
                                   accumulated INTEGER NOT NULL, first_start INTEGER, end_time INTEGER,
                                   reason TEXT);
CREATE TABLE IF NOT EXISTS reservations (lease_id INTEGER NOT NULL, n INTEGER NOT NULL, kind TEXT NOT NULL,
                                         start INTEGER NOT NULL, end_time INTEGER NOT NULL, state TEXT NOT NULL,
                                         mapping TEXT NOT NULL, PRIMARY KEY (lease_id, n));
CREATE TABLE IF NOT EXISTS decisions (seq INTEGER NOT NULL, n INTEGER NOT NULL, body TEXT NOT NULL,
                                      PRIMARY KEY (seq, n));
CREATE TABLE IF NOT EXISTS checkpoints (seq INTEGER PRIMARY KEY, last_id INTEGER NOT NULL, build TEXT NOT NULL,
                                        body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoint_parts (seq INTEGER NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL,
                                             PRIMARY KEY (seq, n));
"""


class StoreError(InputError):
    """The persistence file cannot be used (unreadable, read-only, full, corrupt, another program's): one line."""


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


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
    decisions: dict[int, list] = field(default_factory=dict)   # step seq -> its round decisions (JSON), in order
    seqs: list[int] = field(default_factory=list)  # each event's seq, in the order of `events`
    checkpoint: "Checkpoint | None" = None         # the live state the events come after


@dataclass
class Checkpoint:
    seq: int          # the last journal entry it covers (the entries up to it are gone)
    last_id: int      # the last request it covers
    build: str        # the build that wrote it (engine.checkpoint.fingerprint)
    body: bytes
    sealed: bool = False      # the pickle is followed by its size and digest (engine.checkpoint_fork.unseal)


class Store:
    def __init__(self, path: str | None) -> None:
        self.path = None if path in (None, "", "none") else path
        self._seen: dict[int, tuple] = {}
        self.entries = 0      # journal entries since the last checkpoint
        self.lock = threading.Lock()   # one transaction at a time on the connection (requests and steps)
        if self.path:
            folder = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(folder):
                raise StoreError("its folder does not exist", self.path)
            if not os.access(folder, os.W_OK) or (os.path.exists(self.path) and not os.access(self.path, os.W_OK)):
                # SQLite would open it and fail at the first write, or say only "unable to open database file"
                raise StoreError("it is read-only (or its folder is): the daemon writes every change to it",
                                 self.path)
        try:
            self.db = sqlite3.connect(self.path or ":memory:", check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open it: {_why(exc)}", self.path) from None
        try:
            self._open()
        except sqlite3.Error as exc:
            self.db.close()
            raise StoreError(f"cannot use it as a persistence file: {_why(exc)}", self.path) from None
        except StoreError:
            self.db.close()
            raise

    def _open(self) -> None:
        db = self.db
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        tables.discard("sqlite_sequence")
        if tables and "meta" not in tables or tables - TABLES:
            # never write into another program's database
            raise StoreError(f"not an optlease persistence file (it has tables {' '.join(sorted(tables))})",
                             self.path)
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() if tables else None
        if tables and row is None:
            raise StoreError("not an optlease persistence file (no schema version)", self.path)
        if row is not None and row[0] not in ("2", "3", "4", "5", "6", SCHEMA_VERSION):
            raise StoreError(f"persistence file has schema {row[0]}, this optlease writes {SCHEMA_VERSION}",
                             self.path)
        if self.path:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
        db.executescript(DDL)
        if row is None:
            db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif row[0] != SCHEMA_VERSION:
            # 4 -> 5 -> 6 -> 7: the decisions, checkpoints and checkpoint_parts tables (created above) and the
            # `defer` kind; 2 -> 3: the `down` and `up` kinds and the node column
            self._upgrade_events("seq, t, kind, lease_id" + (", node" if row[0] != "2" else ""))

    def _upgrade_events(self, columns: str) -> None:
        """The events table rebuilt with the kinds this schema allows (SQLite cannot change a CHECK in place): the
        same rows."""
        with self._tx():
            self.db.execute("ALTER TABLE events RENAME TO events_old")
            self.db.execute(DDL[DDL.index("CREATE TABLE IF NOT EXISTS events"):].split(";")[0])
            self.db.execute(f"INSERT INTO events ({columns}) SELECT {columns} FROM events_old")
            self.db.execute("DROP TABLE events_old")
            self.db.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION,))

    # -- reading ----------------------------------------------------------------------------------------------
    def load(self) -> Journal:
        """The whole journal; StoreError (one line) when the file cannot be read or a row is not what optlease
        writes."""
        db = self.db
        try:
            epoch = db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
            requests = {}
            for i, body in db.execute("SELECT id, body FROM requests"):
                try:
                    requests[i] = request_from_json(body)
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    raise StoreError(f"request {i} is not one optlease wrote ({_why(exc)})", self.path) from None
            rows = db.execute("SELECT seq, t, kind, lease_id, node FROM events ORDER BY seq").fetchall()
            self.entries = len(rows)
            events = [(t, kind, lid if node is None else node) for _, t, kind, lid, node in rows]
            cp = db.execute("SELECT seq, last_id, build, body FROM checkpoints ORDER BY seq DESC LIMIT 1").fetchone()
            checkpoint = None if cp is None else Checkpoint(cp[0], cp[1], cp[2], bytes(cp[3]))
            if checkpoint is not None and not checkpoint.body:
                # written in parts (sealed: its size and digest follow the pickle)
                checkpoint.body = b"".join(bytes(part) for (part,) in db.execute(
                    "SELECT body FROM checkpoint_parts WHERE seq=? ORDER BY n", (checkpoint.seq,)))
                checkpoint.sealed = True
            states = dict(db.execute("SELECT id, state FROM leases"))
            reasons = dict(db.execute("SELECT id, reason FROM leases"))
            decisions: dict[int, list] = {}
            for seq, body in db.execute("SELECT seq, body FROM decisions ORDER BY seq, n"):
                decisions.setdefault(seq, []).append(body)
            return Journal(None if epoch is None else int(epoch[0]), requests, events, states, reasons, decisions,
                           [row[0] for row in rows], checkpoint)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read it: {_why(exc)}", self.path) from None

    def lease_rows(self) -> tuple[dict[int, tuple], dict[int, list[tuple]]]:
        """Every lease row (id -> kind, state, accumulated, first_start, end_time, reason) and its reservation rows
        (id -> [(n, kind, start, end_time, state, mapping)], in order): what a checkpoint's finished leases are
        rebuilt from."""
        try:
            rows = {r[0]: r[1:] for r in self.db.execute("SELECT id, kind, state, accumulated, first_start, end_time, "
                                                         "reason FROM leases")}
            rrs: dict[int, list[tuple]] = {}
            for r in self.db.execute("SELECT lease_id, n, kind, start, end_time, state, mapping FROM reservations "
                                     "ORDER BY lease_id, n"):
                rrs.setdefault(r[0], []).append(r[1:])
            return rows, rrs
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read it: {_why(exc)}", self.path) from None

    def next_id(self) -> int:
        return (self.db.execute("SELECT MAX(id) FROM requests").fetchone()[0] or 0) + 1

    # -- writing (each method is one committed transaction) ---------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('epoch', ?)", (str(epoch),))

    def add_request(self, req: LeaseRequest, xml: str | None) -> None:
        self.add_requests([(req, xml)])

    def add_requests(self, batch: list[tuple[LeaseRequest, str | None]]) -> None:
        """Requests (with the XML each came as), in one transaction, journaled in this order."""
        with self._tx():
            self._write_requests(batch)

    def _write_requests(self, batch: list[tuple[LeaseRequest, str | None]]) -> None:
        self.db.executemany("INSERT INTO requests VALUES (?, ?, ?, ?)",
                            [(req.id, req.arrival, request_to_json(req), xml) for req, xml in batch])
        self.db.executemany("INSERT INTO events (t, kind, lease_id) VALUES (?, 'request', ?)",
                            [(req.arrival, req.id) for req, _ in batch])
        self.entries += len(batch)

    def add_cancel(self, t: int, lease: Lease) -> None:
        self.add_event(t, "cancel", lease)

    def add_event(self, t: int, kind: str, lease: Lease) -> None:
        """A change to one lease between steps: cancel (by its user), fail or requeue (by enactment)."""
        with self._tx():
            self.db.execute("INSERT INTO events (t, kind, lease_id) VALUES (?, ?, ?)", (t, kind, lease.id))
            self.entries += 1
            self._write_leases([lease])

    def add_node_event(self, t: int, kind: str, node: int) -> None:
        """A node taken out of planning (`down`) or given back (`up`)."""
        with self._tx():
            self.db.execute("INSERT INTO events (t, kind, node) VALUES (?, ?, ?)", (t, kind, node))
            self.entries += 1

    def add_step(self, t: int, leases: list[Lease], decisions: list[str] = (), took: int | None = None,
                 requests: list[tuple[LeaseRequest, str | None]] = ()) -> None:
        """A step at t, the leases it changed, what its round model decided (JSON texts, in order) and the last
        request it could take (in `lease_id`: requests committed while it ran may be journaled before it).
        `requests`: a batch of new requests the step took, journaled just before it in the same transaction (one
        fsync for both: a request and the step that answers it are on disk together, or neither is)."""
        with self._tx():
            if requests:
                self._write_requests(requests)
            seq = self.db.execute("INSERT INTO events (t, kind, lease_id) VALUES (?, 'step', ?)", (t, took)).lastrowid
            self.entries += 1
            self.db.executemany("INSERT INTO decisions VALUES (?, ?, ?)",
                                [(seq, n, body) for n, body in enumerate(decisions)])
            self._write_leases(leases)

    def last_seq(self) -> int | None:
        """The last journal entry (None: the journal is empty)."""
        with self.lock:
            return self.db.execute("SELECT MAX(seq) FROM events").fetchone()[0]

    def stage_checkpoint(self, seq: int, parts) -> float:
        """A checkpoint's bytes (sealed), given in parts of at most PART bytes, written ahead of `add_checkpoint`,
        each part its own transaction, so that no request waits for all of them. Parts that no checkpoint row names
        are ignored by a restart (`drop_stale_parts` removes them). The longest transaction, in seconds."""
        longest = self.drop_stale_parts()     # (an earlier try's parts too)
        for n, part in enumerate(parts):
            began = time.perf_counter()
            with self._tx():
                self.db.execute("INSERT INTO checkpoint_parts VALUES (?, ?, ?)", (seq, n, part))
            longest = max(longest, time.perf_counter() - began)
        return longest

    def drop_stale_parts(self) -> float:
        """Remove the parts of checkpoints other than the one in `checkpoints`, one part a transaction (freeing a part's pages reads them: all at once, a request would wait for all). The longest
        transaction, in seconds."""
        with self.lock:
            current = self.db.execute("SELECT seq FROM checkpoints").fetchone()
            stale = self.db.execute("SELECT seq, n FROM checkpoint_parts WHERE seq != ?",
                                    (-1 if current is None else current[0],)).fetchall()
        longest = 0.0
        for seq, n in stale:
            began = time.perf_counter()
            with self._tx():
                self.db.execute("DELETE FROM checkpoint_parts WHERE seq = ? AND n = ?", (seq, n))
            longest = max(longest, time.perf_counter() - began)
        return longest

    def add_checkpoint(self, seq: int, last_id: int, build: str, body: bytes = b"") -> int:
        """A checkpoint of the state after journal entry `seq` (and request `last_id`), and the entries up to it
        dropped, in one transaction: a restart finds the old entries or the checkpoint that replaces them, never
        neither. `body`: the pickle, or empty when it was staged in parts (`stage_checkpoint`). How many entries
        it dropped."""
        with self._tx():
            self.db.execute("DELETE FROM checkpoints")
            self.db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)", (seq, last_id, build, body))
            dropped = self.db.execute("DELETE FROM events WHERE seq <= ?", (seq,)).rowcount
            self.db.execute("DELETE FROM decisions WHERE seq <= ?", (seq,))
            self.entries -= dropped
        return dropped

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
                           [(lease.id, n, rr.kind, rr.start, rr.end, rr.state, json.dumps(dict(rr.mapping.items())))
                            for n, rr in enumerate(reservations_of(lease))])

    def _tx(self):
        return _Transaction(self.db, self.path, self.lock)

    def close(self) -> None:
        self.db.close()


class _Transaction:
    """One write, all or nothing; a write SQLite refuses (a full disk, a read-only file) is a StoreError."""

    def __init__(self, db: sqlite3.Connection, path: str | None, lock: threading.Lock) -> None:
        self.db = db
        self.path = path
        self.lock = lock

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self.lock.release()
            raise StoreError(f"cannot write it: {_why(exc)}", self.path) from None

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._end(exc_type, exc)
        finally:
            self.lock.release()

    def _end(self, exc_type, exc) -> None:
        try:
            if exc_type is None:
                self.db.execute("COMMIT")
                return
            if self.db.in_transaction:   # SQLite may have rolled back already (a full disk, an I/O error)
                self.db.execute("ROLLBACK")
        except sqlite3.Error as failed:
            if self.db.in_transaction:
                try:
                    self.db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass   # the connection is unusable: the daemon stops, and the file keeps its last commit
            raise StoreError(f"cannot write it: {_why(failed)}", self.path) from None
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot write it: {_why(exc)}", self.path) from None
