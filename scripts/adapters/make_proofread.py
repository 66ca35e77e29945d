#!/usr/bin/env python3
"""Makes assets/adapters/proofread/{train,dev,test}.jsonl from the authored clean sentences in
assets/adapters/proofread/clean.txt by corrupting them with realistic errors: common
misspellings, keyboard slips (dropped, doubled, swapped or neighbouring letters), homophone
mix-ups (their/there, its/it's, your/you're, then/than, to/too), subject-verb agreement errors,
missing apostrophes, commas, final punctuation and capitals. Each line is
{"input": corrupted, "output": clean, "source": [sentence numbers], "errors": [kinds]}.

Splits are by sentence: within each topic block, line i goes to test if i % 20 in {4, 11, 17},
to dev if i % 20 in {7, 14, 19}, else to train; an example only ever combines sentences of one
split, so no clean sentence is in two splits. About a quarter of the examples join two
sentences of the same topic into one text; about 5% are already correct (output = input), so
the adapter learns to leave clean text alone. Deterministic for a given --seed.

  python3 scripts/adapters/make_proofread.py [--seed 0] [--train 660 --dev 110 --test 110]
"""
import argparse
import json
import os
import random
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIR = os.path.join(ROOT, "assets/adapters/proofread")

MISSPELL = {
    "receive": "recieve", "received": "recieved", "definitely": "definately", "separate": "seperate",
    "tomorrow": "tommorow", "until": "untill", "necessary": "neccessary", "accommodation": "accomodation",
    "address": "adress", "appointment": "appointement", "beginning": "begining", "business": "buisness",
    "calendar": "calender", "colleague": "collegue", "committee": "commitee", "different": "diffrent",
    "embarrassed": "embarassed", "environment": "enviroment", "February": "Febuary", "government": "goverment",
    "immediately": "immediatly", "independent": "independant", "interrupt": "interupt", "knowledge": "knowlege",
    "library": "libary", "occasion": "ocassion", "occurred": "occured", "possession": "posession",
    "professional": "proffesional", "recommend": "reccomend", "recommended": "reccomended",
    "restaurant": "restaurent", "schedule": "schedual", "successful": "succesful", "surprise": "suprise",
    "Wednesday": "Wensday", "weird": "wierd", "which": "wich", "whether": "wether", "believe": "beleive",
    "really": "realy", "finally": "finaly", "because": "becuase", "friend": "freind", "their": "thier",
    "forward": "foward", "already": "allready", "tonight": "tonite", "weekend": "weeked",
    "quarter": "quater", "exercise": "excercise", "exercises": "excercises", "pharmacy": "pharmacey",
    "prescription": "perscription", "available": "availible", "especially": "especialy",
    "luggage": "lugage", "neighbour": "neighbor", "neighbours": "nieghbours", "practise": "practice",
    "usually": "usualy", "expected": "expcted", "forgot": "forgott", "written": "writen",
    "delivered": "deliverd", "arrive": "arive", "arrived": "arived", "travelling": "traveling",
    "cancelled": "canceled", "grammar": "grammer", "dessert": "desert", "opportunity": "oppurtunity",
    "temperature": "temprature", "vacuum": "vacume", "sincerely": "sincerly", "guarantee": "garantee",
    "government's": "goverment's", "holiday": "hoilday", "holidays": "holliday's", "Thursday": "Thurday",
    "Tuesday": "Teusday", "Saturday": "Saterday", "invoice": "invioce", "customer": "costumer",
    "cheaper": "cheeper", "early": "erly", "answer": "anwser", "sure": "shure", "could": "coud",
}
# American spellings are not errors in themselves; keep only those that are misspellings everywhere.
for k in ("neighbour", "practise", "travelling", "cancelled"):
    MISSPELL.pop(k)

