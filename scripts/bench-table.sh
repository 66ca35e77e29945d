#!/usr/bin/env bash
# Measures kostant against llama.cpp's llama-bench on three files and rewrites the table at the
# top of BENCHMARKS.md (between its `table:begin` and `table:end` markers) with the machine it
# ran on: the default model, Gemma 3 270M (both from `scripts/setup.sh --test-models`) and a
# Llama-3.2-3B-shaped Q4_0 file written by `kostant synth`, at 1 and 2 threads, prefill of 512
# tokens and decode of 128, interleaved by scripts/bench-compare.sh.
#
#   LLAMA_BENCH=/path/to/llama-bench [KOSTANT=/path/to/kostant] [KOSTANT_COMMIT=abc1234] \
#     [ROUNDS=3] [THREADS="1 2"] [THREADS_3B="1 2"] [SYNTH_3B=FILE] [RAW=FILE] \
#     scripts/bench-table.sh
#
# Without KOSTANT the release binary is built from this checkout, and the table names its
# commit; with KOSTANT, KOSTANT_COMMIT names the commit that binary was built from (default:
# this checkout's). THREADS_3B="2" leaves the 3B file's slow 1-thread runs out. SYNTH_3B is
# where the 3B file lives (default target/bench/llama-3.2-3b-synth.Q4_0.gguf, about 1.9 GB;
# written once, reused after). RAW=FILE keeps the runs' JSON lines; keep it out of the
# repository. The table is written only when every run succeeded.
#
# Under it goes a second table, the documents feature's speed (issue 59): the sentence
# encoder's tokens/s against llama-embedding on models/all-MiniLM-L6-v2.F16.gguf
# (scripts/bench-embed.sh, same texts, threads and batches), the pages per minute to index
# and the query latency on the retrieval eval's documents (`kostant bench --documents`), and
# the same with the peak memory on a corpus of about 300 pages (the eval's documents copied
# under new names until they hold 750,000 characters of text). LLAMA_CPP_BIN is the directory
# of llama-embedding (default: LLAMA_BENCH's). DOCUMENTS=0 leaves the second table out;
# DOCUMENTS_ONLY=1 measures and rewrites only it (between its `documents:begin` and
# `documents:end` markers, added at the end of the table block when missing), so LLAMA_BENCH
# is not needed then.
set -euo pipefail
cd "$(dirname "$0")/.."
documents="${DOCUMENTS:-1}"
documents_only="${DOCUMENTS_ONLY:-0}"
[ "$documents_only" = 1 ] && documents=1
[ "$documents_only" = 1 ] ||
  : "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary (see BENCHMARKS.md, how to rerun)}"
llama_cpp_bin="${LLAMA_CPP_BIN:-$(dirname "${LLAMA_BENCH:-/work/ref/build512/bin/llama-bench}")}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-1 2}"
threads_3b="${THREADS_3B:-$threads}"
synth_3b="${SYNTH_3B:-target/bench/llama-3.2-3b-synth.Q4_0.gguf}"
default_model=models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=models/gemma-3-270m-Q4_K_M.gguf
page=BENCHMARKS.md

if ! grep -q '^<!-- table:begin -->$' "$page" || ! grep -q '^<!-- table:end -->$' "$page"; then
  echo "bench-table: $page lacks its table markers" >&2
  exit 1
fi
embedder=models/all-MiniLM-L6-v2.F16.gguf
needed=("$embedder")
[ "$documents_only" = 1 ] || needed+=("$default_model" "$gemma")
[ "$documents" = 1 ] || needed=("$default_model" "$gemma")
for f in "${needed[@]}"; do
  [ -f "$f" ] || { echo "bench-table: $f missing; run scripts/setup.sh --test-models" >&2; exit 1; }
done

commit="${KOSTANT_COMMIT:-$(git rev-parse --short HEAD)}"
if [ -z "${KOSTANT:-}" ]; then
  cargo build --release -q -p kostant
  KOSTANT=target/release/kostant
  git diff --quiet HEAD -- . 2>/dev/null || commit="$commit + uncommitted changes"
fi
export KOSTANT

