#!/bin/sh
# The quality suite's headroom: the clairvoyant offline schedule (`optlease optimize`'s model, every request known in
# advance) of each workload of a family, through `optlease compare --schedulers offline`, with the configuration
# that `run-experiments` wrote for the workload's aggressive-requested profile (its greedy run is the solver's
# hint). Each workload's offline data file goes to DATADIR/offline/WORKLOAD/offline.parquet, where
# scripts/quality_suite.py finds it beside the family's other runs.
#
#   instances/suite/run-offline.sh CONFDIR DATADIR [SECONDS]      (solver time limit, default 60)
set -eu
[ $# -ge 2 ] || { echo "usage: run-offline.sh CONFDIR DATADIR [SECONDS]" >&2; exit 2; }
confdir=$1 datadir=$2 limit=${3:-60}
optlease=${OPTLEASE:-optlease}
found=0
for conf in "$confdir"/aggressive-requested_*.conf; do
    [ -f "$conf" ] || continue
    found=1
    name=$(basename "$conf" .conf); name=${name#aggressive-requested_}
    out="$datadir/offline/$name"
    if [ -f "$out/offline.parquet" ]; then echo "$name: done before"; continue; fi
    if "$optlease" compare -c "$conf" --schedulers offline --offline-time-limit "$limit" -o "$out" > /dev/null 2>&1
    then echo "$name: done"; else echo "$name: FAILED (optlease compare -c $conf --schedulers offline)"; fi
done
[ $found = 1 ] || { echo "run-offline.sh: no aggressive-requested_*.conf in $confdir" >&2; exit 2; }
