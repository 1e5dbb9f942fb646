"""Enactment over MQTT: VmTasks go out as FAST migfra tasks, results come back and become TaskOutcomes.

The enactor subscribes to `fast/migfra/+/result` and `fast/agent/+/status` (QoS 1) and publishes only once the broker
has granted both (results are not retained). Each task becomes one or more wire messages (parts) to
`fast/migfra/<host>/task`, QoS 2: a swap is two migrations, and since migfra stops and migrates only RUNNING
domains, a paused VM is resumed first (stages, each sent once the one before succeeded). The tasks of one submit()
go out wave by wave: wave k once every task of wave k-1 succeeded; when one fails the later waves are never sent
(their outcomes say `skipped`), so a change is never half applied beyond the wave that failed.

How a task becomes parts, stages and waves, and how they settle, is in `mqtt_jobs`; attempts, retries, backoff and
liveness probes in `mqtt_timers`; reading messages (off paho's thread), results, announcements and inventories
(`list vms`, an optlease extension) in `mqtt_events`. `running()` is each host's last inventory, updated by every
successful task since. Nothing the network or a payload does raises into the caller.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import replace
from typing import Callable

import paho.mqtt.client as mqtt

from optlease.enact import fast
from optlease.enact.agent.broker import Broker, make_client
from optlease.enact.base import HostInfo, Reported, TaskOutcome, VmTask, parse_vm_name
from optlease.enact.mqtt_events import INBOX, BrokerEvents
from optlease.enact.mqtt_jobs import Batch, Jobs, Part
from optlease.enact.mqtt_timers import TICK, Timers
from optlease.errors import InputError

log = logging.getLogger("optlease.enact.mqtt")


class MqttEnactor(Jobs, BrokerEvents, Timers):
    """The Enactor that speaks FAST over MQTT to one migfra(-compatible) agent per host."""

    def __init__(self, host: str = "127.0.0.1", port: int = 1883, username: str | None = None,
                 password: str | None = None, tls_ca: str | None = None, keepalive: int = 30,
                 task_timeout: float = 30.0, task_retries: int = 2, host_timeout: float | None = None, *,
                 swap_with: bool = False, domain_xml: Callable[[VmTask], str] | None = None,
                 stop_force: bool = False, connect_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, reconnect_delay: tuple[float, float] = (1, 4),
                 hosts: list[str] | tuple[str, ...] = ()) -> None:
        """`swap_with`: send a swap as migfra's one `swap-with` migration (the optlease agent refuses it; by default
        it goes out as two migrations in the same wave). `domain_xml`: the XML a start defines (default: start a
        domain already defined on the host, by name). Waits up to `connect_timeout` for the subscriptions, never
        raises when the broker is not there: paho keeps trying. `hosts`: the hosts expected (known, not alive until
        they answer), asked what they run as soon as we are subscribed."""
        self.broker = Broker(host, port, username, password, tls_ca, keepalive)
        self.task_timeout = float(task_timeout)
        self.task_retries = int(task_retries)
        self.host_timeout = host_timeout
        self.swap_with = swap_with
        self.domain_xml = domain_xml
        self.stop_force = stop_force
        self.clock = clock
        self._lock = threading.RLock()
        self._pending: dict[str, Part] = {}
        self._unsent: list[Part] = []
        self._batches: list[Batch] = []
        self.on_outcome: Callable[[], None] | None = None     # called (lock held) when a task has its outcome
        self._outcomes: list[TaskOutcome] = []
        self._hosts: dict[str, HostInfo] = {}
        self._hosts_version = 0                     # bumped at each change hosts() would show but last_seen
        self._running = Reported()
        self._inventory: dict[str, tuple[str, int]] = {}   # id of a `list vms` under way -> (host, _settles then)
        self._settles = 0                           # successful tasks recorded in `running()` so far
        self._settled_at: dict[str, int] = {}       # vm -> _settles after its last task, while a listing is asked
        self._failures: dict[tuple, tuple[int, float]] = {}   # a task that failed -> (times in a row, held until)
        self._probes: dict[str, list] = {}          # id of a probe under way -> [host, deadline]
        self._probed: dict[str, float] = {}         # host -> when it was last probed
        self.no_inventory: set[str] = set()         # hosts that do not know `list vms` (migfra)
        self._said: set[tuple] = set()              # answers without id already logged
        self._last_tick = clock()
        self._inbox: queue.Queue = queue.Queue(INBOX)
        self.listed: dict[str, float] = {}           # host -> when its last inventory arrived
        for name in hosts:
            self._hosts[fast.check_host(name)] = HostInfo(name, {}, False, 0.0)
        self._ready = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._sub_mid: int | None = None
        self._closing = False
        self.client = make_client(self.broker, "optlease-enactor")
        self.client.reconnect_delay_set(*reconnect_delay)
        self.client.suppress_exceptions = True
        self.client.on_connect = self._guard(self._on_connect)
        self.client.on_disconnect = self._guard(self._on_disconnect)
        self.client.on_subscribe = self._guard(self._on_subscribe)
        self.client.message_callback_add(fast.ALL_RESULTS, self._guard(self._arrived))
        self.client.message_callback_add(fast.ALL_STATUS, self._guard(self._arrived))
        self.client.connect_async(host, port, keepalive=keepalive)
        self.client.loop_start()
        self._ticker = threading.Thread(target=self._tick_loop, name="optlease-enactor-timers", daemon=True)
        self._ticker.start()
        self._reader = threading.Thread(target=self._read_loop, name="optlease-enactor-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(connect_timeout):
            log.warning("MQTT broker %s: not subscribed within %g s; tasks wait until it is", self.broker,
                        connect_timeout)

    @classmethod
    def from_config(cls, cfg, **options) -> "MqttEnactor":
        """From a configuration's `[mqtt]` section (`hosts`: the agents' host names, expected from the start).
        Refuses a broker without credentials or TLS unless `insecure: yes`: whoever can publish there commands the
        hosts."""
        get = lambda name: cfg.get("mqtt", name)   # noqa: E731
        if get("username") is None and get("tls-ca") is None and not get("insecure"):
            raise InputError("[mqtt] has neither username/password nor tls-ca: anyone who reaches the broker could "
                             "command the hosts; set them (docs/enactment.md), or say insecure: yes", cfg.path)
        options.setdefault("hosts", tuple((get("hosts") or "").split()))
        return cls(get("host"), get("port"), get("username"), get("password"), get("tls-ca"), get("keepalive"),
                   get("task-timeout"), get("task-retries"), get("host-timeout") or None, **options)

    # ---------------------------------------------------------------------------------------- Enactor protocol
    def submit(self, tasks: list[VmTask]) -> None:
        """Send tasks in their waves (VmTask.wave; the order given within a wave). Returns at once."""
        if not tasks:
            return
        waves: dict[int, list[VmTask]] = {}
        for t in tasks:
            waves.setdefault(t.wave, []).append(t)
        batch = Batch([])
        for wave_no in sorted(waves):
            batch.waves.append([self._job(t, batch) for t in waves[wave_no]])
        sends: list[Part] = []
        with self._lock:
            self._batches.append(batch)
            self._start_wave(batch, sends)
        self._publish(sends)

    def outcomes(self) -> list[TaskOutcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
        return out

    def hosts(self) -> dict[str, HostInfo]:
        with self._lock:
            return {h: replace(info, capacity=dict(info.capacity)) for h, info in self._hosts.items()}

    def running(self) -> dict[str, tuple[str, str]]:
        """What the hosts run: vm -> (host, libvirt state), from each host's last `list vms` answer and the
        successful tasks since."""
        with self._lock:
            return dict(self._running)

    def running_changes(self) -> set[str]:
        """The VMs whose report changed since the last call."""
        with self._lock:
            return self._running.take_changes()

    def running_delta(self) -> dict[str, tuple[str, str] | None]:
        """The VMs whose report changed since the last call, each with its report now (None: gone)."""
        with self._lock:
            return self._running.take_delta()

    def hosts_version(self) -> int:
        """Changes whenever a host appears, or its `alive` or `capacity` changes (not with `last_seen`)."""
        with self._lock:
            return self._hosts_version

    def request_inventory(self, hosts=None) -> None:
        """Ask hosts (default: every known host) what they run (`task: list vms`, an optlease extension)."""
        with self._lock:
            names = sorted(self._hosts) if hosts is None else list(hosts)
        if not self._ready.is_set():
            return      # asked again for every host once subscribed
        for host in names:
            task = fast.ListVms()
            with self._lock:
                self._inventory[task.id] = (host, self._settles)
            try:
                self.client.publish(fast.task_topic(host), fast.encode_task(task, host), qos=1)
            except Exception as exc:      # noqa: BLE001 - a bad name must not stop the others
                log.warning("cannot ask %s what it runs: %s", host, exc)

    def wait_inventory(self, hosts, timeout: float, since: float = 0.0) -> bool:
        """Block until every named host has answered a `list vms` (after `since`, on the enactor's clock)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(self.listed.get(h, -1.0) >= since for h in hosts):
                    return True
            time.sleep(TICK)
        return False

    def close(self) -> None:
        self._closing = True
        self._ticker.join(2)
        self._inbox.put(None)
        self._reader.join(2)
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    # ------------------------------------------------------------------------------------------ extra helpers
    @property
    def connected(self) -> bool:
        return self._ready.is_set()

    def busy(self) -> bool:
        with self._lock:
            return bool(self._batches)

    def pending(self) -> tuple[set[str], set[str]]:
        """The hosts and the VMs that tasks not yet settled (sent or waiting for their wave) concern: the daemon
        plans nothing new there until they settle, and anything elsewhere at once."""
        hosts: set[str] = set()
        vms: set[str] = set()
        with self._lock:
            for batch in self._batches:
                for wave in batch.waves[batch.index:]:
                    for job in wave:
                        if not job.settled:
                            task = job.task
                            vms.update(v for v in (task.vm, task.swap_with) if v)
                            hosts.update(h for h in (task.host, task.destination) if h)
        return hosts, vms

    def wait_idle(self, timeout: float) -> bool:
        """Block until every submitted task has its outcome; False when the timeout came first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._batches:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, TICK * 4))
            return True

    def wait_hosts(self, names, timeout: float) -> bool:
        """Block until every named host has announced itself (and is alive)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            known = self.hosts()
            if all(n in known and known[n].alive for n in names):
                return True
            time.sleep(TICK)
        return False

    # ------------------------------------------------------------------------------------------------- sending
    def _publish(self, parts: list[Part]) -> None:
        """Publish outside the lock (paho has its own)."""
        for part in parts:
            try:
                task = part.build(part.id)
                info = self.client.publish(fast.task_topic(part.host), fast.encode_task(task, part.host), qos=2)
                log.info("%s %s -> %s (%s, attempt %d)", task.kind, part.job.task.vm, part.host, part.id,
                         part.attempt)
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    log.warning("publish of %s to %s: %s; its timer will retry it", part.id, part.host,
                                mqtt.error_string(info.rc))
            except Exception as exc:      # noqa: BLE001 - a bad host name fails this task, not the enactor
                log.warning("cannot send %s to %s: %s", part.job.task.kind, part.host, exc)
                with self._lock:
                    self._forget(part)
                    part.result = fast.Result("unknown", (fast.VmResult(part.job.task.vm, fast.ERROR, str(exc)),))
                    more: list[Part] = []
                    self._settled(part, more)
                self._publish(more)

__all__ = ["MqttEnactor", "parse_vm_name"]
