#!/bin/sh
# The generated workloads of the quality suite (docs/quality-suite.md): `sh make-workloads.sh synthetic` writes the
# suite's synthetic family into synthetic/ beside this file, `sh make-workloads.sh tuning` cpsat's tuning set into
# tuning/. SET.workloads lists each set's workloads (name, seed, `optlease generate-workload` options); the same
# arguments and seed give the same bytes, which SHA256SUMS (synthetic) and TUNING-SHA256SUMS (tuning) check.
# Run from anywhere: OPTLEASE (default `optlease` on the PATH) names the command.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
optlease=${OPTLEASE:-optlease}
set=${1:-}
case $set in
    synthetic) sums="$here/SHA256SUMS" ;;
    tuning) sums="$here/TUNING-SHA256SUMS" ;;
    *) echo "make-workloads.sh: name the set: synthetic or tuning (got '$set')" >&2; exit 2 ;;
esac
out="$here/$set"
mkdir -p "$out"

gen() {   # NAME SEED OPTIONS...
    name=$1 seed=$2; shift 2
    "$optlease" generate-workload -o "$out/$name.lwf" --seed "$seed" --horizon 48:00:00 "$@" > /dev/null
}

. "$here/$set.workloads"

cd "$out" && sha256sum -c --quiet "$sums"
