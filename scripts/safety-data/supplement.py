#!/usr/bin/env python3
"""Appends the train-only authored prompts to assets/safety/train.jsonl: authored/train-only/*.txt
(the first round, stop 52), then the folders of later rounds listed in LATER_ROUNDS.

usage: supplement.py [repo_root]

Run after build.py; running it again gives the same file (earlier supplement lines are replaced).
The rules they serve, each fixed before its round's results: scripts/safety-data/supplement-rule.md
and supplement-rule-2.md.

- harmful_<category>.txt lines are unsafe with that category; benign_*.txt lines are safe.
- A line is dropped, unread, when it repeats a train prompt, or comes close to a dev prompt or
  an eval suite prompt by near_test.py's measures (word-set Jaccard >= 0.5 or difflib ratio
  >= 0.75): dev and the suites must stay unseen. Only counts are printed, never the lines.
- Dev and the suites are not touched. The end of assets/safety/MANIFEST.md gets a section with
  the counts (between the markers below), replaced on each run.
"""
import difflib, glob, json, os, re, sys
from collections import Counter

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "scripts/safety-data/authored/train-only")
TRAIN = os.path.join(ROOT, "assets/safety/train.jsonl")
MANIFEST = os.path.join(ROOT, "assets/safety/MANIFEST.md")
BEGIN, END = "<!-- train-only supplement: begin -->", "<!-- train-only supplement: end -->"
# Later rounds' folders in use. stop53/ is kept as the record of a round whose head failed its
# dev gate (supplement-rule-2.md, "Result"), so its lines are not in train.jsonl.
LATER_ROUNDS = []
CATS = {"violent_crimes", "non_violent_crimes", "sex_related_crimes", "child_sexual_exploitation",
        "defamation", "specialized_advice", "privacy", "intellectual_property",
        "indiscriminate_weapons", "hate", "suicide_self_harm", "sexual_content", "elections",
        "code_interpreter_abuse", "harassment"}


def norm(s):
    return " ".join(s.lower().split())


def words(s):
    return set(re.findall(r"[a-z0-9']+", s.lower()))


def jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def near(line, held):
    """Whether `line` comes close to any held-out prompt (near_test.py's measures)."""
    w, low = words(line), line.lower()
    for t, tw, tl in held:
        if len(w & tw) / max(1, len(w | tw)) >= 0.5:
            return True
        m = difflib.SequenceMatcher(None, low, tl)
        if m.real_quick_ratio() >= 0.75 and m.quick_ratio() >= 0.75 and m.ratio() >= 0.75:
            return True
    return False


def main():
    rows = [r for r in jsonl(TRAIN) if not (r.get("authored_file") or "").startswith("train-only/")]
    seen = {norm(r["prompt"]) for r in rows}
    held = [r["prompt"] for r in jsonl(os.path.join(ROOT, "assets/safety/dev.jsonl"))]
    for f in sorted(glob.glob(os.path.join(ROOT, "assets/evals/suites/*.jsonl"))):
        held += [r["prompt"] for r in jsonl(f) if "prompt" in r]
    held = [(t, words(t), t.lower()) for t in held]

    counts, dropped = Counter(), Counter()
    n = 0
    # The first round's files, then each later round's folder that a shipped head was trained
    # on: earlier lines keep their ids, and train.jsonl stays the shipped head's data.
    rounds = [sorted(glob.glob(os.path.join(DIR, "*.txt")))]
    rounds += [sorted(glob.glob(os.path.join(DIR, d, "*.txt"))) for d in LATER_ROUNDS]
    for path in (p for r in rounds for p in r):
        fn = os.path.relpath(path, DIR)
        stem = os.path.basename(fn)[:-4]
        if stem.startswith("harmful_"):
            label, cat = "unsafe", stem[len("harmful_"):]
            assert cat in CATS, fn
        elif stem.startswith("benign_"):
            label, cat = "safe", None
        else:
            raise SystemExit("unknown train-only file " + fn)
        with open(path, encoding="utf-8") as f:
            lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
        for line in lines:
            key = norm(line)
            if key in seen:
                dropped[(fn, "repeats a train prompt")] += 1
                continue
            if near(line, held):
                dropped[(fn, "close to a dev or suite prompt")] += 1
                continue
            seen.add(key)
            rows.append({"id": f"kostant-train-only-{n}", "prompt": line, "label": label,
                         "category": cat, "source": "kostant-authored", "license": "Apache-2.0",
                         "authored_file": "train-only/" + fn})
            counts[(fn, label, cat)] += 1
            n += 1

    with open(TRAIN, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")

    table = ["| file | label | category | added | dropped (repeats a train prompt / close to dev or a suite) |",
             "|---|---|---|---:|---|"]
    for (fn, label, cat), k in sorted(counts.items()):
        rep = dropped[(fn, "repeats a train prompt")]
        close = dropped[(fn, "close to a dev or suite prompt")]
        table.append(f"| `{fn}` | {label} | {cat or '-'} | {k} | {rep} / {close} |")
    section = "\n".join([
        BEGIN,
        "## Train-only supplement (stop 52)",
        "",
        "After build.py, `scripts/safety-data/supplement.py` appends the prompts of",
        "`scripts/safety-data/authored/train-only/` to `train.jsonl` only (ids `kostant-train-only-N`,",
        "`authored_file` `train-only/<file>`); dev and the suites are unchanged, and the counts above are",
        "build.py's, before it. Why these categories and how they were written:",
        "`scripts/safety-data/supplement-rule.md` (fixed before any result) and the folder's README.",
        "A second round (`train-only/stop53/`, `supplement-rule-2.md`) failed its dev gate and is not",
        "in train.jsonl.",
        f"Added {n} prompts:",
        "",
        *table,
        END,
    ])
    with open(MANIFEST, encoding="utf-8") as f:
        md = f.read()
    md = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END) + r"\n?", "", md, flags=re.S).rstrip("\n")
    with open(MANIFEST, "w", encoding="utf-8") as f:
        f.write(md + "\n\n" + section + "\n")
    print(f"added {n}; dropped {sum(dropped.values())}: " +
          json.dumps({f"{fn}: {why}": k for (fn, why), k in sorted(dropped.items())}))


if __name__ == "__main__":
    main()
