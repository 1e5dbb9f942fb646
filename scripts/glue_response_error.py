#!/usr/bin/env python3
"""How well the GLUE CE's EstimatedResponseTime predicts waits (JSON on stdout).

Simulates a configuration (the 1000requests Blue trace by default) and, at each instant a request arrives, takes
the EstimatedResponseTime optlease would publish then; it compares that with the wait the next 1-node best-effort
lease to arrive really had (its first start minus its arrival). Prints the mean absolute error, with the mean
estimate and the mean wait for scale.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from bisect import bisect_right
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optlease.domain.lease import LeaseKind  # noqa: E402
from optlease.engine.grid_state import ce_state  # noqa: E402
from optlease.engine.run import load_workload, simulate  # noqa: E402
from optlease.errors import InputError  # noqa: E402
from optlease.formats.config import load_config  # noqa: E402


def measure(conf: Path, tracefile: str | None = None) -> dict:
    cfg = load_config(conf)
    _, workload = load_workload(cfg, tracefile)
    arrivals = {r.arrival for r in workload.requests}
    published: list[tuple[int, int]] = []    # (instant, estimated response time)

    def observe(now: int, sched) -> None:
        if now in arrivals:
            published.append((now, ce_state(sched, now, "localhost", 0).estimated_response))

    result = simulate(cfg, tracefile, observe=observe)
    probes = sorted((lease.req.arrival, lease.first_start - lease.req.arrival) for lease in result.leases
                    if lease.kind is LeaseKind.BEST_EFFORT and lease.numnodes == 1 and lease.first_start is not None)
    times = [t for t, _ in probes]
    pairs = []
    for instant, estimate in published:
        i = bisect_right(times, instant)      # the next 1-node lease to arrive after this publication
        if i < len(probes):
            pairs.append((estimate, probes[i][1]))
    errors = [abs(e - w) for e, w in pairs]
    return {"configuration": conf.name, "publications": len(published), "compared": len(pairs),
            "mean_abs_error_s": round(statistics.fmean(errors), 1) if errors else None,
            "median_abs_error_s": statistics.median(errors) if errors else None,
            "mean_estimate_s": round(statistics.fmean(e for e, _ in pairs), 1) if pairs else None,
            "mean_wait_s": round(statistics.fmean(w for _, w in pairs), 1) if pairs else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--conf", type=Path, default=ROOT / "instances" / "blue" / "blue.conf")
    parser.add_argument("--tracefile", help="a trace to run instead of the configuration's")
    args = parser.parse_args()
    try:
        print(json.dumps(measure(args.conf, args.tracefile), indent=2))
    except InputError as exc:
        sys.exit(f"glue_response_error: {exc}")


if __name__ == "__main__":
    main()
