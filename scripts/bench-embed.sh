#!/usr/bin/env bash
# Sentence-encoder throughput of kostant (`kostant bench --embed-texts`) against llama.cpp's
# `llama-embedding` on the same GGUF files, the same texts and the same threads, in tokens per
# second. The two run back to back (one run of each, for every file and thread count, ROUNDS
# times) so a busy neighbour slows both alike. Prints a Markdown table: the means, the spread
# (lowest–highest round) and the ratio kostant / llama-embedding.
#
#   [LLAMA_CPP_BIN=/work/ref/build512/bin] [KOSTANT=/path/to/kostant] [ROUNDS=3] \
#     [THREADS="1 2"] [TEXTS=FILE] [PASSES=2] [BATCH=1024] [RAW=FILE] \
#     scripts/bench-embed.sh [MODEL.gguf ...]
#
# Default files: models/all-MiniLM-L6-v2.F16.gguf and its Q8_0 copy
# (target/bench/all-MiniLM-L6-v2.Q8_0.gguf, written once by llama-quantize: `kostant quantize`
# also turns the position and token-type embeddings into Q8_0, which llama-embedding's graph
# cannot add, so both tools read llama-quantize's file). Default
# texts: the passages of the retrieval eval's documents as `kostant docs add` embeds them, one
# a line (`kostant bench --documents ... --dump-texts`), written to target/bench/.
#
# What is compared: the time spent running the encoder over the texts, tokenizing and model
# loading excluded on both sides. llama-embedding's is its own "prompt eval time" (the
# llama_perf line, printed at -lv 4; its start-up warm-up run is not counted), over a file
# holding the texts PASSES times; kostant's is the time of PASSES timed rounds over the texts
# after one untimed warm-up round. Both pack consecutive texts into passes of up to BATCH
# tokens (llama-embedding -b/-ub BATCH, kostant --embed-batch-tokens BATCH), each text
# attending only to itself.
# Each side's tokens/s uses its own token count (the table gives both; they should agree).
#
# llama-embedding is a reference built beside the project, never part of it (BENCHMARKS.md,
# "Rerunning the table").
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${LLAMA_CPP_BIN:-/work/ref/build512/bin}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-1 2}"
passes="${PASSES:-2}"
batch="${BATCH:-1024}"
kostant="${KOSTANT:-target/release/kostant}"
[ -x "$bin/llama-embedding" ] || { echo "bench-embed: no $bin/llama-embedding (set LLAMA_CPP_BIN)" >&2; exit 1; }
[ -n "${KOSTANT:-}" ] || cargo build --release -q -p kostant
mkdir -p target/bench
f16=models/all-MiniLM-L6-v2.F16.gguf
q8=target/bench/all-MiniLM-L6-v2.Q8_0.gguf
[ "$#" -gt 0 ] || set -- "$f16" "$q8"
for model in "$@"; do
  if [ "$model" = "$q8" ] && [ ! -f "$q8" ]; then
    [ -f "$f16" ] || { echo "bench-embed: $f16 missing; run scripts/setup.sh" >&2; exit 1; }
    "$bin/llama-quantize" "$f16" "$q8" Q8_0 >&2
  fi
  [ -f "$model" ] || { echo "bench-embed: no model file $model" >&2; exit 1; }
done
texts="${TEXTS:-target/bench/retrieval-passages.txt}"
if [ ! -f "$texts" ]; then
  "$kostant" bench --documents assets/evals/retrieval/documents --embedder "$1" --limit 1 \
    --dump-texts "$texts" --json > /dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$passes"); do cat "$texts"; done > "$work/texts"
log="$work/log"

for round in $(seq "$rounds"); do
  for model in "$@"; do
    for t in $threads; do
      echo "bench-embed: round $round/$rounds, $model, threads=$t" >&2
      ref=$("$bin/llama-embedding" -m "$model" -f "$work/texts" -t "$t" -tb "$t" -b "$batch" \
        -ub "$batch" -lv 4 --embd-output-format json 2>&1 >/dev/null | grep 'prompt eval time' || true)
      ours=$("$kostant" bench --embed-texts "$texts" --embedder "$model" --threads "$t" \
        --repetitions "$passes" --embed-batch-tokens "$batch" --json)
      python3 -c 'import json, re, sys
file, t, r, ours, ref = sys.argv[1:]
m = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", ref)
if not m:
    sys.exit(f"bench-embed: no timing line from llama-embedding ({ref!r})")
print(json.dumps({"file": file, "threads": int(t), "round": int(r), "kostant": json.loads(ours),
                  "llama_ms": float(m[1]), "llama_tokens": int(m[2])}))' \
        "$model" "$t" "$round" "$ours" "$ref" >> "$log"
    done
  done
done
[ -z "${RAW:-}" ] || cat "$log" >> "$RAW"

python3 - "$log" "$passes" <<'PY'
import json, os, sys
from collections import defaultdict
log, passes = sys.argv[1], int(sys.argv[2])
runs = defaultdict(lambda: {"ours": [], "ref": [], "tok": 0, "rtok": 0, "texts": 0})
paths, rounds = set(), set()
for line in open(log):
    rec = json.loads(line)
    ours, r = rec["kostant"], runs[(rec["file"], rec["threads"])]
    r["ours"].append(ours["tokens_per_s"])
    r["ref"].append(rec["llama_tokens"] * 1e3 / rec["llama_ms"])
    r["tok"], r["rtok"], r["texts"] = ours["tokens"], rec["llama_tokens"] // passes, ours["texts"]
    paths.add(ours["cpu"]); rounds.add(rec["round"])
mean = lambda v: sum(v) / len(v)
span = lambda v: f"{min(v):.0f}–{max(v):.0f}"
print("| encoder file | threads | kostant tok/s | llama-embedding tok/s | ratio |")
print("|---|--:|--:|--:|--:|")
for (file, t), r in runs.items():
    print(f"| {os.path.basename(file)} | {t} | {mean(r['ours']):.0f} ({span(r['ours'])}) "
          f"| {mean(r['ref']):.0f} ({span(r['ref'])}) | {mean(r['ours']) / mean(r['ref']):.2f}x |")
r = next(iter(runs.values()))
print()
print(f"Embedding throughput over {r['texts']} texts ({r['tok']} tokens by kostant's count, "
      f"{r['rtok']} by llama-embedding's), each embedded {passes} times per round, in passes of "
      f"up to the same number of tokens: means of {len(rounds)} back-to-back rounds, the lowest–"
      f"highest round in brackets; encoder time only (tokenizing and loading excluded), "
      f"llama-embedding's from its prompt eval time. kostant's kernel path: "
      + ", ".join(f"`{p}`" for p in sorted(paths)) + ".")
PY
