#!/usr/bin/env python3
"""Checks the retrieval eval's data (assets/evals/retrieval: documents/ and questions.jsonl): every answer is verbatim text of its
document and of no other, in the text a reader sees (HTML tags removed, Markdown markup absent
from answers), and prints how many questions share no content word with their answer's sentence.

Usage: scripts/check-retrieval-eval.py [DIR]   (exit status 1 on any problem)
"""
import html
import html.parser
import json
import os
import re
import sys

DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "assets", "evals", "retrieval")
DOC_EXTS = (".md", ".txt", ".html")
UNANSWERABLE_WANTED = 10

STOP = set("""a an the and or but if then of to in on at by for with from up out into over under
about after before between through during without within than as is are was were be been being am
do does did doing have has had having can could will would shall should may might must i me my
mine we us our you your yours he she it its they them their this that these those what which who
whom whose when where why how there here not no nor so too very just any all each every some more
most much many few other another same own such only also again once get got gets need needs want
s t don isn aren doesn didn won wouldn ok okay please tell know one""".split())


def norm(s):
    """The rule's normalisation: whitespace runs become one space, case folded."""
    return re.sub(r"\s+", " ", s).strip().lower()


class Text(html.parser.HTMLParser):
    """The visible text of an HTML file; block tags end a line, so cells and items stay apart."""
    BLOCK = {"p", "li", "td", "th", "tr", "h1", "h2", "h3", "h4", "title", "br", "div", "table"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


def visible(path, raw):
    if path.endswith(".html"):
        p = Text()
        p.feed(raw)
        return "".join(p.parts)
    return raw


def words(s):
    return {w.rstrip("s") for w in re.findall(r"[^\W_]+", s.lower()) if w not in STOP}


def sentence_around(text, answer):
    """The sentence (or line) of `text` holding the answer, all whitespace-normalised."""
    t, a = norm(text), norm(answer)
    i = t.find(a)
    start = max(t.rfind(". ", 0, i), t.rfind("? ", 0, i), t.rfind("! ", 0, i)) + 1
    ends = [j for j in (t.find(". ", i + len(a)), t.find("? ", i + len(a))) if j >= 0]
    return t[start:min(ends) + 1 if ends else len(t)]


def names(text):
    """Words capitalised mid-sentence (or holding a digit, like codes): names, not content words."""
    caps = re.findall(r"(?<=[^\W_]|,) ([A-Z0-9][^\W_]*)", text)
    return {w.lower().rstrip("s") for w in caps if w[0].isupper() or re.search(r"[a-zA-Z]", w)}


def main():
    problems = []
    docs = {}
    for name in sorted(os.listdir(os.path.join(DIR, "documents"))):
        if name.endswith(DOC_EXTS):
            raw = open(os.path.join(DIR, "documents", name), encoding="utf-8").read()
            docs[name] = visible(name, raw)
    all_names = set().union(*(names(t) for t in docs.values()))

    questions = []
    with open(os.path.join(DIR, "questions.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            q = json.loads(line)
            if set(q) != {"id", "question", "doc", "answer"}:
                problems.append(f"line {n}: fields {sorted(q)}")
            questions.append(q)

    ids = [q["id"] for q in questions]
    if len(ids) != len(set(ids)):
        problems.append("duplicate ids")

    no_overlap = 0
    answerable = [q for q in questions if q["doc"] is not None]
    unanswerable = [q for q in questions if q["doc"] is None]
    for q in unanswerable:
        if q["answer"] is not None:
            problems.append(f"{q['id']}: doc null but answer set")
    for q in answerable:
        doc, ans = q["doc"], q["answer"]
        if doc not in docs:
            problems.append(f"{q['id']}: no document {doc}")
            continue
        if not ans or len(norm(ans)) < 4:
            problems.append(f"{q['id']}: answer too short to test")
            continue
        if re.search(r"[*`|<>]|__|\]\(", ans):
            problems.append(f"{q['id']}: answer holds markup: {ans!r}")
        count = norm(docs[doc]).count(norm(ans))
        if count == 0:
            problems.append(f"{q['id']}: answer not in {doc}: {ans!r}")
            continue
        elsewhere = [d for d, t in docs.items() if d != doc and norm(ans) in norm(t)]
        if elsewhere:
            problems.append(f"{q['id']}: answer also in {elsewhere}: {ans!r}")
        shared = words(q["question"]) & words(sentence_around(docs[doc], ans))
        shared -= all_names | names(q["question"])
        if not shared:
            no_overlap += 1

    total_chars = sum(len(t) for t in docs.values())
    print(f"{len(docs)} documents, {total_chars} visible characters (~{total_chars / 2500:.0f} pages)")
    for d, t in docs.items():
        print(f"  {d}: {len(t)} chars, {sum(q['doc'] == d for q in answerable)} questions")
    print(f"{len(questions)} questions: {len(answerable)} answerable, {len(unanswerable)} unanswerable")
    print(f"{no_overlap}/{len(answerable)} answerable questions share no content word "
          f"(names aside) with their answer's sentence")
    if len(unanswerable) != UNANSWERABLE_WANTED:
        problems.append(f"{len(unanswerable)} unanswerable questions, want {UNANSWERABLE_WANTED}")
    if not 80 <= len(questions) <= 100:
        problems.append(f"{len(questions)} questions, want 80-100")
    if answerable and 2 * no_overlap < len(answerable):
        problems.append("fewer than half the questions are paraphrased (no shared content word)")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
