#!/usr/bin/env bash
# Side-by-side speed of `kostant bench` and llama.cpp's `llama-bench` on the same GGUF files,
# same threads. The two are interleaved (one repetition of each, for every file and thread
# count, ROUNDS times) so a busy neighbour slows both alike; the table gives the means and
# their ratio, one row per file and thread count. Prints the Markdown table BENCHMARKS.md
# carries (scripts/bench-table.sh writes it there with the machine's description).
#
#   LLAMA_BENCH=/path/to/llama-bench [KOSTANT=/path/to/kostant] [ROUNDS=3] [THREADS="1 2"] \
#     [PROMPT=512] [GEN=128] [DEPTH=0] [RAW=FILE] \
#     scripts/bench-compare.sh [MODEL.gguf[@T1,T2] ...]
#
# MODEL.gguf@2 measures that file at 2 threads only; a file without @ uses THREADS. The
# default file is the default model. DEPTH=N starts every measurement after N tokens of
# context (llama-bench -d, kostant bench --depth): a later turn of a long chat. RAW=FILE
# appends every run's records there as JSON lines (file, threads, round, both tools' output).
# Without KOSTANT the release binary is built first. Progress goes to stderr.
#
# llama-bench is a reference built beside the project, never part of it.
set -euo pipefail
cd "$(dirname "$0")/.."
llama_bench="${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-1 2}"
prompt="${PROMPT:-512}"
gen="${GEN:-128}"
depth="${DEPTH:-0}"
kostant="${KOSTANT:-target/release/kostant}"
[ -n "${KOSTANT:-}" ] || cargo build --release -q -p kostant
[ "$#" -gt 0 ] || set -- models/SmolLM2-135M-Instruct.Q4_1.gguf
for spec in "$@"; do
  [ -f "${spec%@*}" ] || { echo "bench-compare: no model file ${spec%@*}" >&2; exit 1; }
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# One JSON line per measurement: the file, its thread count and round, kostant's report and
# llama-bench's records (one for the prompt test, one for the generation test).
record() {
  python3 -c 'import json, sys
file, t, r, ours, ref = sys.argv[1:]
print(json.dumps({"file": file, "threads": int(t), "round": int(r), "kostant": json.loads(ours),
                  "llama_cpp": [json.loads(l) for l in ref.splitlines() if l.strip()]}))' "$@"
}

for round in $(seq "$rounds"); do
  for spec in "$@"; do
    model="${spec%@*}"
    file_threads="$threads"
    [ "$model" = "$spec" ] || file_threads="${spec##*@}"
    for t in ${file_threads//,/ }; do
      echo "bench-compare: round $round/$rounds, $model, threads=$t" >&2
      ref=$("$llama_bench" -m "$model" -t "$t" -p "$prompt" -n "$gen" -d "$depth" -r 1 -o jsonl 2>/dev/null)
      ours=$("$kostant" bench --model "$model" --threads "$t" --ctx $((depth + prompt + gen + 16)) \
        --prompt-tokens "$prompt" --gen-tokens "$gen" --depth "$depth" --repetitions 1 --json)
      record "$model" "$t" "$round" "$ours" "$ref" >> "$log"
    done
  done
done
[ -z "${RAW:-}" ] || cat "$log" >> "$RAW"

python3 - "$log" "$prompt" "$gen" "$depth" <<'PY'
import json, os, sys
from collections import defaultdict
log, p, g, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
at = f" @ d{d}" if d else ""
runs = defaultdict(lambda: {"pp": [], "tg": [], "rpp": [], "rtg": [], "format": ""})
kernel_paths, builds, rounds = set(), set(), set()
for line in open(log):
    rec = json.loads(line)
    ours, r = rec["kostant"], runs[(rec["file"], rec["threads"])]
    r["format"] = ours["quantization"]
    r["pp"].append(ours["prefill_tok_s"]); r["tg"].append(ours["decode_tok_s"])
    for ref in rec["llama_cpp"]:
        (r["rpp"] if ref["n_gen"] == 0 else r["rtg"]).append(ref["avg_ts"])
        builds.add(ref.get("build_commit", "?"))
    kernel_paths.add(ours["cpu"]); rounds.add(rec["round"])
mean = lambda v: sum(v) / len(v)
pp, tg = f"pp{p}{at}", f"tg{g}{at}"
print(f"| model file | format | threads | {pp} kostant | {pp} llama.cpp | ratio "
      f"| {tg} kostant | {tg} llama.cpp | ratio |")
print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
for (file, t), r in runs.items():
    cells = [os.path.basename(file), r["format"], str(t)]
    for a, b in ((r["pp"], r["rpp"]), (r["tg"], r["rtg"])):
        cells += [f"{mean(a):.1f}", f"{mean(b):.1f}", f"{mean(a) / mean(b):.2f}x"]
    print("| " + " | ".join(cells) + " |")
print()
print(f"tok/s are means of {len(rounds)} interleaved rounds (one repetition of each tool per round); "
      f"ratio = kostant / llama.cpp; format = the type holding most of the layers' weight bytes. "
      f"kostant's kernel path: "
      + ", ".join(f"`{k}`" for k in sorted(kernel_paths))
      + "; llama.cpp build " + ", ".join(f"`{b}`" for b in sorted(builds)) + ".")
PY
