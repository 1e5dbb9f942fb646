"""Leases whose neighbourhoods are equal share one tuple (round_snapshot), and the round's steps key their work by
that tuple's identity (candidate lists, pools, splits): the model must be the one that equal copies give."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

from conftest import REPO
from optlease.scheduling import cpsat_round
from optlease.scheduling.cpsat.decode import add_hint
from optlease.scheduling.cpsat.prepare import prepare
from optlease.scheduling.cpsat.solve import build_round
from optlease.scheduling.cpsat.window import hold_outside
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.snapshot import RoundSnapshot


def _bench():
    spec = importlib.util.spec_from_file_location("bench_round", REPO / "scripts" / "bench_round.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _model_bytes(snap: RoundSnapshot, options, hint, tmp_path) -> bytes:
    data = prepare(snap, options.weights, options.lookahead)
    search, _ = hold_outside(data, hint, options.window)
    rm, objective = build_round(search)
    rm.model.minimize(objective)
    add_hint(rm, hint)
    path = tmp_path / "model.pb"
    rm.model.export_to_file(str(path))
    return path.read_bytes()


def test_a_shared_neighbourhood_gives_the_model_of_equal_copies(tmp_path, monkeypatch):
    """A round of 144 busy nodes and 50 queued leases (scripts/bench_round.py): the leases' neighbourhoods are one
    tuple; the same round with each lease given its own equal copy builds the same model, hint included."""
    got = []
    plan = cpsat_round.CpsatRound._plan

    def capture(snap, options, hint, data):
        got.append((snap, options, hint))
        return plan(snap, options, hint, data)

    monkeypatch.setattr(cpsat_round.CpsatRound, "_plan", staticmethod(capture))
    _bench().one_round(144, 50, 1, SchedulingOptions(backfilling="aggressive", mapper="cpsat"))
    snap, options, hint = got[-1]
    shared = [lease.allowed_nodes for lease in snap.leases if lease.allowed_nodes]
    assert len(shared) >= 40 and len({id(nodes) for nodes in shared}) < len(shared) / 10   # shared, not copied
    assert _model_bytes(snap, options, hint, tmp_path) == _model_bytes(_copied(snap), options, hint,
                                                                         tmp_path)
    # two neighbourhoods, each one tuple, against the same lists as a copy per lease: a step that mixed up lists by
    # identity would give some lease the other list's nodes
    wide = max(shared, key=len)
    narrow = wide[:len(wide) // 2]
    two = replace(snap, leases=tuple(replace(lease, allowed_nodes=(wide, narrow)[i % 2]) if lease.allowed_nodes
                                     else lease for i, lease in enumerate(snap.leases)))
    data = prepare(two, options.weights, options.lookahead)
    for job in data.tails:
        if job.allowed:   # every node of the bench holds every VM: its candidates are its neighbourhood
            assert all(nodes == tuple(sorted(job.allowed)) for nodes in job.candidates), job.id
    assert _model_bytes(two, options, hint, tmp_path) == _model_bytes(_copied(two), options, hint,
                                                                        tmp_path)


def _copied(snap: RoundSnapshot) -> RoundSnapshot:
    """The snapshot with each lease's neighbourhood a copy of its own (equal lists, no tuple shared)."""
    out = replace(snap, leases=tuple(replace(lease, allowed_nodes=tuple(list(lease.allowed_nodes)))
                                     for lease in snap.leases))
    assert len({id(lease.allowed_nodes) for lease in out.leases if lease.allowed_nodes}) == \
        sum(1 for lease in out.leases if lease.allowed_nodes)
    return out
