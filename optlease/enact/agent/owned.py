"""Which domains an agent may touch: those it started or took in by migration, and those whose names the operator
told it to adopt (by default optlease's own names, so that a restarted agent still serves its leases' domains).
Anything else on the host (a domain an administrator runs, one named `test`) is not the agent's to stop, suspend,
migrate or list, whoever asks."""
from __future__ import annotations

import re
import threading

from optlease.enact.agent.hypervisor import HypervisorError

# optlease names every VM `lease-<lease id>-vm-<vnode>`
OPTLEASE_NAMES = r"lease-[0-9]+-vm-[0-9]+"


class Owned:
    """The names an agent manages (thread-safe: tasks run on worker threads)."""

    def __init__(self, adopt: str | None = OPTLEASE_NAMES) -> None:
        """`adopt`: a regular expression; domains whose whole name matches are managed too (None: none)."""
        self.adopt = re.compile(adopt) if adopt else None
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def mine(self, name: str) -> bool:
        with self._lock:
            if name in self._names:
                return True
        return self.adopt is not None and self.adopt.fullmatch(name) is not None

    def check(self, name: str) -> None:
        """Raise unless the agent manages this domain."""
        if not self.mine(name):
            raise HypervisorError(f"domain {name} is not managed by this agent (it did not start it, and its name "
                                  f"does not match the names it adopts)")

    def add(self, name: str) -> None:
        with self._lock:
            self._names.add(name)

    def drop(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)