if [ "$documents_only" != 1 ] && [ ! -f "$synth_3b" ]; then
  mkdir -p "$(dirname "$synth_3b")"
  "$KOSTANT" synth --shape llama-3.2-3b --quant Q4_0 --out "$synth_3b" >&2
fi

# What the table's note says about the machine: the CPU as /proc/cpuinfo names it, the
# AVX-512 subsets it has (they decide both engines' kernels), its CPU count, and the load.
cpu_description() {
  if [ -r /proc/cpuinfo ]; then
    local name family model flags vector
    field() { sed -n "s/^$1[[:space:]]*: //p" /proc/cpuinfo | head -1; }
    name=$(field 'model name')
    family=$(field 'cpu family')
    model=$(field 'model')
    flags=" $(field 'flags') "
    vector=$(tr ' ' '\n' <<<"$flags" | sed -n 's/^avx512_*//p' | tr '\n' ' ' | sed 's/ $//')
    if [ -n "$vector" ]; then vector="AVX-512 ($vector)"
    elif [[ "$flags" == *" avx2 "* ]]; then vector="AVX2, no AVX-512"
    else vector="no AVX2"; fi
    printf '%s (cpu family %s, model %s in /proc/cpuinfo), %s CPUs, %s' "$name" "$family" \
      "$model" "$(nproc)" "$vector"
  else
    printf '%s, %s CPUs' "$(uname -m)" "$(getconf _NPROCESSORS_ONLN)"
  fi
}
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }

block=$(mktemp)
docs_block=$(mktemp)
corpus=$(mktemp -d)
trap 'rm -rf "$block" "$docs_block" "$corpus"' EXIT