HOMOPHONE = [(r"\btheir\b", "there"), (r"\bthere\b", "their"), (r"\bthey're\b", "their"),
             (r"\bits\b", "it's"), (r"\bit's\b", "its"), (r"\byour\b", "you're"), (r"\byou're\b", "your"),
             (r"\bthan\b", "then"), (r"\btoo\b", "to"), (r"\bwe're\b", "were"), (r"\bwhose\b", "who's"),
             (r"\blose\b", "loose"), (r"\baffect\b", "effect"), (r"\bpassed\b", "past"), (r"\bweather\b", "whether")]
AGREEMENT = [(r"\bhas\b", "have"), (r"\bis\b", "are"), (r"\bwas\b", "were"), (r"\bdoesn't\b", "don't"),
             (r"\bhave\b", "has"), (r"\bare\b", "is"), (r"\bwere\b", "was"), (r"\bdon't\b", "doesn't"),
             (r"\b(he|she|it) (\w+)s\b", None)]
APOSTROPHE = [("don't", "dont"), ("won't", "wont"), ("can't", "cant"), ("I'm", "Im"), ("I've", "Ive"),
              ("I'll", "Ill"), ("doesn't", "doesnt"), ("didn't", "didnt"), ("isn't", "isnt"), ("hasn't", "hasnt"),
              ("haven't", "havent"), ("couldn't", "couldnt"), ("wasn't", "wasnt"), ("let's", "lets"),
              ("Let's", "Lets"), ("we're", "were"), ("they've", "theyve"), ("I'd", "Id"), ("it's", "its"),
              ("'s ", "s ")]
KEYBOARD = {"a": "sq", "s": "ad", "d": "sf", "e": "wr", "r": "et", "t": "ry", "i": "uo", "o": "ip",
            "n": "bm", "m": "n", "l": "k", "h": "gj", "u": "yi", "c": "xv", "g": "fh", "p": "o", "y": "tu"}


def words(s):
    return [(m.start(), m.end()) for m in re.finditer(r"[A-Za-z]{4,}", s)]


def typo(s, rng):
    spans = [w for w in words(s) if not s[w[0]].isupper()]
    if not spans:
        return None
    a, b = rng.choice(spans)
    w = s[a:b]
    kind = rng.randrange(4)
    i = rng.randrange(1, len(w) - 1)
    if kind == 0:
        w2 = w[:i] + w[i + 1:]  # dropped letter
    elif kind == 1:
        w2 = w[:i] + w[i] + w[i:]  # doubled letter
    elif kind == 2:
        w2 = w[:i] + w[i + 1] + w[i] + w[i + 2:] if i + 1 < len(w) else None  # swapped letters
    else:
        c = w[i].lower()
        w2 = w[:i] + rng.choice(KEYBOARD[c]) + w[i + 1:] if c in KEYBOARD else None  # neighbouring key
    return None if not w2 or w2 == w else s[:a] + w2 + s[b:]


def misspell(s, rng):
    hits = [m for m in re.finditer(r"[A-Za-z']+", s) if m.group(0) in MISSPELL]
    if not hits:
        return None
    m = rng.choice(hits)
    return s[:m.start()] + MISSPELL[m.group(0)] + s[m.end():]


def sub_one(s, rules, rng):
    options = []
    for pat, rep in rules:
        for m in re.finditer(pat, s):
            options.append((m, rep))
    if not options:
        return None
    m, rep = rng.choice(options)
    if rep is None:  # "he walks" -> "he walk"
        rep = f"{m.group(1)} {m.group(2)}"
    return s[:m.start()] + rep + s[m.end():]


def apostrophe(s, rng):
    hits = [(a, b) for a, b in APOSTROPHE if a in s]
    if not hits:
        return None
    a, b = rng.choice(hits)
    return s.replace(a, b, 1)


def punctuation(s, rng):
    kind = rng.randrange(4)
    if kind == 0 and s[-1] in ".?!":
        return s[:-1]  # no final mark
    if kind == 1 and ", " in s:
        i = rng.choice([m.start() for m in re.finditer(", ", s)])
        return s[:i] + s[i + 1:]  # dropped comma
    if kind == 2 and s.endswith("?"):
        return s[:-1] + "."
    if kind == 3 and "; " in s:
        return s.replace("; ", ", ", 1)  # comma splice
    return None


