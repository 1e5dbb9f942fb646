"""A wide lease's VMs cost no entry each: a lease whose VMs ask alike holds one vector and a count (AlikeVMs), a
reservation that places vnodes 1..n holds its pnodes in vnode order (Placement), and both read exactly as the dict
they stand for; a simulated generated workload keeps them (its schedule is checked by tests/test_schedule_hashes.py
and scripts/bench_scale.py --hashes)."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from optlease.engine.run import simulate
from optlease.formats.config import load_config
from optlease.scheduling.records import AlikeVMs, OneVMEach, Placement, placement

from conftest import REPO

SHAPE = (100, 1024)


@pytest.mark.parametrize("compact, plain", [
    pytest.param(AlikeVMs(3, SHAPE), dict.fromkeys(range(1, 4), SHAPE), id="alike-vms"),
    pytest.param(AlikeVMs(1, SHAPE), {1: SHAPE}, id="alike-one-vm"),
    pytest.param(Placement((7, 7, 2, 9)), {1: 7, 2: 7, 3: 2, 4: 9}, id="placement"),
    pytest.param(Placement((5,)), {1: 5}, id="placement-one-vm"),
    pytest.param(OneVMEach((7, 2, 9, 4), SHAPE), {7: SHAPE, 2: SHAPE, 9: SHAPE, 4: SHAPE}, id="one-vm-each"),
    pytest.param(OneVMEach((3,), SHAPE), {3: SHAPE}, id="one-vm-on-one-node"),
])
def test_a_compact_mapping_reads_as_its_dict(compact, plain):
    assert len(compact) == len(plain)
    assert list(compact) == list(plain) and list(compact.keys()) == list(plain.keys())
    assert list(compact.values()) == list(plain.values())
    assert list(compact.items()) == list(plain.items())
    assert sorted(compact) == sorted(plain)
    assert dict(compact) == plain and compact == plain and plain == compact and not compact != plain
    for key in (0, 1, len(plain), len(plain) + 1, -1, "1", 1.0, None):
        assert (key in compact) == (key in plain), key
        assert compact.get(key, "none") == plain.get(key, "none"), key
    with pytest.raises(KeyError):
        compact[len(plain) + 1]
    assert compact != {**plain, len(plain) + 1: next(iter(plain.values()))}
    assert json.dumps(dict(compact)) == json.dumps(plain)
    # (a daemon's checkpoint and an experiment's results are pickled)
    assert pickle.loads(pickle.dumps(compact, protocol=pickle.HIGHEST_PROTOCOL)) == plain


def test_a_placement_is_built_only_for_vnodes_one_to_n_and_never_shares_the_callers_dict():
    given = {2: 8, 1: 4, 3: 4}
    placed = placement(given, 3)
    assert type(placed) is Placement and placed.pnodes == (4, 8, 4)
    given[1] = 99                    # the caller's dict may change afterwards
    assert placed[1] == 4
    assert placement(placed, 3) is placed
    partial = placement({2: 8}, 3)   # (an image copy of some of a lease's VMs)
    assert type(partial) is dict and partial == {2: 8}
    other = placement({1: 4, 5: 6}, 2)
    assert type(other) is dict and other == {1: 4, 5: 6}


def test_a_generated_workload_runs_on_compact_demands_and_mappings(tmp_path):
    lwf, conf = tmp_path / "g.lwf", tmp_path / "g.conf"
    subprocess.run([sys.executable, "-m", "optlease.cli.main", "generate-workload", "-o", str(lwf), "--conf",
                    str(conf), "--nodes", "64 CPU:100 Memory:1024", "--load", "0.9", "--horizon", "2:00:00:00",
                    "--seed", "3"], check=True, capture_output=True, cwd=REPO, timeout=120)
    result = simulate(load_config(conf))
    wide = [lease for lease in result.leases if lease.numnodes > 1]
    assert wide
    for lease in wide:
        # the reader gives a node-set's VMs one dict, and the lease holds one vector and a count
        assert len({id(vm) for vm in lease.req.vms}) == 1
        assert type(lease.demands) is AlikeVMs and lease.demands.n == lease.numnodes
    mappings = [rr.mapping for lease in wide for rr in lease.vmrrs]
    assert mappings and all(type(m) is Placement and len(m) > 1 for m in mappings)
    # no node holds two of these VMs: each reservation's demand is its nodes and the one vector
    demands = [rr.demand for lease in wide for rr in lease.vmrrs]
    assert all(type(d) is OneVMEach and d.nodes == rr.mapping.pnodes for lease in wide for rr, d in
               zip(lease.vmrrs, (rr.demand for rr in lease.vmrrs)))
    assert demands