# The documents table: embedding throughput against llama-embedding (F16, THREADS), then
# indexing and queries on the eval's documents at each thread count, ROUNDS times, and once on
# the ~300-page corpus at the highest thread count, with its peak memory.
documents_table() {
  local eval_docs=assets/evals/retrieval/documents raw t r chars copies top
  raw=$(mktemp)
  ROUNDS="$rounds" THREADS="$threads" LLAMA_CPP_BIN="$llama_cpp_bin" KOSTANT="$KOSTANT" \
    scripts/bench-embed.sh "$embedder"
  echo
  for r in $(seq "$rounds"); do
    for t in $threads; do
      echo "bench-table: documents round $r/$rounds, threads=$t" >&2
      "$KOSTANT" bench --documents "$eval_docs" --embedder "$embedder" --threads "$t" --json |
        sed "s/^{/{\"corpus\":\"eval\",\"round\":$r,/" >> "$raw"
    done
  done
  chars=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text_chars"])' "$raw")
  copies=$(( (750000 + chars - 1) / chars ))
  for c in $(seq "$copies"); do
    for f in "$eval_docs"/*; do cp "$f" "$corpus/copy$c-$(basename "$f")"; done
  done
  top=$(tr ' ' '\n' <<<"$threads" | sort -n | tail -1)
  echo "bench-table: documents, $copies copies of the eval's documents, threads=$top" >&2
  "$KOSTANT" bench --documents "$corpus" --embedder "$embedder" --threads "$top" \
    --questions assets/evals/retrieval/questions.jsonl --json |
    sed "s/^{/{\"corpus\":\"copies\",\"copies\":$copies,\"round\":1,/" >> "$raw"
  python3 - "$raw" <<'PY'
import json, sys
from collections import defaultdict
recs = [json.loads(l) for l in open(sys.argv[1])]
runs = defaultdict(list)
for r in recs:
    runs[(r["corpus"], r["threads"])].append(r)
mean = lambda v: sum(v) / len(v)
def cell(rs, k, fmt="{:.0f}"):
    v = [r[k] for r in rs]
    s = fmt.format(mean(v))
    return s if len(v) == 1 else f"{s} ({fmt.format(min(v))}–{fmt.format(max(v))})"
print("| documents | threads | pages/min to index | query mean ms | query p95 ms | peak RSS MB |")
print("|---|--:|--:|--:|--:|--:|")
for (corpus, t), rs in sorted(runs.items()):
    r0 = rs[0]
    what = (f"retrieval eval, {r0['pages']:.0f} pages, {r0['questions']} questions"
            if corpus == "eval" else
            f"eval copied {r0['copies']}x, {r0['pages']:.0f} pages, {r0['passages']} passages")
    print(f"| {what} | {t} | {cell(rs, 'pages_per_min')} | {cell(rs, 'query_mean_ms', '{:.1f}')} "
          f"| {cell(rs, 'query_p95_ms', '{:.1f}')} | {cell(rs, 'peak_rss_mb')} |")
n = len({r["round"] for r in recs if r["corpus"] == "eval"})
print()
print(f"Documents: pages are characters of extracted text / 2,500 (no PDFs here); indexing is "
      f"`docs add`'s path (read, chunk, embed, seal, write) into a fresh sealed history; a query "
      f"opens the sealed rows, embeds the question and runs the hybrid search (k = 5), as "
      f"`docs search`; peak RSS is the process's, the index and the encoder resident. Eval rows: "
      f"means of {n} rounds, lowest–highest in brackets; the copied corpus ran once.")
PY
  rm -f "$raw"
}

load_start=$(load)
started=$(date -u '+%Y-%m-%d %H:%M')
table=""
[ "$documents_only" = 1 ] ||
  table=$(ROUNDS="$rounds" THREADS="$threads" PROMPT=512 GEN=128 DEPTH=0 \
    scripts/bench-compare.sh "$default_model" "$gemma" "$synth_3b@${threads_3b// /,}")
if [ "$documents" = 1 ]; then
  {
    echo "<!-- documents:begin -->"
    documents_table
    echo
    echo "Documents machine: $(cpu_description); kostant at \`$commit\`; $started–$(date -u '+%H:%M')" \
      "UTC, load average $load_start at the start and $(load) at the end."
    echo "<!-- documents:end -->"
  } > "$docs_block"
fi
finished=$(date -u '+%H:%M')
load_end=$(load)

if [ "$documents_only" = 1 ]; then
  python3 - "$page" "$docs_block" <<'PY'
import sys, textwrap
page, lines = sys.argv[1], open(sys.argv[2]).read().rstrip("\n").split("\n")
block = "\n".join(l if l.startswith(("|", "<!--")) else textwrap.fill(
    l, 100, break_long_words=False, break_on_hyphens=False) for l in lines)
text = open(page).read()
if "<!-- documents:begin -->\n" in text:
    head, rest = text.split("<!-- documents:begin -->\n", 1)
    _, tail = rest.split("<!-- documents:end -->\n", 1)
    text = f"{head}{block}\n{tail}"
else:
    head, tail = text.split("<!-- table:end -->\n", 1)
    text = f"{head}\n{block}\n<!-- table:end -->\n{tail}"
open(page, "w").write(text)
PY
  echo "bench-table: $page's documents table rewritten" >&2
  exit 0
fi

{
  echo "$table"
  echo
  echo "Machine: $(cpu_description). kostant at \`$commit\`; $started–$finished UTC, load" \
    "average $load_start at the start and $load_end at the end. \`$(basename "$synth_3b")\`" \
    "is \`kostant synth --shape llama-3.2-3b --quant Q4_0\` (random weights, a real 3B's" \
    "shape and size). Absolute tok/s move with the machine's load; the ratios hold better," \
    "since both tools ran in turn on the same load."
  [ "$threads_3b" = "$threads" ] || echo "The 3B file ran at $threads_3b threads only, to keep" \
    "the run short."
  if [ "$documents" = 1 ]; then echo; cat "$docs_block"; fi
} > "$block"

python3 - "$page" "$block" <<'PY'
import sys, textwrap
page, lines = sys.argv[1], open(sys.argv[2]).read().rstrip("\n").split("\n")
# Table rows stay whole; the notes are wrapped like the rest of the page.
block = "\n".join(l if l.startswith(("|", "<!--")) else textwrap.fill(l, 100, break_long_words=False,
                                                            break_on_hyphens=False) for l in lines)
text = open(page).read()
head, rest = text.split("<!-- table:begin -->\n", 1)
_, tail = rest.split("<!-- table:end -->\n", 1)
open(page, "w").write(f"{head}<!-- table:begin -->\n{block}\n<!-- table:end -->\n{tail}")
PY
echo "bench-table: $page rewritten" >&2
