"""The job size and run-time distributions of Lublin and Feitelson's model of rigid parallel jobs (U. Lublin,
D. G. Feitelson, "The workload on parallel supercomputers: modeling the characteristics of rigid jobs", J. Parallel
Distrib. Comput. 63(11):1105-1122, 2003), with the paper's parameters for the whole sample (jobs not split into batch
and interactive). Pure: every draw comes from the `random.Random` passed in."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

# Job size: serial with SERIAL_PROB; otherwise log2(size) is two-stage uniform, on [ULOW, UMED] with UPROB and on
# [UMED, UHI] otherwise (UHI = log2 of the largest size, UMED = UHI - 2.5 as the paper advises), and the size is
# rounded to a power of two with POW2_PROB.
SERIAL_PROB = 0.244
POW2_PROB = 0.576
ULOW = 0.8
UMED_BELOW_UHI = 2.5
UPROB = 0.86
# Run time: log(runtime) is hyper-gamma, gamma(A1, B1) with probability p = PA * size + PB and gamma(A2, B2)
# otherwise (shape, scale); the negative PA makes wider jobs run longer.
A1, B1 = 4.2, 0.94
A2, B2 = 312.0, 0.03
PA, PB = -0.0054, 0.78
# The model's own cap: no job longer than exp(12) s (about 45 hours)
LOG_RUNTIME_CAP = 12.0


@dataclass(frozen=True)
class SizeModel:
    """The two-stage uniform of job sizes for a machine whose largest job has `largest` nodes."""
    largest: int

    @property
    def uhi(self) -> float:
        return math.log2(self.largest)

    @property
    def umed(self) -> float:
        # On small machines UHI - 2.5 falls below ULOW; the paper's advice then is a middle point (e.g. 1.5 for 8)
        return max(self.uhi - UMED_BELOW_UHI, (ULOW + self.uhi) / 2)

    def draw(self, rng: random.Random) -> int:
        if self.largest == 1 or rng.random() < SERIAL_PROB:
            return 1
        low, high = (ULOW, self.umed) if rng.random() < UPROB else (self.umed, self.uhi)
        u = rng.uniform(min(low, high), max(low, high))
        size = 2 ** round(u) if rng.random() < POW2_PROB else round(2 ** u)
        return max(1, min(self.largest, int(size)))


def runtime(rng: random.Random, size: int) -> int:
    """A run time in whole seconds (at least 1) for a job of `size` nodes."""
    p = min(1.0, max(0.0, PA * size + PB))
    log_runtime = rng.gammavariate(A1, B1) if rng.random() < p else rng.gammavariate(A2, B2)
    return max(1, int(round(math.exp(min(log_runtime, LOG_RUNTIME_CAP)))))
