#!/usr/bin/env python3
"""Scores a feature's dev split as `kostant chat` answers it with a given repetition penalty:
each dev line through `kostant chat --feature F --temperature 0 --max-tokens 192 --no-history
--repeat-penalty P --prompt …` (its adapter on, as the app runs it), against the line's output.
Prints exact matches, mean chrF (character 1-6-grams, beta 2: a plain version, not the
report's) and how many replies loop (a run of 4 words repeated at once). Dev only: the test
splits are for the reports. The table in README.md ("Repetition penalty") came from it.

  python3 scripts/adapters/dev_sampling.py FEATURE PENALTY [KOSTANT_BINARY] [--no-adapter | --adapter FILE]

`--no-adapter` scores the feature's prompt alone (the report's "prompt only" column, on dev);
`--adapter FILE` a candidate adapter (a GGUF from `kostant adapter import`) in the shipped one's place.
"""
import collections
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import user_message  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def chrf(hyp, ref, n=6, beta=2.0):
    precisions, recalls = [], []
    for k in range(1, n + 1):
        h = collections.Counter(hyp[i:i + k] for i in range(len(hyp) - k + 1))
        r = collections.Counter(ref[i:i + k] for i in range(len(ref) - k + 1))
        matched = sum((h & r).values())
        if h:
            precisions.append(matched / sum(h.values()))
        if r:
            recalls.append(matched / sum(r.values()))
    p = sum(precisions) / len(precisions) if precisions else 0.0
    r = sum(recalls) / len(recalls) if recalls else 0.0
    return 0.0 if p + r == 0 else (1 + beta**2) * p * r / (beta**2 * p + r)


def loops(text):
    words = text.split()
    return any(words[i:i + 4] == words[i + 4:i + 8] for i in range(len(words) - 7))


def main():
    args = sys.argv[1:]
    prompt_only = "--no-adapter" in args
    candidate = None
    if "--adapter" in args:
        i = args.index("--adapter")
        candidate = args[i + 1]
        del args[i:i + 2]
    args = [a for a in args if a != "--no-adapter"]
    feature, penalty = args[0], args[1]
    binary = args[2] if len(args) > 2 else os.path.join(ROOT, "target/release/kostant")
    rows = [json.loads(line) for line in open(os.path.join(ROOT, "assets/adapters", feature, "dev.jsonl"))]
    exact = looping = 0
    total = 0.0
    for ex in rows:
        cmd = [binary, "chat", "--feature", feature, "--temperature", "0", "--max-tokens", "192",
               "--no-history", "--repeat-penalty", penalty, "--prompt", user_message(feature, ex)]
        if prompt_only:
            cmd.append("--no-adapter")
        elif candidate:
            cmd += ["--adapter", candidate]
        reply = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        ref = ex["output"].strip()
        exact += reply == ref
        total += chrf(reply, ref)
        looping += loops(reply)
    mode = "prompt only" if prompt_only else f"adapter {candidate}" if candidate else "adapter"
    print(f"{feature} ({mode}) penalty {penalty} n {len(rows)} exact {exact} chrF {total / len(rows):.3f} loops {looping}")


if __name__ == "__main__":
    main()
