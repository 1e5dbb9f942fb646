"""Probes of a user's own, loaded by dotted path (`[accounting] probes: accounting_probes.OddEven`) in the
accounting tests: the manual's chapter 10 example, and probes that fail in each hook."""
from __future__ import annotations

from optlease.accounting.collection import AccountingDataCollection, AccountingProbe


class OddEven(AccountingProbe):
    """The manual's example (a per-lease stat set at request), plus a per-run stat and a counter of its own."""

    def __init__(self, accounting):
        super().__init__(accounting)
        accounting.create_lease_stat("Odd or even?")
        accounting.create_stat("Leases seen")
        accounting.create_counter("Leases in the system", AccountingDataCollection.AVERAGE_NORMAL)

    def at_lease_request(self, lease):
        self.accounting.set_lease_stat("Odd or even?", lease.id, "odd" if lease.id % 2 else "even")

    def at_timestep(self, lease_scheduler):
        self.accounting.append_to_counter("Leases in the system", len(lease_scheduler.leases))

    def finalize_accounting(self):
        self.accounting.set_stat("Leases seen", len(self.accounting.lease_stats))


class FailsAtTimestep(AccountingProbe):
    def at_timestep(self, lease_scheduler):
        raise ZeroDivisionError("division by zero\nsecond line that must not be printed")


class FailsInConstructor(AccountingProbe):
    def __init__(self, accounting):
        super().__init__(accounting)
        accounting.create_counter("Broken", "AVERAGE_SOMETIMES")


class SetsUncreatedStat(AccountingProbe):
    def finalize_accounting(self):
        self.accounting.set_stat("never created", 1)


class NotAProbe:
    def __init__(self, accounting):
        pass
