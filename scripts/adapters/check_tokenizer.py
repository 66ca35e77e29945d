#!/usr/bin/env python3
"""Checks that common.Tokenizer gives llama.cpp's ids (which the Rust engine's tokenizer tests
also hold it to): every case of engine/tests/fixtures/tokenizer_golden.json, with and without
special-token parsing, and the chat prompts of generation_golden.json. Also checks that the
system prompts in common.py still equal safety/src/features.rs + policy::TONE_RULES.

  PYTHONPATH=/tmp/adapters-py python3 scripts/adapters/check_tokenizer.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import ROOT, Tokenizer, check_prompts  # noqa: E402

check_prompts()
tok = Tokenizer()
fx = os.path.join(ROOT, "engine/tests/fixtures")
bad, n = 0, 0
for c in json.load(open(os.path.join(fx, "tokenizer_golden.json")))["cases"]:
    for key, special in (("ids_parse_special", True), ("ids_no_parse_special", False)):
        n += 1
        got = tok.encode(c["text"], parse_special=special)
        if got != c[key]:
            bad += 1
            print(f"MISMATCH {key} {c['text']!r}: {got} != {c[key]}")
for c in json.load(open(os.path.join(fx, "generation_golden.json")))["cases"]:
    n += 1
    got = tok.encode(c["prompt"])
    if got != c["prompt_ids"]:
        bad += 1
        print(f"MISMATCH prompt {c['prompt']!r}")
print(f"tokenizer: {n - bad}/{n} cases equal llama.cpp's ids; system prompts equal features.rs")
sys.exit(1 if bad else 0)
