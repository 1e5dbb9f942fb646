#!/bin/sh
# The tuning set of cpsat's round (docs/quality-suite.md, models/cpsat-round.md): six generated workloads, made like
# the suite's synthetic family but with other seeds and mixes, written into tuning/ beside this file. Choices about
# the round (objective, wait guard, re-planning) are measured here; the suite reports on workloads that were not.
# Run from anywhere: OPTLEASE (default `optlease` on the PATH) names the command.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
optlease=${OPTLEASE:-optlease}
out="$here/tuning"
mkdir -p "$out"

gen() {   # NAME SEED OPTIONS...
    name=$1 seed=$2; shift 2
    "$optlease" generate-workload -o "$out/$name.lwf" --seed "$seed" --horizon 48:00:00 "$@" > /dev/null
}

gen t01-10n-load75    201 --nodes "10 CPU:100 Memory:2048" --load 0.75 --ar-share 0.15 --ar-notice 01:00:00 \
    --immediate-share 0.05 --overestimate 3 --premature-share 0.4
gen t02-20n-load90    202 --nodes "20 CPU:100 Memory:2048" --load 0.9  --ar-share 0.10 --ar-notice 02:00:00 \
    --immediate-share 0.10 --overestimate 4 --premature-share 0.6
gen t03-40n-load80    203 --nodes "40 CPU:100 Memory:2048" --load 0.8  --ar-share 0.20 --ar-notice 03:00:00 \
    --immediate-share 0.05 --overestimate 2 --premature-share 0.3
gen t04-64n-load85    204 --nodes "64 CPU:100 Memory:2048" --load 0.85 --ar-share 0.15 --ar-notice 04:00:00 \
    --immediate-share 0.10 --overestimate 3 --premature-share 0.5
gen t05-28n-hetero    205 --nodes "20 CPU:100 Memory:2048" --nodes "8 CPU:200 Memory:4096" --load 0.85 \
    --ar-share 0.10 --ar-notice 02:00:00 --immediate-share 0.15 --overestimate 3 --premature-share 0.5
gen t06-40n-hetero    206 --nodes "24 CPU:100 Memory:2048" --nodes "16 CPU:400 Memory:8192" --load 0.8 \
    --ar-share 0.20 --ar-notice 01:00:00 --immediate-share 0.10 --overestimate 2 --premature-share 0.4

cd "$out" && sha256sum -c --quiet "$here/TUNING-SHA256SUMS"
