"""How MqttEnactor turns a VmTask into FAST wire messages and settles it: a task is a job of one or more parts
(a swap sent as two migrations; a paused VM resumed before migfra stops or migrates it), sent in stages, and the
tasks of one submit() go out in waves, wave k once every task of wave k-1 succeeded (a wave that fails leaves the
later ones unsent: their outcomes say `skipped`). What a successful task changes is recorded in `running()`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from optlease.enact import fast
from optlease.enact.base import MIGRATE, RESUME, START, STOP, SUSPEND, TaskOutcome, VmTask


def minimal_domain_xml(task: VmTask, domain_type: str = "kvm") -> str:
    """A bare domain for a start task: name, memory, vcpus (libvirt's test driver takes it with type `test`)."""
    memory_kib = max(task.memory_mb, 1) * 1024
    return (f"<domain type='{domain_type}'>\n  <name>{task.vm}</name>\n  <memory unit='KiB'>{memory_kib}</memory>\n"
            f"  <vcpu>{task.vcpus}</vcpu>\n  <os><type>hvm</type></os>\n</domain>\n")


@dataclass
class Part:
    """One wire message of a job (a job is one VmTask; a swap sent as two migrations has two parts, and a paused VM
    is resumed before migfra stops or migrates it). Stage k goes out once every part of stage k-1 succeeded."""
    job: "Job"
    host: str
    build: Callable[[str], fast.Task]      # fresh id -> the task to publish
    stage: int = 0
    id: str = ""                           # the latest attempt's id
    ids: set[str] = field(default_factory=set)    # every attempt not yet answered: a late answer still counts
    attempt: int = 0
    deadline: float = 0.0                  # of the latest attempt
    not_before: float = 0.0                # held back until then (backoff after the same task failed)
    result: fast.Result | None = None
    error: fast.Result | None = None       # an attempt answered error: the part fails unless an earlier one succeeds
    timed_out: bool = False

    @property
    def done(self) -> bool:
        return self.result is not None or self.timed_out

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok


@dataclass
class Job:
    task: VmTask
    batch: "Batch"
    parts: list[Part] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Every part has its outcome, or a stage failed and what was sent of it is done."""
        for stage in sorted({p.stage for p in self.parts}):
            parts = [p for p in self.parts if p.stage == stage]
            if not all(p.done for p in parts):
                return False
            if not all(p.ok for p in parts):
                return True
        return True


@dataclass
class Batch:
    waves: list[list[Job]]
    index: int = 0


class Jobs:
    """The job side of MqttEnactor (a mixin: it uses its lock, tables, options and `_send`, `_failed_again`)."""

    # ---------------------------------------------------------------------------------------- building tasks
    def _job(self, task: VmTask, batch: Batch, paused: bool | None = None) -> Job:
        """The wire messages of one task. `paused`: whether the VM is paused (default: as far as we know)."""
        job = Job(task, batch)
        vm = task.vm

        def part(host: str, build: Callable[[str], fast.Task], stage: int = 0) -> None:
            job.parts.append(Part(job, host, build, stage))

        if paused is None:
            with self._lock:
                paused = self._running.get(vm, ("", ""))[1] == "paused"
        if task.kind == START:
            xml = self.domain_xml(task) if self.domain_xml is not None else None
            # probe-with-ssh: false: a real migfra would otherwise wait up to 60 s for SSH into the new domain
            config = fast.VmConfig(vm_name=None if xml else vm, xml=xml,
                                   memory_kib=task.memory_mb * 1024 if task.memory_mb else None, vcpus=task.vcpus,
                                   probe_with_ssh=False)
            part(task.host, lambda i: fast.StartVm((config,), id=i))
        elif task.kind == STOP:
            # migfra stops only a RUNNING domain: a paused one is resumed first, then destroyed at once
            entry = fast.StopEntry(vm, force=task.force or self.stop_force or paused, undefine=True)
            if paused:
                part(task.host, lambda i: fast.ResumeVm((vm,), id=i))
            part(task.host, lambda i: fast.StopVm((entry,), id=i), stage=int(paused))
        elif task.kind == SUSPEND:
            part(task.host, lambda i: fast.SuspendVm((vm,), id=i))
        elif task.kind == RESUME:
            part(task.host, lambda i: fast.ResumeVm((vm,), id=i))
        elif task.kind == MIGRATE:
            dest, mtype = task.destination, task.migration_type
            if task.swap_with is not None and self.swap_with:
                swap = fast.SwapWith(task.swap_with)
                part(task.host, lambda i: fast.MigrateVm(vm, dest, mtype, swap_with=swap, id=i))
            elif task.swap_with is not None:      # the partner moves back in the same wave
                other = task.swap_with
                part(task.host, lambda i: fast.MigrateVm(vm, dest, mtype, id=i))
                part(dest, lambda i: fast.MigrateVm(other, task.host, mtype, id=i))
            else:
                # migfra migrates only a RUNNING domain: a suspended image is resumed, moved, suspended again
                if paused:
                    part(task.host, lambda i: fast.ResumeVm((vm,), id=i))
                part(task.host, lambda i: fast.MigrateVm(vm, dest, mtype, id=i), stage=int(paused))
                if paused:
                    part(dest, lambda i: fast.SuspendVm((vm,), id=i), stage=2)
        else:
            raise ValueError(f"unknown task kind {task.kind!r}")
        return job

    # ------------------------------------------------------------------------------------ waves and stages
    def _start_wave(self, batch: Batch, sends: list[Part]) -> None:
        """Send the first stage of every job of the batch's current wave (lock held)."""
        for job in batch.waves[batch.index]:
            for part in job.parts:
                if part.stage == 0:
                    self._send(part, sends)

    def _settled(self, part: Part, sends: list[Part]) -> None:
        """A part has its result or has timed out: settle its job, then its wave (lock held)."""
        job = part.job
        if part.ok and any(p.stage == part.stage + 1 for p in job.parts):
            if all(p.ok for p in job.parts if p.stage == part.stage):
                for later in job.parts:
                    if later.stage == part.stage + 1:
                        self._send(later, sends)
            return
        if not job.settled:
            return
        ok = all(p.ok for p in job.parts)
        details = "; ".join(d for d in (self._details(p) for p in job.parts) if d)
        timed_out = any(p.timed_out for p in job.parts)
        self._outcomes.append(TaskOutcome(job.task, ok, details, timed_out))
        if self.on_outcome is not None:
            self.on_outcome()
        self._failed_again(job.task, ok)
        if ok:
            self._record(job.task)
        batch = job.batch
        wave = batch.waves[batch.index]
        if not all(j.settled for j in wave):
            return
        wave_ok = all(o.ok for o in self._outcomes_of(wave))
        batch.index += 1
        if wave_ok and batch.index < len(batch.waves):
            self._start_wave(batch, sends)
            return
        if not wave_ok:
            for later in batch.waves[batch.index:]:
                for j in later:
                    self._outcomes.append(TaskOutcome(j.task, False, f"not sent: wave {batch.index - 1} failed",
                                                      skipped=True))
        self._batches.remove(batch)
        self._idle.notify_all()

    def _outcomes_of(self, wave: list[Job]):
        for job in wave:
            yield TaskOutcome(job.task, all(p.ok for p in job.parts))

    def _details(self, part: Part) -> str:
        if not part.done:
            return ""           # a later stage never sent: an earlier one failed
        if part.timed_out:
            return f"no result from {part.host} after {part.attempt} attempts of {self.task_timeout:g} s"
        assert part.result is not None
        if part.result.ok:
            return part.result.details
        return part.result.details or f"{part.host} answered {part.result.kind}"

    def _record(self, task: VmTask) -> None:
        vm = task.vm
        self._settles += 1
        if self._inventory:         # a listing asked before this result must not undo it (`_on_inventory`)
            self._settled_at.update((v, self._settles) for v in (vm, task.swap_with) if v)
        if task.kind == START:
            self._running[vm] = (task.host, "running")
        elif task.kind == STOP:
            self._running.pop(vm, None)
        elif task.kind == SUSPEND:
            self._running[vm] = (task.host, "paused")
        elif task.kind == RESUME:
            self._running[vm] = (task.host, "running")
        elif task.kind == MIGRATE:
            state = self._running.get(vm, (task.host, "running"))[1]
            if task.swap_with is not None:
                other = self._running.get(task.swap_with, (task.destination, "running"))[1]
                self._running[task.swap_with] = (task.host, other)
            self._running[vm] = (task.destination, state)
