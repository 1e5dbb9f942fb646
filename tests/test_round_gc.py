"""The collector kept off the long-lived state while a round runs (round_gc): what is alive on entry is not walked
inside, is collected after, and a round leaves nothing frozen."""
from __future__ import annotations

import gc
import importlib.util
import weakref

import pytest
from conftest import REPO

from optlease.scheduling.round_gc import young_only


@pytest.fixture(autouse=True)
def nothing_frozen():
    """Each test starts with nothing frozen: a daemon made earlier in this process (tests of the Manager) froze
    what it had built at its start, for good, and a round then leaves the collector as it is."""
    gc.unfreeze()
    yield


class Cell:
    def __init__(self) -> None:
        self.me = self   # a cycle: only the cyclic collector frees it


def garbage_cycle() -> weakref.ref:
    """A cycle no one holds, and a weak reference that says whether it is still alive."""
    cell = Cell()
    return weakref.ref(cell)


def test_garbage_alive_on_entry_is_not_walked_inside_and_is_collected_after() -> None:
    gc.collect()
    thresholds = gc.get_threshold()
    # no automatic collection between the cycle's making and the freeze (the collector stays on): only the test's
    gc.set_threshold(10 ** 9)
    try:
        old = garbage_cycle()
        with young_only():
            young = garbage_cycle()
            gc.collect()
            assert old() is not None       # frozen: no collection inside walks it
            assert young() is None         # what the round makes is collected as usual
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert old() is None               # given back to the collector on exit
    finally:
        gc.set_threshold(*thresholds)


def test_a_callers_own_freeze_is_left_as_it_is() -> None:
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with young_only():
            assert gc.get_freeze_count() >= frozen
        assert gc.get_freeze_count() >= frozen   # not given back by the round: the caller's
    finally:
        gc.unfreeze()


def test_a_rounds_collections_walk_only_what_it_makes_and_it_leaves_nothing_frozen() -> None:
    """A cpsat round (scripts/bench_round.py's, 40 busy nodes and 12 queued leases): every collection that runs in
    it runs with the state alive before it frozen, and nothing stays frozen after it."""
    spec = importlib.util.spec_from_file_location("bench_round", REPO / "scripts" / "bench_round.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from optlease.scheduling.cpsat_round import CpsatRound

    seen: list[int] = []
    plan = CpsatRound.plan

    def watched(self, now: int) -> None:
        def note(phase, info):
            if phase == "start":
                seen.append(gc.get_freeze_count())
        gc.callbacks.append(note)
        try:
            plan(self, now)
        finally:
            gc.callbacks.remove(note)

    CpsatRound.plan = watched
    try:
        bench.one_round(40, 12, 0, bench.SchedulingOptions(backfilling="aggressive", mapper="cpsat"))
    finally:
        CpsatRound.plan = plan
    assert seen and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0
