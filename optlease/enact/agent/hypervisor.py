"""What one agent does to its own libvirt: start, stop, suspend, resume, repin, and both halves of a handoff migration.

Every method either succeeds or raises: libvirt.libvirtError (its message goes into the result's details as is) or
HypervisorError for a refusal of ours. Nothing here speaks MQTT.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import libvirt

from optlease.enact.fast import StopEntry, VmConfig
from optlease.enact.agent.handoff import Offer

STATE_NAMES = {
    libvirt.VIR_DOMAIN_NOSTATE: "no state", libvirt.VIR_DOMAIN_RUNNING: "running",
    libvirt.VIR_DOMAIN_BLOCKED: "blocked", libvirt.VIR_DOMAIN_PAUSED: "paused",
    libvirt.VIR_DOMAIN_SHUTDOWN: "shutting down", libvirt.VIR_DOMAIN_SHUTOFF: "shut off",
    libvirt.VIR_DOMAIN_CRASHED: "crashed", libvirt.VIR_DOMAIN_PMSUSPENDED: "pm-suspended",
}
UNDEFINED = "undefined"


class HypervisorError(RuntimeError):
    """A task this host refuses, said in one line."""


def quiet_libvirt() -> None:
    """Stop libvirt printing every error on stderr: the agent reports each one in a result instead."""
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


@dataclass
class Outgoing:
    """A domain on its way out of this host: the offer made for it, and where its saved image lies (warm)."""
    offer: Offer
    image_path: str | None = None


class Hypervisor:
    """The libvirt operations of one host, over one open connection (thread-safe, as libvirt connections are)."""

    def __init__(self, conn: libvirt.virConnect, shutdown_timeout: float = 30.0) -> None:
        self.conn = conn
        self.shutdown_timeout = shutdown_timeout

    # ------------------------------------------------------------------------------------------- inspection
    def capacity(self) -> tuple[int, int]:
        """(vcpus, memory in KiB) of the host, from virNodeGetInfo (which reports MiB)."""
        info = self.conn.getInfo()
        return int(info[2]), int(info[1]) * 1024

    def state(self, name: str) -> str:
        """The domain's state name, or `undefined` when this host does not know it (or no longer does once found)."""
        try:
            return self._state(self.conn.lookupByName(name))
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return UNDEFINED
            raise

    def list_vms(self) -> list[tuple[str, str]]:
        """(name, state name) of every domain this host knows, running or only defined. A domain that a task on
        another worker undefines between the listing and the reading of its state is gone: left out, not an error
        (which would lose the whole answer)."""
        out = []
        for dom in self.conn.listAllDomains(0):
            try:
                out.append((dom.name(), self._state(dom)))
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
        return sorted(out)

    def _domain(self, name: str) -> libvirt.virDomain:
        return self.conn.lookupByName(name)

    def _state(self, dom: libvirt.virDomain) -> str:
        return STATE_NAMES.get(dom.state()[0], "unknown")

    # --------------------------------------------------------------------------------------------- tasks
    def start(self, config: VmConfig) -> None:
        """Define from XML (or find by name), size it, start it. As migfra: memory sets both memory and maximum."""
        if config.transient:
            if config.xml is None:
                raise HypervisorError("a transient start needs the domain xml")
            if config.memory_kib is not None or config.vcpus is not None:
                raise HypervisorError("a transient domain takes its memory and vcpus from its xml")
            self.conn.createXML(config.xml, 0)
            return
        name = config.name
        if name and self.state(name) not in (UNDEFINED, "shut off"):
            raise HypervisorError(f"domain {name} is already {self.state(name)}")
        self._fits(config.vcpus, config.memory_kib)
        new = config.xml is not None and (not name or self.state(name) == UNDEFINED)
        dom = self.conn.defineXML(config.xml) if config.xml is not None else self._domain(name)
        try:
            if config.memory_kib is not None:
                dom.setMemoryFlags(config.memory_kib, libvirt.VIR_DOMAIN_AFFECT_CONFIG | libvirt.VIR_DOMAIN_MEM_MAXIMUM)
                dom.setMemoryFlags(config.memory_kib, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
            if config.vcpus is not None:
                dom.setVcpusFlags(config.vcpus, libvirt.VIR_DOMAIN_AFFECT_CONFIG | libvirt.VIR_DOMAIN_VCPU_MAXIMUM)
                dom.setVcpusFlags(config.vcpus, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        except OverflowError:
            # the wire allows an unsigned long; libvirt-python takes a signed one
            raise HypervisorError(f"memory {config.memory_kib} KiB or vcpus {config.vcpus} is too large") from None
        _state, max_kib, _kib, vcpus, _time = dom.info()
        try:
            self._fits(vcpus, max_kib)
        except HypervisorError:
            if new:
                dom.undefine()      # a domain this host cannot run is not left behind
            raise
        dom.create()

    def _fits(self, vcpus: int | None, memory_kib: int | None) -> None:
        """Refuse a domain larger than the whole host: no plan asks for one, so the request is absurd."""
        host_vcpus, host_kib = self.capacity()
        if vcpus is not None and vcpus > host_vcpus:
            raise HypervisorError(f"a domain of {vcpus} vcpus on a host of {host_vcpus}: refused")
        if memory_kib is not None and memory_kib > host_kib:
            raise HypervisorError(f"a domain of {memory_kib} KiB on a host of {host_kib} KiB: refused")

    def stop(self, entry: StopEntry) -> None:
        """Shut down (destroy when forced) and wait until off; then undefine if asked."""
        if not entry.vm_name:
            raise HypervisorError("stop entry names no vm-name")
        dom = self._domain(entry.vm_name)
        persistent = bool(dom.isPersistent())   # asked first: a transient domain is gone once it stops
        if dom.isActive():
            if entry.force:
                dom.destroy()
            else:
                dom.shutdown()
            self._wait_off(dom)
        elif not entry.undefine:
            raise HypervisorError(f"domain {entry.vm_name} is not running ({self._state(dom)})")
        if entry.undefine and persistent:
            flags = libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE if dom.hasManagedSaveImage(0) else 0
            dom.undefineFlags(flags)

    def _wait_off(self, dom: libvirt.virDomain) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while True:
            try:
                if not dom.isActive():
                    return
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    return          # a transient domain vanishes when it stops
                raise
            if time.monotonic() > deadline:
                raise HypervisorError(f"domain {dom.name()} did not shut down within {self.shutdown_timeout:g} s "
                                      f"(stop it with force: true)")
            time.sleep(0.1)

    def suspend(self, name: str) -> None:
        self._domain(name).suspend()

    def resume(self, name: str) -> None:
        self._domain(name).resume()

    def repin(self, name: str, vcpu_map: tuple[tuple[int, ...], ...]) -> None:
        """Pin vcpu i to the CPUs vcpu_map[i]."""
        dom = self._domain(name)
        host_cpus = self.conn.getCPUMap(0)[0]
        for vcpu, cpus in enumerate(vcpu_map):
            missing = [c for c in cpus if c >= host_cpus]
            if missing:
                raise HypervisorError(f"vcpu-map: CPU {missing[0]} does not exist on this host ({host_cpus} CPUs)")
            if not cpus:
                raise HypervisorError(f"vcpu-map: vcpu {vcpu} is pinned to no CPU")
            dom.pinVcpuFlags(vcpu, tuple(c in cpus for c in range(host_cpus)), libvirt.VIR_DOMAIN_AFFECT_CURRENT)

    # ------------------------------------------------------------------------- handoff migration: source side
    def export(self, name: str, migration_type: str, source: str,
               vcpu_map: tuple[tuple[int, ...], ...] | None = None) -> Outgoing:
        """Prepare the offer of a domain. Live and offline leave it untouched until release(); warm saves it now
        (the domain stops here, its image travels), so a failed handoff must rollback()."""
        dom = self._domain(name)
        state, persistent = self._state(dom), bool(dom.isPersistent())
        active = bool(dom.isActive())
        if migration_type == "offline" and active:
            raise HypervisorError(f"domain {name} is {state}: an offline migration moves only its definition; "
                                  f"stop it first or migrate it live or warm")
        if migration_type != "offline" and not active:
            raise HypervisorError(f"domain {name} is {state}: a {migration_type} migration needs a running domain; "
                                  f"use migration-type: offline")
        flags = libvirt.VIR_DOMAIN_XML_SECURE | (libvirt.VIR_DOMAIN_XML_INACTIVE if persistent else 0)
        xml = dom.XMLDesc(flags)
        wire_state = "paused" if state == "paused" else ("running" if active else "shut off")
        image, path = None, None
        if migration_type == "warm":
            fd, path = tempfile.mkstemp(prefix=f"optlease-{name}-", suffix=".save")
            os.close(fd)
            dom.save(path)
            with open(path, "rb") as f:
                image = f.read()
        offer = Offer(source=source, vm_name=name, migration_type=migration_type, xml=xml, state=wire_state,
                      persistent=persistent, image=image, vcpu_map=vcpu_map)
        return Outgoing(offer, path)

    def release(self, out: Outgoing) -> None:
        """The destination has the domain: remove it here."""
        try:
            try:
                dom = self._domain(out.offer.vm_name)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    return      # a transient domain saved for a warm migration is already gone
                raise
            if dom.isActive():
                dom.destroy()
            if out.offer.persistent:
                dom.undefine()
        finally:
            self._drop_image(out)

    def rollback(self, out: Outgoing) -> None:
        """The handoff failed: bring a warm-saved domain back as it was. Live and offline never left."""
        try:
            if out.image_path is not None:
                self.conn.restore(out.image_path)
                if out.offer.state == "paused":
                    self._domain(out.offer.vm_name).suspend()
        finally:
            self._drop_image(out)

    @staticmethod
    def _drop_image(out: Outgoing) -> None:
        if out.image_path is not None and os.path.exists(out.image_path):
            os.unlink(out.image_path)

    # ---------------------------------------------------------------------- libvirt's own migration (real hosts)
    def migrate_p2p(self, name: str, dest_uri: str, migration_type: str, rdma: bool, destination: str) -> None:
        """migfra's migration on hosts whose libvirtds reach each other: peer to peer, persistent on the
        destination, undefined here; live keeps running, warm pauses during the copy, offline moves the definition."""
        kind = {"live": libvirt.VIR_MIGRATE_LIVE, "offline": libvirt.VIR_MIGRATE_OFFLINE, "warm": 0}[migration_type]
        flags = libvirt.VIR_MIGRATE_PEER2PEER | libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE \
            | kind
        params = {libvirt.VIR_MIGRATE_PARAM_URI: f"rdma://{destination}-ib"} if rdma else {}
        self._domain(name).migrateToURI3(dest_uri, params, flags)

    # -------------------------------------------------------------------- handoff migration: destination side
    def accept(self, offer: Offer) -> None:
        """Make the offered domain exist here as it was there: offline defined, live started, warm restored."""
        if self.state(offer.vm_name) != UNDEFINED:
            raise HypervisorError(f"a domain named {offer.vm_name} already exists on this host")
        dom = None
        try:
            if offer.persistent:
                dom = self.conn.defineXML(offer.xml)
            if offer.migration_type == "live":
                if dom is None:
                    dom = self.conn.createXML(offer.xml, 0)
                else:
                    dom.create()
            elif offer.migration_type == "warm":
                self._restore(offer)
                dom = self._domain(offer.vm_name)
            if offer.state == "paused" and dom is not None and dom.isActive():
                dom.suspend()
            if offer.vcpu_map and dom is not None and dom.isActive():
                self.repin(offer.vm_name, offer.vcpu_map)
        except Exception:
            self._forget(offer.vm_name)
            raise

    def _restore(self, offer: Offer) -> None:
        if offer.image is None:
            raise HypervisorError("a warm handoff carries no saved image")
        fd, path = tempfile.mkstemp(prefix=f"optlease-{offer.vm_name}-", suffix=".save")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(offer.image)
            self.conn.restore(path)
        finally:
            os.unlink(path)

    def _forget(self, name: str) -> None:
        """Undo a half-accepted domain, so a failed handoff leaves this host as it found it."""
        try:
            dom = self._domain(name)
            if dom.isActive():
                dom.destroy()
            if dom.isPersistent():
                dom.undefine()
        except libvirt.libvirtError:
            pass