def capitals(s, rng):
    kind = rng.randrange(3)
    if kind == 0 and s[0].isupper() and not s.startswith("I "):
        return s[0].lower() + s[1:]
    if kind == 1 and re.search(r"\bI\b", s):
        return re.sub(r"\bI\b", "i", s, count=1)
    names = [m for m in re.finditer(r"(?<=[a-z,;] )[A-Z][a-z]+", s)]
    if names:
        m = rng.choice(names)
        return s[:m.start()] + m.group(0).lower() + s[m.end():]
    return None


ERRORS = {"typo": typo, "misspelling": misspell, "homophone": lambda s, r: sub_one(s, HOMOPHONE, r),
          "agreement": lambda s, r: sub_one(s, AGREEMENT, r), "apostrophe": apostrophe,
          "punctuation": punctuation, "capitals": capitals}
WEIGHTS = {"typo": 3, "misspelling": 3, "homophone": 2, "agreement": 2, "apostrophe": 2, "punctuation": 2, "capitals": 1}


def corrupt(clean, rng, n_errors):
    s, kinds = clean, []
    names = list(WEIGHTS)
    for _ in range(40):
        if len(kinds) >= n_errors:
            break
        k = rng.choices(names, [WEIGHTS[n] for n in names])[0]
        t = ERRORS[k](s, rng)
        if t and t != s:
            s, kinds = t, kinds + [k]
    return (s, kinds) if kinds else (None, [])


def load():
    topics, cur = {}, None
    for line in open(os.path.join(DIR, "clean.txt")):
        line = line.rstrip("\n")
        if line.startswith("## "):
            cur = line[3:]
            topics[cur] = []
        elif line and not line.startswith("#"):
            topics[cur].append(line)
    return topics


def split_of(i):
    r = i % 20
    return "test" if r in (4, 11, 17) else "dev" if r in (7, 14, 19) else "train"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", type=int, default=660)
    ap.add_argument("--dev", type=int, default=110)
    ap.add_argument("--test", type=int, default=110)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    topics = load()
    all_lines = [s for t in topics.values() for s in t]
    assert len(set(all_lines)) == len(all_lines), "duplicate clean sentences"
    number = {s: i for i, s in enumerate(all_lines)}
    pools = {"train": [], "dev": [], "test": []}
    for name, lines in topics.items():
        for i, s in enumerate(lines):
            pools[split_of(i)].append((name, s))
    for split in ("train", "dev", "test"):
        want, pool, seen, out = getattr(args, split), pools[split], set(), []
        by_topic = {}
        for t, s in pool:
            by_topic.setdefault(t, []).append(s)
        order = pool[:]
        while len(out) < want:
            rng.shuffle(order)
            for t, s in order:
                if len(out) >= want:
                    break
                src = [s]
                if rng.random() < 0.25 and len(by_topic[t]) > 1:
                    src.append(rng.choice([x for x in by_topic[t] if x != s]))
                clean = " ".join(src)
                if rng.random() < 0.05:
                    text, kinds = clean, []
                else:
                    text, kinds = corrupt(clean, rng, rng.choice([1, 1, 2, 2, 3]))
                    if text is None:
                        continue
                if text in seen:
                    continue
                seen.add(text)
                out.append({"input": text, "output": clean, "source": [number[x] for x in src], "errors": kinds})
        with open(os.path.join(DIR, f"{split}.jsonl"), "w") as f:
            for ex in out:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        n_src = len({i for ex in out for i in ex["source"]})
        print(f"proofread {split}: {len(out)} examples from {n_src} clean sentences "
              f"({sum(1 for e in out if not e['errors'])} already correct)")


if __name__ == "__main__":
    main()
