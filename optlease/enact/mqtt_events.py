"""The broker's side of MqttEnactor: what it does when paho reports a connection, subscriptions, a lost broker, an
agent's status, a task's result or a host's inventory (`vms listed`). Runs on paho's network thread; nothing raises
out of it (`_guard`)."""
from __future__ import annotations

import logging

import paho.mqtt.client as mqtt

from optlease.enact import fast
from optlease.enact.base import HostInfo

log = logging.getLogger("optlease.enact.mqtt")


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
            sends, self._unsent = self._unsent, []
        self._publish(sends)
        self.request_inventory()

    def _on_disconnect(self, _client, _userdata, _flags, reason_code, _properties) -> None:
        self._ready.clear()
        if not self._closing:
            log.warning("lost MQTT broker %s (%s); reconnecting", self.broker, reason_code)

    def _seen(self, host: str) -> HostInfo:
        info = self._hosts.get(host)
        if info is None:
            info = self._hosts[host] = HostInfo(host)
        if not info.alive:
            log.info("host %s is %s", host, "back" if info.last_seen else "there")
        info.last_seen = self.clock()
        info.alive = True
        return info

    def _on_status(self, _client, _userdata, msg: mqtt.MQTTMessage) -> None:
        host, status = _read(msg, fast.parse_status, "a status message")
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
                    info.capacity = capacity
                if status.task == "init":
                    log.info("host %s announced itself (%s)", host, capacity)
        # an announcement, or a heartbeat from a host we had given up on: ask what it runs now
        if status.task == "init" or (status.task == "heartbeat" and not was_alive):
            self.request_inventory([host])

    def _on_result(self, _client, _userdata, msg: mqtt.MQTTMessage) -> None:
        host, result = _read(msg, fast.parse_result, "a result")
        if result is None:
            return
        sends: list = []   # the parts of later waves that this result lets go out
        if result.kind == fast.ListVms.result_kind:
            self._on_inventory(host, result)
            return
        with self._lock:
            self._seen(host)
            part = self._pending.get(result.id) if result.id is not None else None
            if part is None:
                log.info("result %s on %s matches no task under way (late, retried or not ours): dropped",
                         result.id, msg.topic)
                return
            if part.host != host:
                log.warning("result %s came from %s, but its task went to %s: dropped", result.id, host, part.host)
                return
            del self._pending[result.id]
            part.result = result
            if not result.ok:
                log.warning("%s %s on %s failed: %s", part.job.task.kind, part.job.task.vm, host,
                            result.details or result.kind)
            self._settled(part, sends)
        self._publish(sends)
        if not result.ok:
            self.request_inventory([host])      # after a failure, what the host runs is worth asking again

    def _on_inventory(self, host: str, result: fast.Result) -> None:
        """A host's answer to `list vms`: it replaces what we knew of that host, except for the VMs of tasks still
        under way there (their results, which may come later, say more). An `error` answer lists nothing: what we
        knew stands (read as an empty host, every domain there would look gone)."""
        with self._lock:
            if self._inventory.pop(str(result.id), None) != host:
                log.debug("a `vms listed` on %s answers nothing we asked: dropped", host)
                return
            self._seen(host)
            if not result.ok:
                log.warning("host %s could not list its domains: %s", host, result.details or "error")
                return
            busy = set()
            for part in self._pending.values():
                t = part.job.task
                if host in (part.host, t.destination):
                    busy.update(v for v in (t.vm, t.swap_with) if v)
            for vm, (where, _state) in list(self._running.items()):
                if where == host and vm not in busy:
                    del self._running[vm]
            for entry in result.vms:
                if entry.vm_name and entry.vm_name not in busy and entry.state is not None:
                    self._running[entry.vm_name] = (host, entry.state)
            self.listed[host] = self.clock()
        log.info("host %s runs %d domains", host, len(result.vms))


def _read(msg: mqtt.MQTTMessage, parse, what: str) -> tuple:
    """The host a message came from and what it says, or (None, None) when it cannot be read (logged, dropped)."""
    try:
        return fast.host_of_topic(msg.topic), parse(msg.payload)
    except fast.FastProtocolError as exc:
        log.warning("dropped %s on %s: %s", what, msg.topic, exc)
        return None, None
