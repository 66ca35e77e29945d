#!/bin/bash
# Rounds of `kostant bench` without an adapter and with one under two binaries, in a shuffled
# order each round (so no binary always runs first), printing one line per run and then each
# binary's median ratio of decode (and prefill) with the adapter to without it.
#
#   [REPS=N] scripts/bench-adapter-ab.sh MODEL ADAPTER OLD_BIN NEW_BIN [ROUNDS] [PROMPT] [GEN]
#
# REPS: `kostant bench --repetitions` of each run (default 2).
# Numbers from it: docs/benchmarks-log.md, "One side-path call per input" and "The B stages in the
# matmul's tasks".
set -euo pipefail
model=$1 adapter=$2 old=$3 new=$4 rounds=${5:-8} prompt=${6:-4} gen=${7:-96} reps=${REPS:-2}
out=$(mktemp)
for i in $(seq "$rounds"); do
  for v in $(printf 'none\nold\nnew\n' | shuf); do
    case $v in
      none) bin=$new args=() ;;
      old) bin=$old args=(--adapter "$adapter") ;;
      new) bin=$new args=(--adapter "$adapter") ;;
    esac
    r=$("$bin" bench --model "$model" "${args[@]}" --prompt-tokens "$prompt" --gen-tokens "$gen" \
      --repetitions "$reps" --threads 2 --ctx 256 2>&1 | awk '/^(prefill|decode)/ {printf "%s ", $2}')
    echo "$i $v $r" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    i, v, pp, tg = line.split()
    runs[i][v] = (float(pp), float(tg))
for v in ("old", "new"):
    for k, name in ((1, "decode"), (0, "prefill")):
        r = [x[v][k] / x["none"][k] for x in runs.values() if len(x) == 3]
        print(f"{v} {name}: median ratio {statistics.median(r):.3f} over {len(r)} rounds")
PY
rm -f "$out"
