#!/usr/bin/env bash
# Side-by-side speed of `kostant bench` and llama.cpp's `llama-bench` on the same GGUF, same
# threads. The two are interleaved (one repetition of each, ROUNDS times) so a busy neighbour
# slows both alike; the table gives the means and their ratio. Prints the Markdown table that
# BENCHMARKS.md carries.
#
#   LLAMA_BENCH=/path/to/llama-bench [ROUNDS=3] [THREADS="1 2"] [PROMPT=512] [GEN=128] \
#     [DEPTH=0] scripts/bench-compare.sh [MODEL.gguf]
#
# DEPTH=N starts every measurement after N tokens of context (llama-bench -d, kostant bench
# --depth): a later turn of a long chat.
#
# llama-bench is a reference built beside the project, never part of it.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
llama_bench="${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-1 2}"
prompt="${PROMPT:-512}"
gen="${GEN:-128}"
depth="${DEPTH:-0}"
kostant="${KOSTANT:-target/release/kostant}"
[ -n "${KOSTANT:-}" ] || cargo build --release -q -p kostant
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for _ in $(seq "$rounds"); do
  for t in $threads; do
    ref=$("$llama_bench" -m "$model" -t "$t" -p "$prompt" -n "$gen" -d "$depth" -r 1 -o jsonl 2>/dev/null)
    ours=$("$kostant" bench --model "$model" --threads "$t" --ctx $((depth + prompt + gen + 16)) \
      --prompt-tokens "$prompt" --gen-tokens "$gen" --depth "$depth" --repetitions 1 --json)
    printf '%s\t%s\t%s\n' "$t" "$ours" "$(echo "$ref" | tr '\n' ' ')" >> "$log"
  done
done

python3 - "$log" "$prompt" "$gen" "$depth" <<'PY'
import json, sys
from collections import defaultdict
log, p, g, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
at = f" @ d{d}" if d else ""
runs = defaultdict(lambda: {"pp": [], "tg": [], "rpp": [], "rtg": []})
for line in open(log):
    t, ours, ref = line.rstrip("\n").split("\t")
    ours = json.loads(ours)
    r = runs[int(t)]
    r["pp"].append(ours["prefill_tok_s"]); r["tg"].append(ours["decode_tok_s"])
    for rec in ref.replace("} {", "}\n{").splitlines():
        rec = json.loads(rec)
        (r["rpp"] if rec["n_gen"] == 0 else r["rtg"]).append(rec["avg_ts"])
mean = lambda v: sum(v) / len(v)
print("| threads | test | kostant tok/s | llama.cpp tok/s | ratio |")
print("|---|---|---|---|---|")
for t in sorted(runs):
    r = runs[t]
    for name, a, b in ((f"pp{p}{at}", r["pp"], r["rpp"]), (f"tg{g}{at}", r["tg"], r["rtg"])):
        print(f"| {t} | {name} | {mean(a):.1f} | {mean(b):.1f} | {mean(a)/mean(b):.2f}x |")
PY
