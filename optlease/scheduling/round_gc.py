"""Python's cyclic garbage collector kept off the long-lived state while a round runs (a round's latency is what a
user waits for; a collection of the oldest generation walks every object the process holds, the slot table's
reservations and every lease, and at 5,000 nodes it fell in the round once per round), and while a simulation makes
its leases and runs (the workload, read before, lives to its end)."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def young_only() -> Iterator[None]:
    """While inside, the collector walks only the objects made inside: what is alive on entry is frozen
    (`gc.freeze`) and given back to the oldest generation on exit (`gc.unfreeze`). A collection of the oldest
    generation that falls due in the round walks the round's own objects; the walk over the long-lived state comes
    after the round, when the collector next asks for it (the time is moved out of the round, not removed). Left as
    it is where objects are frozen already (a caller's own freeze, a nested round) or the collector is off."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
