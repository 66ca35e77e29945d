#!/usr/bin/env bash
# How often the shipped guard flags ordinary document prose read as a message: 30 passages of
# about 800 characters cut from the retrieval eval's documents (paragraphs joined up to 800
# characters, HTML tags dropped; a fixed random sample, seed 1), each screened with
# `kostant guard screen`. This is why the documents feature does not screen passages as input
# (docs/documents.md#safety). Usage: scripts/guard-on-passages.sh [KOSTANT_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
kostant="${1:-target/debug/kostant}"
export KOSTANT_MODEL="${KOSTANT_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
python3 - <<'PY' > target/guard-passages.txt
import os, random, re
d = 'assets/evals/retrieval/documents'
out = []
for f in sorted(os.listdir(d)):
    t = re.sub(r'<[^>]+>', '\n', open(os.path.join(d, f)).read())
    cur = ''
    for p in [p.strip() for p in re.split(r'\n\s*\n', t) if p.strip()]:
        if len(cur) + len(p) > 800 and cur:
            out.append(cur)
            cur = ''
        cur += ('\n' if cur else '') + re.sub(r'[ \t]+', ' ', p)
    if cur:
        out.append(cur)
random.seed(1)
for c in random.sample(out, 30):
    print(c.replace('\n', '\\n'))
PY
n=0 flagged=0
while IFS= read -r line; do
  text="$(printf '%b' "$line")"
  n=$((n + 1))
  if "$kostant" guard screen --text "$text" 2>/dev/null | tail -1 | grep -q '"flagged":true'; then
    flagged=$((flagged + 1))
  fi
done < target/guard-passages.txt
echo "flagged $flagged of $n passages"
