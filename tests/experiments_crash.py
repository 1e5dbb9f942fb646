"""A probe whose run kills its worker process (as the kernel's out-of-memory killer would), for the sweep tests:
`[accounting] probes: experiments_crash.KillsItsProcess`."""
from __future__ import annotations

import os

from optlease.accounting.collection import AccountingProbe


class KillsItsProcess(AccountingProbe):
    def __init__(self, accounting):
        super().__init__(accounting)
        os._exit(9)
