#!/usr/bin/env python3
"""Checks assets/adapters/<feature>/{train,dev,test}.jsonl: every line is JSON with non-empty
string "input" and "output" (rewrite: also "tone"), no input repeats within or across splits,
and no word 8-gram (lower-cased, punctuation stripped) of a test or dev example's input or output
also occurs in a train example (for proofread, whose pairs share a clean source sentence by
design, the check runs on the clean outputs: no test/dev sentence shares an 8-gram with a train
sentence; for chat, on the inputs only). Exits 1 on any failure and prints the offending n-grams.

  python3 scripts/adapters/check_splits.py [FEATURE ...]
"""
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FEATURES = ["summarize", "proofread", "reply", "rewrite", "chat"]
N = 8


def grams(text):
    w = re.findall(r"[a-z0-9]+", text.lower())
    return {" ".join(w[i:i + N]) for i in range(len(w) - N + 1)}


def check(feature):
    d = os.path.join(ROOT, "assets/adapters", feature)
    if not os.path.exists(os.path.join(d, "train.jsonl")):
        print(f"{feature}: no data yet")
        return True
    ok, splits = True, {}
    for s in ("train", "dev", "test"):
        rows = []
        for n, line in enumerate(open(os.path.join(d, f"{s}.jsonl")), 1):
            ex = json.loads(line)
            need = ["input", "output"] + (["tone"] if feature == "rewrite" else [])
            if not all(isinstance(ex.get(k), str) and ex[k].strip() for k in need):
                print(f"{feature}/{s}.jsonl:{n}: missing one of {need}")
                ok = False
            rows.append(ex)
        splits[s] = rows
    inputs = [ex["input"] + "\x00" + ex.get("tone", "") for rows in splits.values() for ex in rows]
    if len(set(inputs)) != len(inputs):
        print(f"{feature}: repeated inputs")
        ok = False
    # Chat's outputs are the model's own replies and six fixed calm ones, shared by design:
    # its check is on the messages.
    fields = {"proofread": ["output"], "chat": ["input"]}.get(feature, ["input", "output"])
    train = set()
    for ex in splits["train"]:
        for f in fields:
            train |= grams(ex[f])
    for s in ("dev", "test"):
        shared = set()
        for ex in splits[s]:
            for f in fields:
                shared |= grams(ex[f]) & train
        if shared:
            ok = False
            print(f"{feature}: {s} shares {len(shared)} 8-grams with train, e.g. {sorted(shared)[:5]}")
    counts = ", ".join(f"{s} {len(r)}" for s, r in splits.items())
    print(f"{feature}: {counts}: {'ok' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    feats = sys.argv[1:] or FEATURES
    sys.exit(0 if all([check(f) for f in feats]) else 1)
