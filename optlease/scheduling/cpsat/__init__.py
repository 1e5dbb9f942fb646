"""The CP-SAT round model: one constraint-optimization problem per scheduling round.

`solve_round` (solve.py) is the entry point. Importing this package loads no solver: prepare.py, decode.py and
objective.py load none either and are shared with the MIP cross-check, which must run HiGHS where OR-Tools' own
HiGHS is not loaded.
"""
