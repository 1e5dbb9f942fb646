#!/usr/bin/env python3
"""Daemon throughput (JSON on stdout): N lease requests through the XML-RPC API against 100 simulated hosts
(`--mode scale`: against `--hosts` hosts with `--in-system` leases already running).

Runs the lease manager in this process (simulated enactment, SQLite persistence in a temporary folder, the API on
a free loopback port), first puts `--preload` leases through it (requested, run and done: the system's history),
then submits best-effort leases from `--clients` concurrent clients over HTTP, each on its own connections, in a
process of their own (as users' clients are: not competing with the daemon for its interpreter lock).
Reports requests/s accepted, the calls that failed (connection resets, timeouts: a client cannot tell whether its
lease was taken) and, per lease, the time from its request to its VMs' start task reaching enactment.

`--mode fast`: the same through real enactment: a mosquitto broker on a free loopback port, `--agents` agent
processes on libvirt's test:/// driver (each host 16 vCPUs and 3 GiB, so CPU:1600 Memory:3072 in Haizea's units:
every lease can start at once), time scaled 60 times so that each lease (2 simulated minutes) starts and stops;
requests come from `--clients` threads; a subscriber on `fast/#` counts every broker message (broker messages per lease) and notes when
each lease's `vm started` result is published (request -> start, the VM running on its host).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import subprocess
import sys
import statistics
import tempfile
import threading
import time
import xmlrpc.client
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from optlease.enact import fast
from optlease.engine.api import make_server, parse_lease_xml
from optlease.engine import checkpoint
from optlease.engine.daemon import Manager
from optlease.engine.daemon_site import SimulatedEnactor, site_from_config
from optlease.formats.config import parse_config
from optlease.formats.daemon_config import daemon_config, fast_daemon_config

SCHEDULING = {"suspension": "none", "backfilling": "aggressive", "wakeup-interval": 60}
SIMULATED_SITE = "100 CPU:100 Memory:1024"
FAST_TIME_SCALE = 60
LEASE = ('<lease preemptible="true"><nodes><node-set numnodes="1"><res type="CPU" amount="10"/>'
         '<res type="Memory" amount="64"/></node-set></nodes><start/><duration time="01:00:00"/></lease>')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAST_LEASE = LEASE.replace("01:00:00", "00:02:00")


def serve(manager: Manager, cfg):
    """Start the manager and its API server on a thread of its own; the server, for shutting down."""
    server = make_server(manager, cfg.get("daemon", "listen"), None)
    manager.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server


def _call_from(port: int, requests: int, clients: int, lease: str, out) -> None:
    """In the clients' process: `requests` create_lease calls from `clients` threads, each on its own connections;
    sends (lease ids, seconds each successful call took, names of the failures, seconds all the calls took)."""
    local = threading.local()
    failures: list[str] = []

    def submit(_: int) -> tuple[int, float, float] | None:
        local.proxy = getattr(local, "proxy", None) or xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}")
        began, at = time.perf_counter(), time.time()
        try:
            lease_id = local.proxy.create_lease(lease)
        except (OSError, xmlrpc.client.Error) as exc:
            failures.append(type(exc).__name__)
            local.__dict__.pop("proxy", None)
            return None
        return lease_id, time.perf_counter() - began, at

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = [r for r in pool.map(submit, range(requests)) if r is not None]
    out.send(([i for i, _, _ in done], [c for _, c, _ in done], failures, time.perf_counter() - t0,
              [a for _, _, a in done]))
    out.close()


def clients_process(port: int, requests: int, clients: int, lease: str) -> tuple:
    """The clients in a process of their own, as users' are: their XML-RPC work does not compete with the daemon
    for its interpreter lock (threads in the daemon's process would, and would be measured as the daemon's).
    (lease ids, seconds per call, failures, seconds all the calls took, from the clients' side, when each call
    began: time.time())."""
    ctx = multiprocessing.get_context("spawn")      # not fork: this process runs threads
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_call_from, args=(port, requests, clients, lease, theirs))
    proc.start()
    theirs.close()
    result = mine.recv()
    proc.join()
    return result


def bench_fast(args) -> dict:
    """Leases through the API, enacted on agent processes over a real broker; broker messages per lease."""
    import paho.mqtt.client as mqtt

    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with tempfile.TemporaryDirectory() as tmp:
        broker_port, port = free_port(), 0   # (the API server's port: the one it gets, read back)
        (Path(tmp) / "m.conf").write_text(f"listener {broker_port} 127.0.0.1\nallow_anonymous true\n")
        procs = [subprocess.Popen([mosquitto, "-c", str(Path(tmp) / "m.conf")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)]
        hosts = [f"bench{i}" for i in range(1, args.agents + 1)]
        messages: dict[str, int] = {}
        started: dict[str, float] = {}       # vm -> when its `vm started` success was published
        counter = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-counter")
        subscribed = threading.Event()
        counter.on_subscribe = lambda *_: subscribed.set()

        def count(_c, _u, msg) -> None:
            kind = msg.topic.rsplit("/", 1)[-1]
            messages[kind] = messages.get(kind, 0) + 1
            if kind == "result" and b"vm started" in msg.payload:
                try:
                    result = fast.parse_result(msg.payload)
                except fast.FastProtocolError:
                    return
                for vm in result.vms:
                    if vm.ok:
                        started.setdefault(vm.vm_name, time.time())
        counter.on_message = count
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    counter.connect("127.0.0.1", broker_port)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            counter.loop_start()
            counter.subscribe("fast/#", 2)
            subscribed.wait(5)
            for host in hosts:
                procs.append(subprocess.Popen([sys.executable, "-m", "optlease.cli.main", "agent", "--host", host,
                                               "--libvirt", "test:///default", "--broker", f"127.0.0.1:{broker_port}",
                                               "--insecure"],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.5)      # the agents announce themselves
            at_start = sum(messages.values())
            text = fast_daemon_config(port=port, broker_port=broker_port, hosts=hosts,
                                      persistence_file=str(Path(tmp) / "bench.db"),
                                      resources=f"{args.agents} CPU:1600 Memory:3072", time_scale=FAST_TIME_SCALE,
                                      scheduling=SCHEDULING, mqtt={"task-timeout": 10})
            cfg = parse_config(text, str(Path(tmp) / "bench.conf"), Path(tmp))
            manager = Manager(cfg)
            server = serve(manager, cfg)
            port = server.server_address[1]
            before = sum(messages.values())
            startup = before - at_start      # `list vms` to every host and its answers
            start_counts = dict(messages)
            local = threading.local()

            def submit(_: int) -> int:
                local.proxy = getattr(local, "proxy", None) or xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}")
                return local.proxy.create_lease(FAST_LEASE)

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                ids = list(pool.map(submit, range(args.requests)))
            accepted_s = time.perf_counter() - t0
            deadline = time.monotonic() + args.timeout
            done = lambda: all(manager.all[i].state.value in ("done", "failed", "cancelled") for i in ids)  # noqa
            while time.monotonic() < deadline:
                with manager.lock:
                    finished = done() and not manager.enactor.busy() and not any(
                        vm.startswith("lease-") for vm in manager.enactor.running())
                if finished:
                    break
                time.sleep(0.1)
            wall = time.perf_counter() - t0
            time.sleep(0.5)
            with manager.lock:
                states: dict[str, int] = {}
                for i in ids:
                    states[manager.all[i].state.value] = states.get(manager.all[i].state.value, 0) + 1
                latency = sorted(started[f"lease-{i}-vm-1"] - manager.submitted_at[i]
                                 for i in ids if f"lease-{i}-vm-1" in started and i in manager.submitted_at)
            server.shutdown()
            server.server_close()
            manager.stop()
            during = {k: v - start_counts.get(k, 0) for k, v in messages.items()}
            total = sum(messages.values()) - before
        finally:
            counter.disconnect()
            counter.loop_stop()
            for proc in procs[1:] + procs[:1]:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return {"mode": "fast", "requests": args.requests, "agents": args.agents, "clients": args.clients,
            "time_scale": FAST_TIME_SCALE, "lease": "1 VM, 10 CPU units (1 vCPU), 64 MB, 2 simulated minutes",
            "requests_per_s": round(args.requests / accepted_s, 1), "accept_wall_s": round(accepted_s, 3),
            "request_to_start_ms": _percentiles(latency),
            # a lease whose start was still waiting for enactment when its end came never ran on a host
            "leases_run_on_hosts": sum(f"lease-{i}-vm-1" in started for i in ids),
            "all_done_wall_s": round(wall, 2), "lease_states": states, "broker_messages": total,
            "daemon_startup_messages": startup,
            "broker_messages_per_lease": round(total / args.requests, 2),
            "messages_by_topic_kind": dict(sorted(during.items()))}


PRELOAD_LEASE = LEASE.replace("01:00:00", "00:00:10")


def preload(manager: Manager, count: int) -> float:
    """`count` leases requested, run and done before the timing (as after a day of service): their journal
    entries and records are what the daemon carries into every later step. Seconds it took."""
    t0 = time.perf_counter()
    manager.store.db.execute("PRAGMA synchronous=OFF")     # the setup, not the measure: no fsync per request
    for _ in range(count):
        manager.submit(lambda i, t: parse_lease_xml(PRELOAD_LEASE, i, t, manager.origin, manager.site), PRELOAD_LEASE)
    # the next planned instant or request's arrival: a request that arrives after the last step (the real clock
    # moved on while a loaded machine ran the submits) is stepped at its arrival, not waited for at the last step
    while (t := manager.next_instant()) is not None:
        manager.step(t)
    manager.store.db.execute("PRAGMA synchronous=FULL")
    return time.perf_counter() - t0


SCALE_LEASE = LEASE.replace("01:00:00", "30:00:00:00")     # a month: every lease stays in the system


def fill(manager: Manager, count: int, batch: int) -> tuple[float, float]:
    """`count` leases put in the system as the daemon takes a batch of requests that arrived together: each batch
    of `batch` requests is committed in the transaction of the step that takes it (Intake._step_with), so each
    lease is journaled, scheduled by the round, persisted and started by enactment as if requested over the API.
    The XML is parsed once per batch (every request is the same text; each gets its own id, as `submit` gives it).
    Seconds it took (wall, and this process's CPU)."""
    t0, c0 = time.perf_counter(), time.process_time()
    manager.store.db.execute("PRAGMA synchronous=OFF")     # the setup, not the measure: no fsync per request
    left = count
    while left:
        n = min(batch, left)
        t = manager.now()
        req = parse_lease_xml(SCALE_LEASE, 0, t, manager.origin, manager.site)
        manager.step(t, requests=[(replace(req, id=i), SCALE_LEASE) for i in manager.reserve_ids(n)])
        left -= n
    manager.store.db.execute("PRAGMA synchronous=FULL")
    return time.perf_counter() - t0, time.process_time() - c0


def _cpu_ms(run, repeats: int) -> dict:
    """CPU milliseconds of `repeats` calls of `run` (this process, no other thread running): median and max."""
    costs = []
    for _ in range(repeats):
        c0 = time.process_time()
        run()
        costs.append(1000 * (time.process_time() - c0))
    costs.sort()
    return {"median": round(statistics.median(costs), 3), "max": round(costs[-1], 3)}


def step_costs(manager: Manager, repeats: int) -> dict:
    """What the daemon's step and enactment pass cost with the leases now in the system (CPU, before the server and
    the loop run; the real clock set on time at the last step's instant): a step that takes one request at that
    instant (a placement at an instant already asked, as for a batch of requests), a step with nothing new (a
    wakeup), the same 10 s late (a loaded daemon's step, which says what it changed late), an idle enactment pass
    (the 0.1 s poll between steps), and a step that takes one request at a new instant (there the greedy round
    scores the busy nodes: the scheduler's cost, not the daemon's); and what a checkpoint of them costs."""
    manager.store.db.execute("PRAGMA synchronous=OFF")     # CPU, not the disk's fsync
    clock, epoch = manager.clock, manager.clock.epoch

    def late_by(seconds: float) -> None:
        """The real clock `seconds` after the last step's instant."""
        clock.epoch = time.time() - seconds - manager.last_t / clock.scale

    def one(at: int) -> None:
        req = parse_lease_xml(SCALE_LEASE, 0, at, manager.origin, manager.site)
        manager.step(at, requests=[(replace(req, id=i), SCALE_LEASE) for i in manager.reserve_ids(1)])

    def idle_pass() -> None:
        with manager.lock:
            manager._enact(only_on_news=True)

    # a checkpoint first (the daemon's own CPU reported: all of it inline; forked, the fork and the commit, the
    # child's CPU apart): no step measured below writes one (every 10,000 journal entries)
    manager.collect_checkpoint(wait=True)   # one the fill's steps forked (its requests journal 10,000 entries a batch)
    manager.step(manager.last_t)        # a journal entry for it to cover (the fill's last step may have written one)
    manager.collect_checkpoint(wait=True)
    c0 = time.process_time()
    with MemorySampler(manager) as memory:
        manager.write_checkpoint()
        manager.collect_checkpoint(wait=True)
    out = {"leases_in_system": len(manager.sched.leases), "checkpoint_cpu_s": round(time.process_time() - c0, 2),
           "checkpoint": {k: v for k, v in manager.checkpoint_stats.items() if not k.endswith("_at")},
           "checkpoint_memory_mb": memory.figures()}
    # first at new instants: the fill's last instant starts thousands of leases, which a step at that instant
    # filters again (the slot table's leases starting there); the steps below are at the last of these instants
    late_by(0)
    out["step_one_request_new_instant_ms"] = _cpu_ms(lambda: one(manager.last_t + 1), max(1, repeats // 4))
    late_by(0)
    out["step_one_request_ms"] = _cpu_ms(lambda: one(manager.last_t), repeats)
    late_by(0)
    out["step_nothing_new_ms"] = _cpu_ms(lambda: manager.step(manager.last_t), repeats)
    late_by(10)
    out["late_step_nothing_new_ms"] = _cpu_ms(lambda: manager.step(manager.last_t), repeats)
    out["idle_enactment_pass_ms"] = _cpu_ms(idle_pass, repeats)
    out.update(host_silent(manager))
    out.update(listing_costs(manager))
    clock.epoch = epoch
    manager.store.db.execute("PRAGMA synchronous=FULL")
    return out


def run_list_leases(url: str) -> dict:
    """`optlease list-leases` run as a command, as a user runs it, its output into a file (`> file`): wall, its own
    CPU (user + system: on a loaded machine its wall time is mostly waiting for a core), rows, exit status; and the
    wall time of a second run read through a pipe by this process (as before: on a loaded machine each 64 KiB the
    pipe holds waits for the reader to get a core); the daemon's CPU and full collections during the first."""
    import gc
    import resource
    full, c0 = gc.get_stats()[2]["collections"], time.process_time()
    with tempfile.TemporaryFile("w+") as out:
        t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        cli = subprocess.run([sys.executable, "-m", "optlease.cli.main", "list-leases", "-s", url], stdout=out,
                             stderr=subprocess.PIPE, text=True)
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        # the daemon's CPU meanwhile (this process: its API server answering), and its full collections
        daemon_cpu, full = time.process_time() - c0, gc.get_stats()[2]["collections"] - full
        out.seek(0)
        rows = sum(1 for _ in out) - 1
    t0 = time.perf_counter()
    piped = subprocess.run([sys.executable, "-m", "optlease.cli.main", "list-leases", "-s", url],
                           capture_output=True, text=True)
    return {"wall_s": round(wall, 3), "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime
                                                     - before.ru_stime, 3),
            "rows": rows, "status": cli.returncode or piped.returncode, "daemon_cpu_s": round(daemon_cpu, 3),
            "daemon_full_collections": full,
            "piped_wall_s": round(time.perf_counter() - t0, 3)}


def listing_costs(manager: Manager) -> dict:
    """The leases listed (the API server alone, no loop): the daemon's CPU for the first listing after the fill
    (every block formatted) and for one with nothing changed, `optlease list-leases` as a command twice (the
    first after a lease changed), and a get_leases call from this process (the daemon's encoding, then the
    client's parsing)."""
    server = make_server(manager, "127.0.0.1:0", None)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        c0 = time.process_time()
        manager.table.open(False)
        first = time.process_time() - c0
        c0 = time.process_time()
        manager.table.open(False)
        again = time.process_time() - c0
        manager.step(manager.last_t, requests=[(replace(parse_lease_xml(SCALE_LEASE, 0, manager.last_t,
                                                                        manager.origin, manager.site), id=i),
                                                SCALE_LEASE) for i in manager.reserve_ids(1)])
        cli = [run_list_leases(url), run_list_leases(url)]
        t0, c0 = time.perf_counter(), time.process_time()
        listed = len(xmlrpc.client.ServerProxy(url).get_leases())
        get_leases = (time.perf_counter() - t0, time.process_time() - c0)
    finally:
        server.shutdown()
        server.server_close()
    return {"listing": {"table_first_cpu_s": round(first, 3), "table_unchanged_cpu_s": round(again, 3),
                        "list_leases_cli": cli, "get_leases_s": round(get_leases[0], 2),
                        "get_leases_cpu_s": round(get_leases[1], 2), "get_leases_rows": listed}}


def smaps_rollup(pid) -> dict[str, int]:
    """A process's memory (kB), from /proc/PID/smaps_rollup: Rss, Pss, Private_Dirty..."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    out[name] = int(rest.split()[0])
    except OSError:
        pass
    return out


class MemorySampler:
    """The daemon's and its checkpoint child's memory while the child writes (every 20 ms, in a thread): the
    daemon before the fork (Rss, Pss), and at the peak the two together (Pss summed: each page counted once), the
    child's own pages (Private: those it copied by writing to them, or allocated) and the daemon's own (after the
    fork every page is shared: those it copied or allocated since); `added`: the peak less the daemon before."""

    def __init__(self, manager) -> None:
        self.manager, self.before = manager, smaps_rollup("self")
        self.peak = {"both_pss": 0, "child_private": 0, "parent_private": 0, "child_rss": 0}
        self.done = threading.Event()

    def __enter__(self) -> "MemorySampler":
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.done.wait(0.02):
            child = self.manager._child
            if child is None:
                continue
            its, mine, again = smaps_rollup(child.pid), smaps_rollup("self"), smaps_rollup(child.pid)
            if not its or again.get("Rss", 0) < its.get("Rss", 0):
                continue        # the child exited meanwhile: the daemon's pages were its alone again
            peak = self.peak
            peak["both_pss"] = max(peak["both_pss"], mine.get("Pss", 0) + its.get("Pss", 0))
            peak["child_private"] = max(peak["child_private"],
                                        its.get("Private_Clean", 0) + its.get("Private_Dirty", 0))
            peak["child_rss"] = max(peak["child_rss"], its.get("Rss", 0))
            peak["parent_private"] = max(peak["parent_private"],
                                         mine.get("Private_Clean", 0) + mine.get("Private_Dirty", 0))

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def figures(self) -> dict:
        mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
        return {"daemon_rss_before": mb(self.before.get("Rss", 0)), "daemon_pss_before": mb(self.before.get("Pss", 0)),
                "both_pss_peak": mb(self.peak["both_pss"]), "child_rss_peak": mb(self.peak["child_rss"]),
                "child_private_peak": mb(self.peak["child_private"]),
                "daemon_private_peak": mb(self.peak["parent_private"]),
                "added": mb(max(0, self.peak["both_pss"] - self.before.get("Pss", 0)))}


class SilencingEnactor(SimulatedEnactor):
    """Simulated hosts, one of which the benchmark can make go silent (as an agent that stops beating)."""

    def __init__(self, site) -> None:
        super().__init__(site)
        self.silent: set[str] = set()
        self.version = 0

    def hosts(self):
        hosts = super().hosts()
        hosts.update((name, replace(hosts[name], alive=False)) for name in self.silent)
        return hosts

    def hosts_version(self) -> int:
        return self.version


def host_silent(manager: Manager) -> dict:
    """CPU of the enactment pass that finds a host gone silent (its node leaves planning, its leases are requeued
    and journaled) and of the pass that finds it back; the host of node 1 (about in-system / hosts leases)."""
    enactor, name = manager.enactor, manager.host_names[0]
    enactor.simulated = False           # hosts can go silent: the daemon watches them
    out = {}
    for key, silent in (("host_down_pass_ms", True), ("host_back_pass_ms", False)):
        (enactor.silent.add if silent else enactor.silent.discard)(name)
        enactor.version += 1
        with manager.lock:
            c0 = time.process_time()
            manager._enact()
            out[key] = round(1000 * (time.process_time() - c0), 3)
    enactor.simulated = True
    return out


def during_checkpoint(manager: Manager, port: int, args) -> dict:
    """create_lease while the daemon writes a checkpoint: the checkpoint is due at the next step (as after
    CHECKPOINT_EVERY journal entries), and bursts of `--requests` calls go on until it is committed; the calls
    that overlapped it (from the clients' side), and what it cost the daemon."""
    manager.collect_checkpoint(wait=True)   # a child forked before (the fill's requests journal 10,000 entries a
    before = manager.checkpoint_stats       # batch); then the record, before the loop's next step may fork
    manager.store.entries = max(manager.store.entries, checkpoint.CHECKPOINT_EVERY)
    calls, bursts, deadline, stats = [], 0, time.monotonic() + 1200, {}
    sampler = MemorySampler(manager).__enter__()
    while time.monotonic() < deadline:      # (a loaded machine gives the child a fraction of a core)
        _, took, _, _, began = clients_process(port, args.requests, args.clients, SCALE_LEASE)
        calls += zip(began, took)
        bursts += 1
        # the first checkpoint forked after `before` (each fork starts a new record; the last step of a burst
        # may fork it after the burst): requests that come faster than a child writes make the next one due as
        # soon as it is committed
        if not stats and manager.checkpoint_stats is not before:
            stats = manager.checkpoint_stats
        if "ended_at" in stats or (not stats and bursts >= 3):
            break
    sampler.__exit__()
    stats = dict(stats)
    during = sorted(d for at, d in calls if at <= stats.get("ended_at", 0) and at + d >= stats.get("began_at", 0))
    return {"leases_in_system": len(manager.sched.leases), "bursts": bursts, "calls_during_checkpoint": len(during),
            "committed": "ended_at" in stats,
            "create_lease_during_checkpoint_ms": _percentiles(during),
            "checkpoint_s": round(stats.get("ended_at", 0) - stats.get("began_at", 0), 2),
            "checkpoint": {k: v for k, v in stats.items() if not k.endswith("_at")},
            "checkpoint_memory_mb": sampler.figures()}


def bench_scale(args) -> dict:
    """The daemon at scale: `--hosts` simulated hosts and `--in-system` leases running on them (10 CPU units each,
    for a month), put in process in batches of `--fill-batch` requests a step (`fill`); on the way, at each count
    of `--step-at`, what a step and an enactment pass cost (`step_costs`); then `--requests` more through the API
    from `--clients` clients (the client's create_lease call, p50/p95/max), and the leases listed: the `get_leases`
    call (the server writes every lease, the client reads them) and `optlease list-leases` as a user runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        port = 0    # the API server takes a port of its own, read back once it listens (none taken meanwhile)
        text = daemon_config(port=port, persistence_file=str(Path(tmp) / "bench.db"),
                             resources=f"{args.hosts} CPU:100 Memory:1024", scheduling=SCHEDULING)
        cfg = parse_config(text, str(Path(tmp) / "bench.conf"), Path(tmp))
        manager = Manager(cfg, enactor=SilencingEnactor(site_from_config(cfg)), indexed=not args.unindexed,
                          forked_checkpoints=not args.inline_checkpoint)
        preload_s = preload_cpu_s = 0.0
        costs = []
        stages = sorted({n for n in args.step_at if n < args.in_system} | {args.in_system}) \
            if args.step_at else [args.in_system]
        for stage in stages:
            wall, cpu = fill(manager, stage - len(manager.sched.leases), args.fill_batch)
            preload_s, preload_cpu_s = preload_s + wall, preload_cpu_s + cpu
            if args.step_at:
                costs.append(step_costs(manager, args.step_repeats))
        in_system = len(manager.sched.leases)
        server = serve(manager, cfg)
        port = server.server_address[1]
        # this process's CPU while the clients (a process of their own) call: the daemon's work for the requests
        c0 = time.process_time()
        _, calls, failures, accepted_s, _ = clients_process(port, args.requests, args.clients, SCALE_LEASE)
        requests_cpu_s = time.process_time() - c0
        checkpointing = during_checkpoint(manager, port, args) if args.checkpoint_during else None
        calls.sort()
        t0 = time.perf_counter()
        listed = len(xmlrpc.client.ServerProxy(f"http://127.0.0.1:{port}").get_leases())
        get_leases_s = time.perf_counter() - t0
        cli = run_list_leases(f"http://127.0.0.1:{port}")
        rss_mb = _peak_rss_mb()
        server.shutdown()
        server.server_close()
        manager.stop()
    # how each median grew from the fewest leases measured to the most (flat: about 1; at most 2 to pass)
    growth = {key: round(costs[-1][key]["median"] / max(costs[0][key]["median"], 1e-6), 2)
              for key in costs[0] if isinstance(costs[0][key], dict) and "median" in costs[0][key]} \
        if len(costs) > 1 else {}
    return {"mode": "scale", "hosts": args.hosts, "indexed": not args.unindexed, "leases_in_system": in_system,
            "checkpoints": "inline" if args.inline_checkpoint else "forked", "while_checkpointing": checkpointing,
            "step_costs": costs, "step_cost_growth_most_over_fewest_leases": growth,
            "preload_s": round(preload_s, 1),
            "preload_cpu_s": round(preload_cpu_s, 1), "fill_batch": args.fill_batch,
            "requests": args.requests, "clients": args.clients,
            "failed_calls": {name: failures.count(name) for name in sorted(set(failures))},
            "requests_per_s": round(args.requests / accepted_s, 1), "create_lease_ms": _percentiles(calls),
            # on a loaded machine the calls' wall time is mostly waiting for a core: the daemon's CPU per request
            "daemon_cpu_ms_per_request": round(1000 * requests_cpu_s / args.requests, 2),
            "get_leases_s": round(get_leases_s, 2), "leases_listed": listed,
            "list_leases_cli_s": cli["wall_s"], "list_leases_cli_cpu_s": cli["cpu_s"],
            "list_leases_cli_piped_s": cli["piped_wall_s"],
            "list_leases_cli_rows": cli["rows"], "list_leases_cli_status": cli["status"], "peak_rss_mb": rss_mb}


def _peak_rss_mb() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _percentiles(latency: list[float]) -> dict:
    """p50, p95, max and mean of sorted latencies in seconds, as milliseconds."""
    def pct(p: float) -> float | None:
        return round(1000 * latency[min(len(latency) - 1, int(p * len(latency)))], 2) if latency else None
    return {"p50": pct(0.5), "p95": pct(0.95), "max": pct(1.0),
            "mean": round(1000 * statistics.fmean(latency), 2) if latency else None}


def positive(text: str) -> int:
    """A count of at least 1 (a batch of 0 would never fill)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def counts(text: str) -> list[int]:
    """Comma-separated counts of at least 1 (`0` alone: none)."""
    if text.strip() == "0":
        return []
    return [positive(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("simulated", "fast", "scale"), default="simulated")
    parser.add_argument("--requests", type=int, default=None, help="default 1000 (simulated), 100 (fast)")
    parser.add_argument("--clients", type=positive, default=8, help="concurrent client connections")
    parser.add_argument("--preload", type=int, default=10_000, help="leases run to completion before the timing")
    parser.add_argument("--persistence", choices=("file", "none"), default="file")
    parser.add_argument("--agents", type=int, default=8, help="mode fast: agent processes (test:/// hosts)")
    parser.add_argument("--timeout", type=float, default=120, help="mode fast: seconds to wait for the leases")
    parser.add_argument("--hosts", type=positive, default=10_000, help="mode scale: simulated hosts")
    parser.add_argument("--in-system", type=positive, default=100_000, help="mode scale: leases running before the timing")
    parser.add_argument("--fill-batch", type=positive, default=5_000,
                        help="mode scale: requests taken by each step that puts the leases in the system")
    parser.add_argument("--step-at", type=counts, default=None,
                        help="mode scale: leases in the system (comma-separated) at which to measure a step's cost; "
                             "default: a tenth, half and all of --in-system; 0: none")
    parser.add_argument("--step-repeats", type=positive, default=20, help="mode scale: steps measured at each count")
    parser.add_argument("--unindexed", action="store_true",
                        help="mode scale: the daemon walking every lease and host at each step and pass (the "
                             "reference the indexes are compared with)")
    parser.add_argument("--inline-checkpoint", action="store_true",
                        help="mode scale: checkpoints pickled in the daemon's turn (as before), not by a forked child")
    parser.add_argument("--checkpoint-during", type=int, choices=(0, 1), default=1,
                        help="mode scale: 1 (default) measures create_lease while a checkpoint is written")
    args = parser.parse_args()
    if args.mode == "scale":
        if args.step_at is None:
            args.step_at = [max(1, args.in_system // 10), max(1, args.in_system // 2), args.in_system]
        args.requests = args.requests or 500
        print(json.dumps(bench_scale(args), indent=1))
        return
    if args.mode == "fast":
        args.requests = args.requests or 100
        print(json.dumps(bench_fast(args), indent=1))
        return
    args.requests = args.requests or 1000
    with tempfile.TemporaryDirectory() as tmp:
        port = 0    # the API server takes a port of its own, read back once it listens (none taken meanwhile)
        db = str(Path(tmp) / "bench.db") if args.persistence == "file" else "none"
        text = daemon_config(port=port, persistence_file=db, resources=SIMULATED_SITE, scheduling=SCHEDULING)
        cfg = parse_config(text, str(Path(tmp) / "bench.conf"), Path(tmp))
        manager = Manager(cfg)
        preload_s = preload(manager, args.preload)
        server = serve(manager, cfg)
        port = server.server_address[1]
        t0 = time.perf_counter()
        ids, _, failures, accepted_s, _ = clients_process(port, args.requests, args.clients, LEASE)
        enactor = manager.enactor
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(f"lease-{i}-vm-1" in enactor.started_at for i in ids):
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

    print(json.dumps({
        "requests": args.requests, "hosts": 100, "clients": args.clients, "persistence": args.persistence,
        "leases_before": args.preload, "preload_s": round(preload_s, 2), "accepted": len(set(ids)),
        "failed_calls": {name: failures.count(name) for name in sorted(set(failures))},
        "requests_per_s": round(args.requests / accepted_s, 1),
        "accept_wall_s": round(accepted_s, 3), "started": len(latency), "all_started_s": round(all_started_s, 3),
        "request_to_start_ms": _percentiles(latency),
        "scheduling_rounds": rounds, "enactment_tasks": tasks,
    }, indent=1))


if __name__ == "__main__":
    main()
