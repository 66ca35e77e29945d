#!/usr/bin/env python3
"""Flags authored prompts that come close to a test prompt, before they join the data.

usage: near_test.py --xstest xstest_prompts.csv FILE...

A line is flagged when its word set overlaps a test prompt's by Jaccard >= 0.5 or its
characters match by difflib ratio >= 0.75. Test prompts: every prompt in
assets/evals/suites/*.jsonl plus the raw XSTest file (all of it is test). Flagged lines are
read by a person: a shared template on another subject ("What is X?") may stay; a reworded
test prompt must go. Exit status 0 always; the report goes to stdout.
"""
import argparse, csv, difflib, glob, json, os, re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def words(s):
    return set(re.findall(r"[a-z0-9']+", s.lower()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xstest", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    test = []
    for f in glob.glob(os.path.join(ROOT, "assets/evals/suites/*.jsonl")):
        for line in open(f, encoding="utf-8"):
            r = json.loads(line)
            if "prompt" in r:
                test.append(r["prompt"])
    with open(a.xstest, encoding="utf-8") as f:
        test += [r["prompt"] for r in csv.DictReader(f)]
    test = [(t, words(t)) for t in test]
    flagged = 0
    for fn in a.files:
        for line in open(fn, encoding="utf-8"):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            w = words(line)
            j, near = max(((len(w & tw) / max(1, len(w | tw)), t) for t, tw in test),
                          default=(0.0, ""))
            ratio = difflib.SequenceMatcher(None, line.lower(), near.lower()).ratio()
            if j >= 0.5 or ratio >= 0.75:
                flagged += 1
                print(f"{os.path.basename(fn)}\tjaccard {j:.2f}\tratio {ratio:.2f}\t{line}\t<->\t{near}")
    print(f"{flagged} flagged")


if __name__ == "__main__":
    main()
