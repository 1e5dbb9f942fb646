#!/bin/sh
# The quality suite's synthetic family (docs/quality-suite.md): ten workloads made by `optlease generate-workload`
# with fixed seeds, written into synthetic/ beside this file. The same arguments and seed give the same bytes, which
# SHA256SUMS checks. Run from anywhere: OPTLEASE (default `optlease` on the PATH) names the command.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
optlease=${OPTLEASE:-optlease}
out="$here/synthetic"
mkdir -p "$out"

gen() {   # NAME SEED NODES... -- OPTIONS...
    name=$1 seed=$2; shift 2
    "$optlease" generate-workload -o "$out/$name.lwf" --seed "$seed" --horizon 48:00:00 "$@" > /dev/null
}

# homogeneous sites, 8 to 64 nodes
gen s01-8n-load60     101 --nodes "8 CPU:100 Memory:2048"  --load 0.6  --ar-share 0.10 --ar-notice 01:00:00 \
    --immediate-share 0.05 --overestimate 2 --premature-share 0.3
gen s02-8n-load90     102 --nodes "8 CPU:100 Memory:2048"  --load 0.9  --ar-share 0.20 --ar-notice 00:30:00 \
    --immediate-share 0.10 --overestimate 3 --premature-share 0.5
gen s03-12n-load80    103 --nodes "12 CPU:100 Memory:2048" --load 0.8  --ar-share 0.15 --ar-notice 02:00:00 \
    --immediate-share 0.10 --overestimate 3 --premature-share 0.5
gen s04-16n-exact     104 --nodes "16 CPU:100 Memory:2048" --load 0.7  --ar-share 0.30 --ar-notice 04:00:00 \
    --immediate-share 0
gen s05-32n-load95    105 --nodes "32 CPU:100 Memory:2048" --load 0.95 --ar-share 0.10 --ar-notice 01:00:00 \
    --immediate-share 0.20 --overestimate 5 --premature-share 0.7
gen s06-64n-load70    106 --nodes "64 CPU:100 Memory:2048" --load 0.7  --ar-share 0.20 --ar-notice 06:00:00 \
    --immediate-share 0.05 --overestimate 2 --premature-share 0.3
# heterogeneous sites: node sets of different sizes, resource types only some nodes have
gen s07-24n-hetero    107 --nodes "16 CPU:100 Memory:2048" --nodes "8 CPU:200 Memory:4096" --load 0.8 \
    --ar-share 0.15 --ar-notice 02:00:00 --immediate-share 0.10 --overestimate 3 --premature-share 0.5
gen s08-32n-gpu       108 --nodes "24 CPU:100 Memory:2048" --nodes "8 CPU:100 Memory:4096 GPU:1" \
    --vm "CPU:100 Memory:1024" --vm "CPU:100 Memory:2048 GPU:1" --load 0.75 --ar-share 0.25 --ar-notice 03:00:00 \
    --immediate-share 0.05 --overestimate 4 --premature-share 0.6
gen s09-48n-hetero    109 --nodes "32 CPU:100 Memory:2048" --nodes "16 CPU:400 Memory:8192" --load 0.85 \
    --ar-share 0.10 --ar-notice 01:00:00 --immediate-share 0.15 --overestimate 2 --premature-share 0.4
gen s10-64n-hetero    110 --nodes "48 CPU:100 Memory:2048" --nodes "16 CPU:200 Memory:4096" --load 0.9 \
    --ar-share 0.10 --ar-notice 02:00:00 --immediate-share 0.15 --overestimate 4 --premature-share 0.6

cd "$out" && sha256sum -c --quiet "$here/SHA256SUMS"
