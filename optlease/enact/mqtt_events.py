"""The broker's side of MqttEnactor: what it does when paho reports a connection, subscriptions, a lost broker, an
agent's status, a task's result or a host's inventory (`vms listed`). Nothing raises out of it (`_guard`).

Messages are read off paho's network thread: it only checks the size, notes that the host spoke and queues the
payload; the reader thread parses it. So a hostile payload (an alias bomb, megabytes of YAML) can neither stall the
connection that keeps us subscribed nor hold back the signs of life of other hosts.
"""
from __future__ import annotations

import logging
import queue
import re

import paho.mqtt.client as mqtt

from optlease.enact import fast
from optlease.enact.base import MIGRATE, STOP, HostInfo

log = logging.getLogger("optlease.enact.mqtt")
INBOX = 1024        # messages waiting to be read; beyond, a flood is dropped (and logged) rather than queued
# libvirt's and migfra's words for a domain that is not there: a stop of it has reached its goal
_NOT_FOUND = re.compile(r"domain not found|no domain with matching (name|uuid)", re.IGNORECASE)
_WRONG_STATE = re.compile(r"wrong domain state", re.IGNORECASE)      # migfra: not RUNNING


class BrokerEvents:
    """The MQTT event handlers of MqttEnactor (a mixin: they use its lock, tables and `_settled`, `_publish`,
    `request_inventory`)."""

    def _guard(self, handler):
        def callback(*args) -> None:
            try:
                handler(*args)
            except Exception:      # noqa: BLE001 - paho's network thread must survive anything
                log.exception("enactor: failed to handle an MQTT event")
        return callback

    def _on_connect(self, client: mqtt.Client, _userdata, _flags, reason_code, _properties) -> None:
        if reason_code.is_failure:
            log.warning("MQTT broker %s refused the connection: %s", self.broker, reason_code)
            return
        _rc, self._sub_mid = client.subscribe([(fast.ALL_RESULTS, 1), (fast.ALL_STATUS, 1)])
        log.info("connected to MQTT broker %s", self.broker)

    def _on_subscribe(self, _client, _userdata, mid, reason_codes, _properties) -> None:
        if mid != self._sub_mid:
            return
        if any(rc.is_failure for rc in reason_codes):
            log.warning("MQTT broker %s refused our subscriptions: %s", self.broker, reason_codes)
            return
        self._ready.set()
        with self._lock:
            now = self.clock()
            sends = [p for p in self._unsent if p.not_before <= now]
            self._unsent = [p for p in self._unsent if p.not_before > now]
            hosts = list(self._hosts)
        self._publish(sends)
        self.request_inventory()
        self._probe(hosts)      # migfra never announces itself: a probe is how we learn that it is there

    def _on_disconnect(self, _client, _userdata, _flags, reason_code, _properties) -> None:
        self._ready.clear()
        if not self._closing:
            log.warning("lost MQTT broker %s (%s); reconnecting", self.broker, reason_code)

    def _seen(self, host: str) -> HostInfo:
        info = self._hosts.get(host)
        if info is None:
            info = self._hosts[host] = HostInfo(host)
            self._hosts_version += 1
        if not info.alive:
            log.info("host %s is %s", host, "back" if info.last_seen else "there")
            self._hosts_version += 1
        info.last_seen = self.clock()
        info.alive = True
        return info

    def _arrived(self, _client, _userdata, msg: mqtt.MQTTMessage) -> None:
        """On paho's network thread: nothing here may take long."""
        try:
            host = fast.host_of_topic(msg.topic)
        except fast.FastProtocolError as exc:
            log.warning("dropped a message: %s", exc)
            return
        if len(msg.payload) > fast.MAX_PAYLOAD_BYTES:
            log.warning("dropped %d bytes on %s: more than %d", len(msg.payload), msg.topic, fast.MAX_PAYLOAD_BYTES)
            return
        with self._lock:
            info = self._hosts.get(host)
            if info is not None and info.alive:
                info.last_seen = self.clock()    # it speaks: whatever it says, it is there
        try:
            self._inbox.put_nowait((msg.topic, bytes(msg.payload)))
        except queue.Full:
            log.warning("dropped a message on %s: %d messages wait to be read", msg.topic, INBOX)

    def _read_loop(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            topic, payload = item
            try:
                if topic.endswith("/status"):
                    self._on_status(topic, payload)
                else:
                    self._on_result(topic, payload)
            except Exception:      # noqa: BLE001 - the reader must survive anything a message does
                log.exception("enactor: failed to handle a message on %s", topic)

    def _on_status(self, topic: str, payload: bytes) -> None:
        host, status = _read(topic, payload, fast.parse_status, "a status message")
        if status is None:
            return
        with self._lock:
            was_alive = host in self._hosts and self._hosts[host].alive
            info = self._seen(host)
            if status.task in ("init", "heartbeat"):
                capacity = {}
                if status.vcpus is not None:
                    capacity["vcpus"] = status.vcpus
                if status.memory_kib is not None:
                    capacity["memory_mb"] = status.memory_kib // 1024
                if status.task == "init" or capacity:
                    self._hosts_version += info.capacity != capacity
                    info.capacity = capacity
                if status.task == "init":
                    log.info("host %s announced itself (%s)", host, capacity)
        # an announcement, or a heartbeat from a host we had given up on: ask what it runs now
        if status.task == "init" or (status.task == "heartbeat" and not was_alive):
            self.request_inventory([host])

    def _on_result(self, topic: str, payload: bytes) -> None:
        host, result = _read(topic, payload, fast.parse_result, "a result")
        if result is None:
            return
        if result.kind == fast.ListVms.result_kind:
            self._on_inventory(host, result)
            return
        sends: list = []   # the parts that this result lets go out
        with self._lock:
            probed = result.id is not None and self._probes.get(result.id, [None])[0] == host
            if probed:
                del self._probes[result.id]
                back = not self._hosts.get(host, HostInfo(host, alive=False)).alive
                self._seen(host)
        if probed:
            if back:
                self.request_inventory([host])      # a host heard again: what does it run now?
            return
        with self._lock:
            if result.id is None:
                self._unmatched(host, result)
                return
            part = self._pending.get(result.id)
            if part is None:
                log.info("result %s on %s matches no task under way (late, retried or not ours): dropped",
                         result.id, topic)
                return
            if part.host != host:
                log.warning("result %s came from %s, but its task went to %s: dropped", result.id, host, part.host)
                return
            self._seen(host)
            result = _gone_is_stopped(part, result)
            if result.ok:
                self._forget(part)
                part.result = result
                self._settled(part, sends)
            elif self._paused_after_all(part, result, sends):
                pass
            else:
                log.warning("%s %s on %s failed: %s", part.job.task.kind, part.job.task.vm, host,
                            result.details or result.kind)
                part.ids.discard(result.id)
                del self._pending[result.id]
                part.error = result
                if not part.ids:          # no earlier attempt may still succeed
                    self._give_up(part, sends)
        self._publish(sends)
        if not result.ok:
            self.request_inventory([host])      # after a failure, what the host runs is worth asking again

    def _paused_after_all(self, part, result: fast.Result, sends: list) -> bool:
        """migfra refused to stop or migrate a domain that is not RUNNING (`Wrong domain state`) which we did not
        know paused (after a restart, a migfra host cannot say what it runs): the task goes out again in stages,
        resume first. Once per task (lock held)."""
        job = part.job
        if job.task.kind not in (STOP, MIGRATE) or job.task.swap_with is not None or len(job.parts) > 1 \
                or not _WRONG_STATE.search(result.details):
            return False
        log.info("%s %s on %s: %s; resuming it first", job.task.kind, job.task.vm, part.host, result.details)
        self._forget(part)
        job.parts = self._job(job.task, job.batch, paused=True).parts
        for new in job.parts:
            new.job = job
            if new.stage == 0:
                self._send(new, sends)
        return True

    def _unmatched(self, host: str, result: fast.Result) -> None:
        """An answer without id: migfra's to what it cannot read. Only one is worth acting on: a migfra, which has
        no `list vms`, answering ours (lock held)."""
        self._seen(host)
        asked = [i for i, (h, _) in self._inventory.items() if h == host]
        if result.kind == "unknown" and "Unknown type of Task" in result.details and asked:
            for i in asked:
                del self._inventory[i]
            if host not in self.no_inventory:
                self.no_inventory.add(host)
                log.warning("host %s does not know `list vms` (a migfra without optlease's extension): what runs "
                            "there is known only from the tasks optlease sent it", host)
            self.listed[host] = self.clock()
            return
        line = (host, result.kind, result.details)
        (log.debug if line in self._said else log.warning)(
            "host %s answered %s without an id (it could not read a message): %s", host, result.kind,
            result.details or "no details")
        self._said.add(line)        # said once: another client asking the same thing again is no news

    def _on_inventory(self, host: str, result: fast.Result) -> None:
        """A host's answer to `list vms`: it replaces what we knew of that host, except for the VMs of tasks still
        under way there (their results, which may come later, say more). An `error` answer lists nothing: what we
        knew stands (read as an empty host, every domain there would look gone)."""
        with self._lock:
            asked_host, asked_at = self._inventory.pop(str(result.id), (None, 0))
            if asked_host != host:
                log.debug("a `vms listed` on %s answers nothing we asked: dropped", host)
                return
            # a task whose result came after we asked may have run after the host listed its domains (it runs each
            # task in a thread of its own): that result is newer than this listing
            late = {vm for vm, at in self._settled_at.items() if at > asked_at}
            self._prune_settled()
            self._seen(host)
            if not result.ok:
                log.warning("host %s could not list its domains: %s", host, result.details or "error")
                return
            busy = set()
            for part in self._pending.values():
                t = part.job.task
                if host in (part.host, t.destination):
                    busy.update(v for v in (t.vm, t.swap_with) if v)
            busy |= late
            for vm, (where, _state) in list(self._running.items()):
                if where == host and vm not in busy:
                    del self._running[vm]
            for entry in result.vms:
                if entry.vm_name and entry.vm_name not in busy and entry.state is not None:
                    self._running[entry.vm_name] = (host, entry.state)
            self.listed[host] = self.clock()
        log.info("host %s runs %d domains", host, len(result.vms))

    def _prune_settled(self) -> None:
        """Forget the tasks settled before every listing still under way was asked (lock held)."""
        oldest = min((at for _, at in self._inventory.values()), default=self._settles)
        for vm in [vm for vm, at in self._settled_at.items() if at <= oldest]:
            del self._settled_at[vm]


def _read(topic: str, payload: bytes, parse, what: str) -> tuple:
    """The host a message came from and what it says, or (None, None) when it cannot be read (logged, dropped)."""
    try:
        return fast.host_of_topic(topic), parse(payload)
    except fast.FastProtocolError as exc:
        log.warning("dropped %s on %s: %s", what, topic, exc)
        return None, None


def _gone_is_stopped(part, result: fast.Result) -> fast.Result:
    """A stop answered `domain not found`: the domain is not there, which is what the stop was for."""
    if part.job.task.kind != STOP or result.kind == "unknown" \
            or not all(v.ok or _NOT_FOUND.search(v.details or "") for v in result.vms):
        return result
    vms = tuple(v if v.ok else fast.VmResult(v.vm_name, fast.SUCCESS, f"already gone ({v.details})")
                for v in result.vms)
    return fast.Result(result.kind, vms, result.id)
