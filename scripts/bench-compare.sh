#!/usr/bin/env bash
# Side-by-side speed of `kostant bench` and llama.cpp's `llama-bench` on the same GGUF, same
# threads, run back to back. Prints the Markdown table that BENCHMARKS.md carries.
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench-compare.sh [MODEL.gguf]
#
# llama-bench is a reference built beside the project, never part of it. Run on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
llama_bench="${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
reps="${REPS:-3}"
cargo build --release -q -p kostant
kostant=target/release/kostant

printf '| threads | test | kostant tok/s | llama.cpp tok/s | ratio |\n|---|---|---|---|---|\n'
for t in 1 2; do
  ref=$("$llama_bench" -m "$model" -t "$t" -p 64,512 -n 128 -r "$reps" -o json 2>/dev/null)
  for p in 64 512; do
    ours=$("$kostant" bench --model "$model" --threads "$t" --prompt-tokens "$p" --gen-tokens 128 --repetitions "$reps" --json)
    python3 - "$t" "$p" "$ours" "$ref" <<'PY'
import json, sys
t, p, ours, ref = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
def theirs(n_prompt, n_gen):
    return next(r["avg_ts"] for r in ref if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen)
pp = theirs(p, 0)
print(f"| {t} | pp{p} | {ours['prefill_tok_s']:.1f} | {pp:.1f} | {ours['prefill_tok_s']/pp:.2f}x |")
if p == 64:
    tg = theirs(0, 128)
    print(f"| {t} | tg128 | {ours['decode_tok_s']:.1f} | {tg:.1f} | {ours['decode_tok_s']/tg:.2f}x |")
PY
  done
done
