"""How long a daemon restart takes: a persistence file is filled with best-effort requests and the steps that ran
them (in process, simulated hosts, the journal the daemon itself writes, with its checkpoints every
CHECKPOINT_EVERY entries), then a fresh Manager opens it. Prints JSON: journal entries written, the entries left
after the last checkpoint (what the restart replays), leases, seconds to restart, and whether every lease came
back in the state recorded for it. `--without-checkpoints`: the whole journal is replayed (as before checkpoints).

    python scripts/bench_restart.py --entries 100000
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from optlease.engine import checkpoint
from optlease.engine.daemon import Manager
from optlease.formats.config import parse_config

CONF = """[general]
mode: simulated
persistence-file: state.db
[scheduling]
backfilling: aggressive
suspension: none
suspend-rate: 32
resume-rate: 32
[simulation]
clock: real
resources: {nodes} CPU:100 Memory:1024
imagetransfer-bandwidth: 100
[accounting]
"""
LEASE = ('<lease><nodes><node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="512"/>'
         '</node-set></nodes><start/><duration time="00:{m:02d}:00"/></lease>')


def fill(m: Manager, entries: int) -> int:
    """Requests of 1 to 30 minutes, one a minute, each step at the next minute: two journal entries per lease."""
    from optlease.engine.api import parse_lease_xml

    t, n = m.now(), 0
    while 2 * n < entries:
        xml = LEASE.format(m=1 + n % 30)
        m.submit(lambda i, arrival: parse_lease_xml(xml, i, arrival, m.origin, m.site), xml)
        m.step(t)
        t += 60
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000, help="journal entries to replay (default 100,000)")
    parser.add_argument("--nodes", type=int, default=16, help="nodes in the site (default 16)")
    parser.add_argument("--without-checkpoints", action="store_true", help="write no checkpoint: replay everything")
    args = parser.parse_args(argv)
    if args.without_checkpoints:
        checkpoint.CHECKPOINT_EVERY = 10 ** 12
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(CONF.format(nodes=args.nodes), str(Path(tmp) / "bench.conf"), Path(tmp))
        m = Manager(cfg)
        m.store.db.execute("PRAGMA synchronous=OFF")   # filling is the setup, not the measure: no fsync per step
        began = time.perf_counter()
        leases = fill(m, args.entries)
        filled = time.perf_counter() - began
        m.stop()
        began = time.perf_counter()
        again = Manager(cfg)
        replay = time.perf_counter() - began
        replayed = len(again.store.load().events)
        consistent = not [note for note in again.notes if "recorded as" in note] and len(again.all) == leases
        again.stop()
    json.dump({"entries": 2 * leases, "replayed_entries": replayed, "checkpoints": not args.without_checkpoints,
               "leases": leases, "nodes": args.nodes, "fill_s": round(filled, 2), "restart_s": round(replay, 2),
               "consistent": consistent}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
