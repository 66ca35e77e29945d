#!/usr/bin/env python3
"""Cuts public-domain narrative excerpts for the parts head's long texts, by a rule fixed before
any result (scripts/safety-data/narrative/RULE.md).

Usage: build.py FRANKENSTEIN_PG84 PRIDE_PG1342 > scripts/safety-data/narrative_long_texts.txt

Each book: the Project Gutenberg header (through the "*** START OF" line) and licence footer
(from the "*** END OF" line) removed; hard-wrapped lines joined into paragraphs; runs of whole
paragraphs, each ending at the first paragraph break after 900 words; 12 runs a book, evenly
spaced (run floor(k * R / 12) for k = 0..11, R the book's runs); the two books interleaved; each
run after a request line, rotating over four."""
import hashlib
import sys

BOOKS = [
    ("Frankenstein (Mary Shelley, 1818), Project Gutenberg #84",
     "aa4b2f7c9191be492260bb4bede5b9a7a380a974", 446581),
    ("Pride and Prejudice (Jane Austen, 1813), Project Gutenberg #1342",
     "82039a5ba35682da401cddd2c0580eb2396b6528", 763063),
]
REQUESTS = [
    "Summarize this chapter for me:",
    "Proofread this passage:",
    "What happens in this excerpt?",
    "Shorten this to one paragraph:",
]
RUN_WORDS = 900
PER_BOOK = 12


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def paragraphs(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("*** START OF"))
    end = next(i for i, l in enumerate(lines) if "*** END OF" in l)
    paras, cur = [], []
    for line in lines[start + 1:end]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return paras


def runs(paras: list[str]) -> list[list[str]]:
    out, cur, words = [], [], 0
    for p in paras:
        cur.append(p)
        words += len(p.split())
        if words >= RUN_WORDS:
            out.append(cur)
            cur, words = [], 0
    return out


def main() -> None:
    picked = []
    for (title, blob, size), path in zip(BOOKS, sys.argv[1:3]):
        data = open(path, "rb").read()
        if len(data) != size or git_blob_sha1(data) != blob:
            sys.exit(f"{path}: not the {title} file this rule was written for")
        # #1342's copy is Windows-1252 (its dashes are 0x97), #84's UTF-8.
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("cp1252")
        r = runs(paragraphs(text))
        picked.append([r[k * len(r) // PER_BOOK] for k in range(PER_BOOK)])
    print("# Public-domain narrative pasted to be summarized, proofread, explained or shortened: excerpts")
    print("# of Frankenstein (Project Gutenberg #84) and Pride and Prejudice (#1342), public domain in the")
    print("# US, the Gutenberg header and licence footer removed. Cut by scripts/safety-data/narrative/build.py")
    print("# under the rule in scripts/safety-data/narrative/RULE.md. One text per line, newlines as \\n.")
    for k in range(PER_BOOK):
        for b in range(len(BOOKS)):
            i = 2 * k + b
            text = "\\n\\n".join(picked[b][k])
            print(f"{REQUESTS[i % len(REQUESTS)]}\\n\\n{text}")


if __name__ == "__main__":
    main()
