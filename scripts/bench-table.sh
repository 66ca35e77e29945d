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
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary (see BENCHMARKS.md, how to rerun)}"
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
for f in "$default_model" "$gemma"; do
  [ -f "$f" ] || { echo "bench-table: $f missing; run scripts/setup.sh --test-models" >&2; exit 1; }
done

commit="${KOSTANT_COMMIT:-$(git rev-parse --short HEAD)}"
if [ -z "${KOSTANT:-}" ]; then
  cargo build --release -q -p kostant
  KOSTANT=target/release/kostant
  git diff --quiet HEAD -- . 2>/dev/null || commit="$commit + uncommitted changes"
fi
export KOSTANT

if [ ! -f "$synth_3b" ]; then
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

load_start=$(load)
started=$(date -u '+%Y-%m-%d %H:%M')
table=$(ROUNDS="$rounds" THREADS="$threads" PROMPT=512 GEN=128 DEPTH=0 \
  scripts/bench-compare.sh "$default_model" "$gemma" "$synth_3b@${threads_3b// /,}")
finished=$(date -u '+%H:%M')
load_end=$(load)

block=$(mktemp)
trap 'rm -f "$block"' EXIT
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
} > "$block"

python3 - "$page" "$block" <<'PY'
import sys, textwrap
page, lines = sys.argv[1], open(sys.argv[2]).read().rstrip("\n").split("\n")
# Table rows stay whole; the notes are wrapped like the rest of the page.
block = "\n".join(l if l.startswith("|") else textwrap.fill(l, 100, break_long_words=False,
                                                            break_on_hyphens=False) for l in lines)
text = open(page).read()
head, rest = text.split("<!-- table:begin -->\n", 1)
_, tail = rest.split("<!-- table:end -->\n", 1)
open(page, "w").write(f"{head}<!-- table:begin -->\n{block}\n<!-- table:end -->\n{tail}")
PY
echo "bench-table: $page rewritten" >&2
