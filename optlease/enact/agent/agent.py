"""The per-host agent: reads migfra tasks from MQTT, runs them on libvirt in worker threads, publishes the results."""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import libvirt
import paho.mqtt.client as mqtt

from optlease.enact.fast import (EMPTY_CONTAINER, ERROR, SUCCESS, AgentStatus, FastProtocolError, MigrateVm, Quit,
                                 Result, Task, VmResult, check_host, parse_task, quit_result, result_topic,
                                 status_topic, task_topic, unknown_result)
from optlease.enact.agent.broker import Broker, connect, make_client
from optlease.enact.agent.handoff import Offer, Reply, offer_topic, parse_offer, parse_reply, reply_topic
from optlease.enact.agent.hypervisor import UNDEFINED, Hypervisor, HypervisorError
from optlease.enact.agent.owned import OPTLEASE_NAMES, Owned

log = logging.getLogger("optlease.agent")


class Agent:
    """One host's migfra-compatible agent. start() connects and returns; the work happens on paho's network thread
    (parsing, never blocking) and on worker threads (libvirt), so results can come out of order, as with migfra."""

    def __init__(self, host: str, hypervisor: Hypervisor, broker: Broker, *, handoff_timeout: float = 30.0,
                 workers: int = 8, migrate_uri: str | None = None, heartbeat: float = 10.0,
                 adopt: str | None = OPTLEASE_NAMES) -> None:
        """`heartbeat`: seconds between two status messages while connected (`task: heartbeat`, the capacity of
        `task: init`), so a lease manager can tell a silent host from a quiet one; 0 = announce on connect only.
        `adopt`: the names of domains it did not start but may manage (a regular expression; see `Owned`)."""
        self.host = check_host(host)
        self.owned = Owned(adopt)
        self.heartbeat = float(heartbeat)
        self.hv = hypervisor
        self.broker = broker
        self.handoff_timeout = handoff_timeout
        self.migrate_uri = migrate_uri
        self.client = make_client(broker, f"optlease-agent-{host}")
        # a callback that raises would end paho's network thread, and with it the agent
        self.client.suppress_exceptions = True
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.message_callback_add(task_topic(host), self._guard(self._on_task))
        self.client.message_callback_add(offer_topic(host), self._guard(self._on_offer))
        self.client.message_callback_add(reply_topic(host), self._guard(self._on_reply))
        # offers get their own pool: a migration waiting for its destination must never starve an incoming one
        self._tasks = ThreadPoolExecutor(workers, thread_name_prefix=f"agent-{host}-task")
        self._offers = ThreadPoolExecutor(2, thread_name_prefix=f"agent-{host}-offer")
        self._pending: dict[str, tuple[threading.Event, list[Reply]]] = {}
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._refused: list[str] = []
        self._done = threading.Event()
        self._quitting = False
        self._up = False     # connected now: only then is a disconnect news worth a warning
        self._capacity = hypervisor.capacity()
        self._handlers: dict[str, Callable[[Task], tuple[VmResult, ...]]] = {
            "start vm": lambda t: tuple(self._each(c.name, lambda c=c: self._start(c), c.time_measurement)
                                        for c in t.configs),
            "stop vm": lambda t: tuple(r for e in t.entries for r in self._stop(e)),
            "suspend vm": lambda t: tuple(self._each(n, lambda n=n: self.hv.suspend(n), owned=True)
                                          for n in t.vm_names),
            "resume vm": lambda t: tuple(self._each(n, lambda n=n: self.hv.resume(n), owned=True)
                                         for n in t.vm_names),
            "repin vm": lambda t: (self._each(t.vm_name, lambda: self.hv.repin(t.vm_name, t.vcpu_map), owned=True),),
            "migrate vm": lambda t: (self._each(t.vm_name, lambda: self._migrate(t), t.time_measurement, True),),
            "evacuate node": self._evacuate,
            # optlease extension: what this host really runs, so a restarted lease manager can reconcile
            "list vms": lambda t: tuple(VmResult(name, SUCCESS, state=state) for name, state in self.hv.list_vms()
                                        if self.owned.mine(name)),
        }

    # -------------------------------------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 10.0) -> None:
        """Connect, subscribe, announce; raises BrokerError when the broker cannot be reached or refuses us."""
        connect(self.client, self.broker, self._connected, self._refused, timeout)
        if self.heartbeat > 0:
            threading.Thread(target=self._beat, name=f"agent-{self.host}-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        """Every `heartbeat` seconds while connected: `task: heartbeat` with the host's capacity (an optlease
        extension of FAST's status messages; a lease manager that only knows `init` ignores it)."""
        vcpus, memory = self._capacity
        while not self._done.wait(self.heartbeat):
            if self._up:
                try:
                    self.client.publish(status_topic(self.host),
                                        AgentStatus(self.host, "heartbeat", vcpus, memory).encode(), qos=1)
                except Exception:      # noqa: BLE001 - a lost broker: paho reconnects, the next beat goes out
                    log.debug("%s: heartbeat not sent", self.host, exc_info=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a quit task (or request_stop) ends the agent; False when the timeout came first."""
        return self._done.wait(timeout)

    def request_stop(self) -> None:
        self._quitting = True
        self._done.set()

    def stop(self) -> None:
        """Finish the tasks under way (their results still go out), then leave the broker."""
        self._quitting = True
        self._done.set()
        self._tasks.shutdown(wait=True)
        self._offers.shutdown(wait=True)
        self.client.disconnect()
        self.client.loop_stop()

    # ------------------------------------------------------------------------------------------ MQTT events
    def _guard(self, handler: Callable[[mqtt.MQTTMessage], None]):
        def on_message(_client, _userdata, msg: mqtt.MQTTMessage) -> None:
            try:
                handler(msg)
            except Exception:        # noqa: BLE001 - the network thread must survive anything a message does
                log.exception("%s: failed to handle a message on %s", self.host, msg.topic)
        return on_message

    def _on_connect(self, client: mqtt.Client, _userdata, _flags, reason_code, _properties) -> None:
        if reason_code.is_failure:
            self._refused.append(str(reason_code))
            self._connected.set()
            return
        # clean session: every (re)connect subscribes anew and announces the host again, so a lease manager that
        # lost the broker too learns of it; the broker applies the subscriptions before the announcement
        client.subscribe([(task_topic(self.host), 2), (offer_topic(self.host), 2), (reply_topic(self.host), 1)])
        vcpus, memory = self._capacity
        client.publish(status_topic(self.host), AgentStatus(self.host, "init", vcpus, memory).encode(), qos=1)
        log.info("%s: connected to %s, listening on %s", self.host, self.broker, task_topic(self.host))
        self._up = True
        self._connected.set()

    def _on_disconnect(self, _client, _userdata, _flags, reason_code, _properties) -> None:
        was_up, self._up = self._up, False
        if was_up and not self._quitting:
            log.warning("%s: lost the broker (%s); reconnecting", self.host, reason_code)

    def _on_task(self, msg: mqtt.MQTTMessage) -> None:
        """On paho's network thread: the payload is read on a worker, so no message can stall the connection."""
        if not self._quitting:
            self._tasks.submit(self._run, bytes(msg.payload))

    def _run(self, payload: bytes) -> None:
        if self._quitting:
            return
        try:
            task = parse_task(payload)
        except FastProtocolError as exc:
            # an empty container is how a lease manager asks whether we are there: not worth a warning
            (log.debug if exc.message == EMPTY_CONTAINER else log.warning)("%s: cannot parse task: %s", self.host,
                                                                            exc)
            self._publish(unknown_result(str(exc), exc.task_id))
            return
        if isinstance(task, Quit):
            self._quitting = True
            self._publish(quit_result(task.id))
            log.info("%s: quit", self.host)
            self._done.set()
            return
        log.info("%s: %s %s", self.host, task.kind, task.id)
        self._execute(task)

    def _on_offer(self, msg: mqtt.MQTTMessage) -> None:
        self._offers.submit(self._take, bytes(msg.payload))

    def _take(self, payload: bytes) -> None:
        try:
            offer = parse_offer(payload)
        except FastProtocolError as exc:
            log.warning("%s: dropped a handoff that cannot be read: %s", self.host, exc)
            return
        self._accept(offer)

    def _on_reply(self, msg: mqtt.MQTTMessage) -> None:
        reply = parse_reply(msg.payload)
        with self._lock:
            waiting = self._pending.get(reply.id)
        if waiting is not None:
            waiting[1].append(reply)
            waiting[0].set()

    def _publish(self, result: Result) -> None:
        self.client.publish(result_topic(self.host), result.encode(), qos=1)

    # ---------------------------------------------------------------------------------------------- work
    def _execute(self, task: Task) -> None:
        try:
            vms = self._handlers[task.kind](task)
        except Exception as exc:     # noqa: BLE001 - a bug here still owes the sender an answer
            log.exception("%s: %s failed", self.host, task.kind)
            vms = (VmResult("unknown", ERROR, f"{type(exc).__name__}: {exc}"),)
        self._publish(Result(task.result_kind, vms, task.id))

    def _start(self, config) -> None:
        name = config.name
        if name and self.hv.state(name) != UNDEFINED:
            self.owned.check(name)      # an XML may not redefine, nor a name start, a domain that is not ours
        self.hv.start(config)
        if name:
            self.owned.add(name)

    def _stop(self, entry) -> list[VmResult]:
        """One entry of a stop: a named domain, or (as migfra) every running domain whose name matches `regex`."""
        if entry.regex is None:
            return [self._each(entry.vm_name or "", lambda: self._stop_one(entry), owned=bool(entry.vm_name))]
        pattern = re.compile(entry.regex)
        names = [n for n, state in self.hv.list_vms()
                 if state in ("running", "blocked") and pattern.fullmatch(n) and self.owned.mine(n)]
        return [self._each(n, lambda n=n: self._stop_one(replace(entry, vm_name=n, regex=None))) for n in names]

    def _evacuate(self, task) -> tuple[VmResult, ...]:
        """As migfra: every running domain (of ours) leaves, to the destinations in turn (without knowing their
        room, `mode` cannot do better than taking turns), one entry per domain."""
        names = [n for n, state in self.hv.list_vms() if state in ("running", "blocked", "paused")
                 and self.owned.mine(n)]
        out = []
        for i, name in enumerate(names):
            move = MigrateVm(name, task.destinations[i % len(task.destinations)], task.migration_type, id=task.id)
            out.append(self._each(name, lambda move=move: self._migrate(move)))
        return tuple(out)

    def _stop_one(self, entry) -> None:
        self.hv.stop(entry)
        if entry.undefine:
            self.owned.drop(entry.vm_name)

    def _each(self, name: str, action: Callable[[], None], timed: bool = False, owned: bool = False) -> VmResult:
        """Run one VM's part of a task; libvirt's message becomes the details of an error. `owned`: only for a
        domain this agent manages (one that is not there gets libvirt's `Domain not found`)."""
        began = time.monotonic()
        try:
            if owned and self.hv.state(name) != UNDEFINED:
                self.owned.check(name)
            action()
        except (libvirt.libvirtError, HypervisorError) as exc:
            return VmResult(name, ERROR, str(exc))
        except Exception as exc:     # noqa: BLE001
            log.exception("%s: unexpected failure on %s", self.host, name)
            return VmResult(name, ERROR, f"{type(exc).__name__}: {exc}")
        timing = {"overall": round(time.monotonic() - began, 6)} if timed else None
        return VmResult(name, SUCCESS, None, timing)

    def _migrate(self, task: MigrateVm) -> None:
        if task.swap_with is not None:
            raise HypervisorError("swap-with is not supported by the optlease agent: send two migrate tasks")
        if task.destination == self.host:
            raise HypervisorError(f"destination {task.destination} is this host")
        if self.migrate_uri is not None:
            dest_uri = self.migrate_uri.replace("{host}", task.destination)
            self.hv.migrate_p2p(task.vm_name, dest_uri, task.migration_type, task.rdma, task.destination)
            self.owned.drop(task.vm_name)
            return
        out = self.hv.export(task.vm_name, task.migration_type, self.host, task.vcpu_map)
        try:
            reply = self._handoff(task.destination, out.offer)
        except BaseException as exc:
            self._rollback(out, str(exc))
            raise
        if not reply.ok:
            self._rollback(out, reply.details or "refused")
            raise HypervisorError(f"destination {task.destination}: {reply.details or 'refused'}")
        self.hv.release(out)
        self.owned.drop(task.vm_name)

    def _rollback(self, out, why: str) -> None:
        try:
            self.hv.rollback(out)
        except (libvirt.libvirtError, HypervisorError, OSError) as exc:
            raise HypervisorError(f"{why}; and restoring {out.offer.vm_name} here failed: {exc}") from None

    def _handoff(self, destination: str, offer: Offer) -> Reply:
        """Offer the domain to the destination's agent and wait for its answer."""
        arrived = threading.Event()
        box: list[Reply] = []
        with self._lock:
            self._pending[offer.id] = (arrived, box)
        try:
            self.client.publish(offer_topic(destination), offer.encode(), qos=2)
            if not arrived.wait(self.handoff_timeout):
                raise HypervisorError(f"no agent for destination {destination} answered within "
                                      f"{self.handoff_timeout:g} s")
            return box[0]
        finally:
            with self._lock:
                self._pending.pop(offer.id, None)

    def _accept(self, offer: Offer) -> None:
        try:
            self.hv.accept(offer)
            self.owned.add(offer.vm_name)
            reply = Reply(offer.id, offer.vm_name, SUCCESS)
            log.info("%s: received %s from %s (%s)", self.host, offer.vm_name, offer.source, offer.migration_type)
        except (libvirt.libvirtError, HypervisorError, OSError) as exc:
            reply = Reply(offer.id, offer.vm_name, ERROR, str(exc))
        except Exception as exc:     # noqa: BLE001 - the source is waiting for an answer either way
            log.exception("%s: accepting %s failed", self.host, offer.vm_name)
            reply = Reply(offer.id, offer.vm_name, ERROR, f"{type(exc).__name__}: {exc}")
        self.client.publish(reply_topic(offer.source), reply.encode(), qos=1)
