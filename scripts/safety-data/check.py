#!/usr/bin/env python3
"""Sanity checks for the committed safety data. usage: check.py [repo_root]"""
import json, re, sys, os, collections
root = sys.argv[1] if len(sys.argv) > 1 else "."
CATS = {"violent_crimes", "non_violent_crimes", "sex_related_crimes", "child_sexual_exploitation", "defamation",
        "specialized_advice", "privacy", "intellectual_property", "indiscriminate_weapons", "hate", "suicide_self_harm",
        "sexual_content", "elections", "code_interpreter_abuse", "harassment"}
norm = lambda s: re.sub(r"\s+", " ", s.strip().lower())
files = {"train": "assets/safety/train.jsonl", "dev": "assets/safety/dev.jsonl",
         "test:harmful": "assets/evals/suites/harmful.jsonl", "test:benign_edgy": "assets/evals/suites/benign_edgy.jsonl",
         "test:benign_everyday": "assets/evals/suites/benign_everyday.jsonl", "test:provocation": "assets/evals/suites/provocation.jsonl"}
seen, ids, errs = {}, set(), []
for name, f in files.items():
    split = name.split(":")[0]
    n = 0
    for i, line in enumerate(open(os.path.join(root, f), encoding="utf-8")):
        r = json.loads(line); n += 1
        for k in ("id", "prompt", "label", "category", "source", "license"):
            if k not in r: errs.append((f, i, "missing " + k))
        if not r["prompt"].strip(): errs.append((f, i, "empty prompt"))
        if r["label"] not in ("safe", "unsafe"): errs.append((f, i, "bad label"))
        if r["label"] == "unsafe" and r["category"] not in CATS: errs.append((f, i, "bad category %r" % r["category"]))
        if r["label"] == "safe" and r["category"] is not None: errs.append((f, i, "safe with category"))
        if r["id"] in ids: errs.append((f, i, "dup id " + r["id"]))
        ids.add(r["id"])
        k = norm(r["prompt"])
        if k in seen and seen[k] != split: errs.append((f, i, "cross-split duplicate"))
        if k in seen and seen[k] == split: errs.append((f, i, "duplicate within split"))
        seen[k] = split
        if split != "test" and r["source"] in ("xstest", "sst"): errs.append((f, i, "test-only source outside test"))
    print("%-22s %5d lines" % (name, n))
for t in ("assets/evals/suites/jailbreak_templates.jsonl", "assets/safety/augment_templates.jsonl"):
    rows = [json.loads(l) for l in open(os.path.join(root, t), encoding="utf-8")]
    for r in rows:
        if ("{prompt}" in r["template"]) == ("{prompt_base64}" in r["template"]): errs.append((t, r["id"], "placeholder"))
    print("%-22s %5d templates" % (os.path.basename(t), len(rows)))
a = {json.loads(l)["template"] for l in open(os.path.join(root, "assets/safety/augment_templates.jsonl"))}
b = {json.loads(l)["template"] for l in open(os.path.join(root, "assets/evals/suites/jailbreak_templates.jsonl"))}
if a & b: errs.append(("templates", "-", "eval and augment templates overlap"))
print("perplexity.txt bytes:", os.path.getsize(os.path.join(root, "assets/evals/perplexity.txt")))
print("errors:", len(errs))
for e in errs[:30]: print("  ", e)
sys.exit(1 if errs else 0)
