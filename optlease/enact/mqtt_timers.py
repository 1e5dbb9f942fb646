"""The clock side of MqttEnactor: attempts and their deadlines, retries, backoff after failures, liveness probes.

Every attempt of a task gets a fresh id and a deadline; an attempt that is not answered in time is sent again (up to
`task_retries` times), but its id stays valid: a late success still settles the task, and an error answer to a
retry waits for the attempts before it. A task that failed is held back before it goes out again with the same
kind, VM and host, 1 s after the first failure and twice as long after each one since (at most BACKOFF_MAX), so a
lease manager that keeps asking for the impossible is slowed down, not obeyed ten times a second.

Liveness. migfra never publishes a status: the only sign that a host is alive is an answer. A probe is a `start vm`
with an empty `vm-configurations` list, which migfra (and the optlease agent) answer `Empty task container
executed.` with the id, whatever runs there. A host is probed when one of its tasks goes unanswered, when it has
been silent for half the host timeout, and every `task_timeout` while it is not alive; an alive host that does not
answer its probe within `task_timeout` is not alive any more, and the tasks waiting for it settle as timed out.
While the broker is away (we are not subscribed), no clock runs: deadlines, silences and probes wait for it, since
no host could have answered.
"""
from __future__ import annotations

import logging
import time

from optlease.enact import fast
from optlease.enact.base import VmTask

log = logging.getLogger("optlease.enact.mqtt")
TICK = 0.05          # seconds between timer checks
BACKOFF_FIRST = 1.0  # seconds a failed task waits before it goes out again; doubles with every failure since
BACKOFF_MAX = 60.0


def failure_key(task: VmTask) -> tuple:
    return task.kind, task.vm, task.host, task.destination


class Timers:
    """The timer methods of MqttEnactor (a mixin: its lock, tables, `_settled` and `_publish`)."""

    # ----------------------------------------------------------------------------------------------- attempts
    def _send(self, part, sends: list) -> None:
        """A new attempt: a fresh id and timer (earlier ids stay valid); out now if subscribed and not held back,
        else on a later tick (lock held)."""
        now = self.clock()
        if part.attempt == 0:
            count, until = self._failures.get(failure_key(part.job.task), (0, 0.0))
            if until > now:
                part.not_before = until
                log.info("%s %s on %s failed %d times: held back %.1f s", part.job.task.kind, part.job.task.vm,
                         part.host, count, until - now)
        part.id = fast.new_task_id()
        part.ids.add(part.id)
        part.attempt += 1
        part.deadline = max(now, part.not_before) + self.task_timeout
        self._pending[part.id] = part
        if self._ready.is_set() and part.not_before <= now:
            sends.append(part)
        else:
            self._unsent.append(part)

    def _forget(self, part) -> None:
        """A settled part: none of its ids is awaited any more (lock held)."""
        for i in part.ids:
            self._pending.pop(i, None)
        part.ids.clear()
        if part in self._unsent:
            self._unsent.remove(part)

    def _failed_again(self, task: VmTask, ok: bool) -> None:
        key = failure_key(task)
        if ok:
            self._failures.pop(key, None)
            return
        count = self._failures.get(key, (0, 0.0))[0] + 1
        self._failures[key] = (count, self.clock() + min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (count - 1)))

    # ---------------------------------------------------------------------------------------------- the tick
    def _tick_loop(self) -> None:
        while not self._closing:
            try:
                self._tick()
            except Exception:      # noqa: BLE001 - the timers must keep running
                log.exception("enactor timer failed")
            time.sleep(TICK)

    def _tick(self) -> None:
        sends: list = []
        probes: list[str] = []
        with self._lock:
            now = self.clock()
            elapsed, self._last_tick = now - self._last_tick, now
            if not self._ready.is_set():
                self._freeze(elapsed)
                return
            for part in {id(p): p for p in self._pending.values()}.values():
                if part.deadline > now or part.done:
                    continue
                if part.error is None and part.attempt <= self.task_retries:
                    log.warning("no result for %s %s on %s within %g s (%s); sending it again", part.job.task.kind,
                                part.job.task.vm, part.host, self.task_timeout, part.id)
                    if part in self._unsent:
                        self._unsent.remove(part)
                    self._send(part, sends)
                    probes.append(part.host)
                else:
                    self._give_up(part, sends)
            held = [p for p in self._unsent if p.not_before <= now]
            for part in held:
                self._unsent.remove(part)
            sends.extend(held)
            probes.extend(self._check_silence(now, sends))
        self._publish(sends)
        self._probe(probes)

    def _give_up(self, part, sends: list) -> None:
        if part.error is not None:
            part.result = part.error
        else:
            log.warning("%s %s on %s: no result after %d attempts", part.job.task.kind, part.job.task.vm,
                        part.host, part.attempt)
            part.timed_out = True
        self._forget(part)
        self._settled(part, sends)

    def _freeze(self, elapsed: float) -> None:
        """No broker: nobody could answer, so nothing counts as late (lock held)."""
        for part in {id(p): p for p in self._pending.values()}.values():
            part.deadline += elapsed
            part.not_before += elapsed if part.not_before else 0.0
        for probe in self._probes.values():
            probe[1] += elapsed
        for info in self._hosts.values():
            if info.alive:
                info.last_seen += elapsed

    # ------------------------------------------------------------------------------------------- liveness
    def _check_silence(self, now: float, sends: list) -> list[str]:
        """Hosts to probe now; hosts whose probe or host timeout ran out are not alive (lock held)."""
        for probe_id, (host, deadline) in list(self._probes.items()):
            if deadline <= now:
                del self._probes[probe_id]
                info = self._hosts.get(host)
                if info is not None and info.alive and now - info.last_seen >= self.task_timeout:
                    self._lost_host(info, f"no answer to a probe within {self.task_timeout:g} s", sends)
        probing = {host for host, _ in self._probes.values()}
        out = []
        for info in self._hosts.values():
            silence = now - info.last_seen
            if info.alive and self.host_timeout and silence > self.host_timeout:
                self._lost_host(info, f"silent for {silence:.1f} s", sends)
            if info.name in probing:
                continue
            if not info.alive and now - self._probed.get(info.name, -1e18) >= self.task_timeout:
                out.append(info.name)
            elif info.alive and self.host_timeout and silence > self.host_timeout / 2:
                out.append(info.name)
        return out

    def _lost_host(self, info, why: str, sends: list) -> None:
        info.alive = False
        self._hosts_version += 1
        log.warning("host %s: %s: not alive", info.name, why)
        for part in {id(p): p for p in self._pending.values() if p.host == info.name}.values():
            if not part.done:
                self._give_up(part, sends)

    def _probe(self, hosts) -> None:
        """Ask each host a question it answers with its id in every state (outside the lock)."""
        for host in dict.fromkeys(hosts):
            task = fast.StartVm((), id=fast.new_task_id())
            with self._lock:
                if any(h == host for h, _ in self._probes.values()):
                    continue
                self._probes[task.id] = [host, self.clock() + self.task_timeout]
                self._probed[host] = self.clock()
            try:
                self.client.publish(fast.task_topic(host), fast.encode_task(task, host), qos=1)
            except Exception as exc:      # noqa: BLE001 - a bad name must not stop the others
                log.warning("cannot probe %s: %s", host, exc)
