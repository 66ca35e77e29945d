#!/usr/bin/env python3
"""Content checks of assets/adapters/<feature>/{train,dev,test}.jsonl (check_splits.py does the
split checks). Fails (exit 1) on:

- a line that is not a JSON object, or an "input"/"output" that is not a non-empty string, or
  has leading/trailing whitespace; a key the feature does not use;
- rewrite: "tone" not one of common.REWRITE_TONES; "tone_line" other than false, or set on a
  tone other than "clearer"; a "shorter" output longer than 0.7 x its input (characters); an
  output whose digit strings differ from its input's (every number kept, none added);
- summarize and reply: a digit string in the output that is not in the input (nothing invented);
- reply: a reply whose language (a rough function-word guess: en, es, fr, de) differs from
  the message's;
- summarize: an input over 250 words;
- any example over 512 tokens as train.py renders it (only when `tokenizers` and `gguf` import,
  e.g. with PYTHONPATH=/tmp/adapters-py; otherwise this check is skipped and says so).

Prints, without failing: per-split stats (rewrite tones and bare "clearer" share, summarize input
lengths, reply non-English share) and, with -v, capitalised words of an output that its input
lacks (a hint of invented names; sentence starts and "I" are ignored).

  python3 scripts/adapters/check_data.py [-v] [FEATURE ...]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FEATURES, REWRITE_TONES, ROOT, render, user_message  # noqa: E402

KEYS = {
    "summarize": {"input", "output"},
    "reply": {"input", "output"},
    "rewrite": {"input", "output", "tone", "tone_line"},
    "proofread": {"input", "output", "source", "errors"},
    "chat": {"input", "output", "kind", "twin"},
}
MAX_TOKENS = 512
SHORTER_MAX = 0.7
NON_EN = {
    "es": {"que", "el", "la", "los", "las", "por", "para", "gracias", "hola", "muy", "pero", "está",
           "te", "tu", "un", "una", "del", "con", "lo", "se", "mi", "y", "hoy", "muchas", "qué", "estoy",
           "de", "le", "su", "ha"},
    "fr": {"je", "vous", "le", "la", "les", "est", "pour", "merci", "bonjour", "salut", "avec", "nous",
           "pas", "tu", "te", "des", "un", "une", "ce", "ça", "à", "et", "du", "au", "mon", "votre", "suis"},
    "de": {"ich", "und", "die", "der", "das", "ist", "nicht", "danke", "hallo", "wir", "mit", "du", "dir",
           "mich", "ein", "eine", "zu", "für", "bei", "auf", "dass", "bitte", "euch", "ihr", "ihnen", "sehr"},
}


def digits(text):
    return re.findall(r"\d+", text)


def lang(text):
    """A rough guess (en, es, fr or de) from function words, enough to catch a reply in the
    wrong language."""
    words = re.findall(r"\w+", text.lower())
    best, score = "en", 0
    for code, stop in NON_EN.items():
        n = sum(w in stop for w in words)
        if n > score:
            best, score = code, n
    return best if score >= 2 and score >= 0.15 * len(words) else "en"


def _stem(w):
    w = re.sub(r"['’]s?$", "", w.lower())
    return w[:-1] if w.endswith("s") else w


def new_capitals(inp, out):
    seen = {_stem(w) for w in re.findall(r"[\w'’-]+", inp)}
    found = []
    for m in re.finditer(r"[\w'’-]+", out):
        w = m.group()
        if not w[0].isupper() or w == "I" or w.startswith("I'") or w.startswith("I’"):
            continue
        before = out[:m.start()].rstrip()
        if not before or before[-1] in ".!?:\n¡¿\"“(" or before.endswith(","):
            if not before or before[-1] != ",":
                continue
        if _stem(w) not in seen:
            found.append(w)
    return found


def load_tokenizer():
    try:
        from common import Tokenizer
        return Tokenizer()
    except Exception as e:  # noqa: BLE001 - any missing package or model file
        print(f"(token-length check skipped: {type(e).__name__}: {e})")
        return None


def check(feature, tok, verbose):
    d = os.path.join(ROOT, "assets/adapters", feature)
    if not os.path.exists(os.path.join(d, "train.jsonl")):
        print(f"{feature}: no data yet")
        return True
    ok = True

    def fail(where, msg):
        nonlocal ok
        ok = False
        print(f"{where}: {msg}")

    for s in ("train", "dev", "test"):
        rows = []
        for n, line in enumerate(open(os.path.join(d, f"{s}.jsonl"), encoding="utf-8"), 1):
            where = f"{feature}/{s}.jsonl:{n}"
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                fail(where, f"not JSON ({e})")
                continue
            if not isinstance(ex, dict):
                fail(where, "not an object")
                continue
            extra = set(ex) - KEYS[feature]
            if extra:
                fail(where, f"unexpected keys {sorted(extra)}")
            for k in ("input", "output"):
                v = ex.get(k)
                if not isinstance(v, str) or not v.strip():
                    fail(where, f"{k} missing or empty")
                elif v != v.strip():
                    fail(where, f"{k} has leading/trailing whitespace")
            if not all(isinstance(ex.get(k), str) and ex[k].strip() for k in ("input", "output")):
                continue
            inp, out = ex["input"], ex["output"]
            if feature == "rewrite":
                tone = ex.get("tone")
                if tone not in REWRITE_TONES:
                    fail(where, f"tone {tone!r} not in {REWRITE_TONES}")
                if "tone_line" in ex and (ex["tone_line"] is not False or tone != "clearer"):
                    fail(where, "tone_line may only be false, and only with tone clearer")
                if tone == "shorter" and len(out) > SHORTER_MAX * len(inp):
                    fail(where, f"shorter output is {len(out) / len(inp):.2f} x the input (max {SHORTER_MAX})")
                if sorted(set(digits(out))) != sorted(set(digits(inp))):
                    fail(where, f"numbers differ: input {sorted(set(digits(inp)))}, output {sorted(set(digits(out)))}")
            if feature in ("summarize", "reply"):
                added = sorted(set(digits(out)) - set(digits(inp)))
                if added:
                    fail(where, f"output has numbers not in the input: {added}")
            if feature == "chat" and (ex.get("kind") not in ("rude", "venting", "anchor")
                                      or ("twin" in ex) != (ex.get("kind") == "rude")):
                fail(where, "kind must be rude (with its twin), venting or anchor")
            if feature == "summarize" and len(inp.split()) > 250:
                fail(where, f"input has {len(inp.split())} words (max 250)")
            if tok is not None:
                prompt, target = render(feature, user_message(feature, ex), out)
                t = len(tok.encode(prompt)) + len(tok.encode(target))
                if t > MAX_TOKENS:
                    fail(where, f"{t} tokens (train.py skips over {MAX_TOKENS})")
                ex["_tokens"] = t
            if verbose and feature != "proofread":
                caps = new_capitals(inp, out)
                if caps:
                    print(f"  note {where}: output words not in input: {caps}")
            rows.append(ex)
        stats = [f"{len(rows)} rows"]
        if tok is not None and rows:
            stats.append(f"max {max(r['_tokens'] for r in rows)} tokens")
        if feature == "rewrite":
            tones = {t: sum(r.get("tone") == t for r in rows) for t in REWRITE_TONES}
            bare = sum(r.get("tone_line") is False for r in rows)
            stats.append(", ".join(f"{t} {c}" for t, c in tones.items()))
            stats.append(f"clearer without tone line {bare}/{tones['clearer']}")
        if feature == "summarize" and rows:
            w = [len(r["input"].split()) for r in rows]
            stats.append(f"input words {min(w)}-{max(w)}, mean {sum(w) / len(w):.0f}, "
                         f"<60: {sum(x < 60 for x in w)}, 150-250: {sum(x >= 150 for x in w)}")
        if feature == "reply" and rows:
            langs = [lang(r["input"]) for r in rows]
            stats.append("languages " + ", ".join(f"{c} {langs.count(c)}" for c in sorted(set(langs))))
            for i, r in enumerate(rows):
                if lang(r["output"]) != langs[i]:
                    fail(f"{feature}/{s}.jsonl row {i + 1}", f"input looks {langs[i]}, reply looks {lang(r['output'])}")
        print(f"  {feature}/{s}: " + "; ".join(stats))
    print(f"{feature}: {'ok' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    verbose = "-v" in args
    feats = [a for a in args if a != "-v"] or FEATURES
    tok = load_tokenizer()
    sys.exit(0 if all([check(f, tok, verbose) for f in feats]) else 1)
