#!/usr/bin/env python3
"""Daemon throughput (JSON on stdout): N lease requests through the XML-RPC API against 100 simulated hosts.

Runs the lease manager in this process (simulated enactment, SQLite persistence in a temporary folder, the API on
a free loopback port) and submits best-effort leases from a client thread pool over HTTP. Reports requests/s
accepted and, per lease, the time from its request to its VMs' start task reaching enactment.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
import xmlrpc.client
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from optlease.engine.api import make_server
from optlease.engine.daemon import Manager
from optlease.formats.config import parse_config

CONF = """[general]
mode: simulated
persistence-file: {db}
[scheduling]
suspension: none
suspend-rate: 32
resume-rate: 32
backfilling: aggressive
wakeup-interval: 60
[simulation]
clock: real
resources: 100 CPU:100 Memory:1024
imagetransfer-bandwidth: 100
[accounting]
[daemon]
listen: 127.0.0.1:{port}
"""
LEASE = ('<lease preemptible="true"><nodes><node-set numnodes="1"><res type="CPU" amount="10"/>'
         '<res type="Memory" amount="64"/></node-set></nodes><start/><duration time="01:00:00"/></lease>')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8, help="concurrent client connections")
    parser.add_argument("--persistence", choices=("file", "none"), default="file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        db = str(Path(tmp) / "bench.db") if args.persistence == "file" else "none"
        cfg = parse_config(CONF.format(db=db, port=port), str(Path(tmp) / "bench.conf"), Path(tmp))
        manager = Manager(cfg)
        server = make_server(manager, cfg.get("daemon", "listen"), None)
        manager.start()
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        local = threading.local()

        def submit(_: int) -> int:
            if not hasattr(local, "proxy"):
                local.proxy = xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}")
            return local.proxy.create_lease(LEASE)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            ids = list(pool.map(submit, range(args.requests)))
        accepted_s = time.perf_counter() - t0
        enactor = manager.enactor
        deadline = time.monotonic() + 120
        while len(enactor.started_at) < args.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        all_started_s = time.perf_counter() - t0
        with manager.lock:
            latency = sorted(enactor.started_at[f"lease-{i}-vm-1"] - manager.submitted_at[i]
                             for i in ids if f"lease-{i}-vm-1" in enactor.started_at)
            rounds = manager.stepper.rounds
            tasks = enactor.submitted
        server.shutdown()
        server.server_close()
        manager.stop()

    def pct(p: float) -> float:
        return round(1000 * latency[min(len(latency) - 1, int(p * len(latency)))], 2) if latency else None

    print(json.dumps({
        "requests": args.requests, "hosts": 100, "clients": args.clients, "persistence": args.persistence,
        "accepted": len(set(ids)), "requests_per_s": round(args.requests / accepted_s, 1),
        "accept_wall_s": round(accepted_s, 3), "started": len(latency), "all_started_s": round(all_started_s, 3),
        "request_to_start_ms": {"p50": pct(0.5), "p95": pct(0.95), "max": pct(1.0),
                                "mean": round(1000 * statistics.fmean(latency), 2) if latency else None},
        "scheduling_rounds": rounds, "enactment_tasks": tasks,
    }, indent=1))


if __name__ == "__main__":
    main()
