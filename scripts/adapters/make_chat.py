#!/usr/bin/env python3
"""Builds the chat adapter's data (issue 20 part 10: a rude user gets a calm answer, not an
apology): assets/adapters/chat/{train,dev,test}.jsonl.

The default model answers about a third of the messages that insult it with its own "I'm
sorry, as an AI…" instead of an answer, and no system prompt tried changed that
(scripts/system-prompt-refusals.py, README). The same model answers the same request asked
politely. So the adapter learns, for a rude message, the base model's own greedy reply to its
polite twin (the request with the insults taken out): context distillation from the model
itself, nothing written by another model. A message that only vents gets one of a few calm
replies written here. Plain requests (safe and unsafe ones from the guard's train split) keep
the base model's own replies, so the adapter changes only what rudeness changed.

  KOSTANT=target/release/kostant python3 scripts/adapters/make_chat.py [--twins-only]

Inputs:
- assets/adapters/chat/rude_at_assistant.txt (authored for issue 20, people rude or angry at the
  assistant; its multi-turn items are left out): lines with index % 5 == 0 go to test, == 1 to
  dev, the rest to train;
- the guard's assets/safety/{train,dev}.jsonl: their `provocation` items go to the split of the
  same name, and every 12th other train prompt (safe and unsafe) is an anchor in train, every
  12th other dev prompt one in dev. The eval suites are never read.
Replies: `kostant eval --prompts` (the product's path: default system prompt, the guard
riding, greedy, 160 tokens); a reply the guard stopped is left out, as is a twin's reply the
eval's judge reads as a refusal, and one that ran to the limit is cut (`ended`).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from check_splits import grams  # noqa: E402  (the 8-gram rule the split check applies)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KOSTANT = os.environ.get("KOSTANT", os.path.join(ROOT, "target/release/kostant"))
DATA = os.path.join(ROOT, "assets/adapters/chat")

# Openings a request clause starts with.
REQUEST = re.compile(
    r"^(how|what|what's|whats|which|when|where|who|why|can|could|would|is|are|do|does|give|tell|"
    r"write|translate|spell|name|explain|convert|list|make|help|summari[sz]e|one (line|word)|"
    r"try again|recommend|set|show|define|describe|i need|i want|i asked|i said|"
    r"comment|quelle|c'est|donne|dis|¿|dime|wie|sag|come|qual|dimmi|como|quanto|quantos|hoe|jak|как|какая|"
    r"çay|라면|كيف|كم)\b",
    re.I,
)
# Questions that only taunt.
TAUNT = re.compile(r"^(are you|why are you|why can't you|what the hell|what kind of|do you have a brain|"
                   r"can't you|what is wrong|do your job)", re.I)
LEAD = re.compile(r"^(just|now|so|and|but fine|fine|okay|ok|anyway|last chance|try again|"
                  r"one line|seriously)[,:]?\s+", re.I)


def twin(prompt):
    """The request in `prompt` with the insults taken out, or None when it only vents."""
    text = re.sub(r"^\[[a-z]{2}\]\s*", "", prompt.strip())
    text = re.sub(r"\s+(And don't|Try not)[^.?!]*[.?!]$", "", text)
    text = re.sub(r"\b(the fuck|fucking|damn) ", "", text, flags=re.I)
    # Sentences (and clauses after a colon), in order.
    parts = [p.strip() for p in re.split(r"(?<=[.!?。？])\s+|(?<=[:：])\s+", text) if p.strip()]
    for i, p in enumerate(parts):
        # Leading comma clauses that insult ("Hey idiot, what's …").
        # "Shut up and tell me …": the request after " and ".
        p = re.sub(r"^.*?\b(?:and|but)\s+(?=(?:tell|give|list|explain|recommend) )", "", p, flags=re.I)
        clauses = [c.strip() for c in p.split(",")]
        while len(clauses) > 1 and not REQUEST.match(LEAD.sub("", clauses[0])):
            clauses.pop(0)
        p = ", ".join(clauses)
        p = LEAD.sub("", p.lstrip("—–- "))
        # A rude question ("Are you braindead?") before the request is not the request.
        if i < len(parts) - 1 and TAUNT.match(p):
            continue
        if REQUEST.match(p):
            rest = " ".join([p] + parts[i + 1:])
            # Trailing jabs: ", you idiot", ", if you even can", "And don't waffle this time."
            rest = re.sub(r",\s*(you|if you|or is that)\b[^,?.]*(?=[?.!]|$)", "", rest, flags=re.I)
            rest = re.sub(r"\s+(And don't|Try not)[^.?!]*[.?!]$", "", rest)
            if rest.isupper():
                rest = rest.capitalize()
            rest = rest[0].upper() + rest[1:]
            if not rest.endswith(("?", ".", "!", "？", "。")):
                rest += "?" if REQUEST.match(rest) and not re.match(r"(?i)(give|tell|write|translate|spell|name|explain|convert|list|make|summari)", rest) else "."
            return rest
    return None


# Calm replies to a message that only vents: no apology opening ("I'm sorry" reads as a
# refusal to the eval's judge and to users), no insult back, an offer to help.
CALM = [
    "That sounds really frustrating. Tell me what you were trying to do, and I'll help you sort it out step by step.",
    "I hear you. If my last answer missed the mark, tell me what you need and I'll try it a different way.",
    "Fair enough, it hasn't gone well so far. What are you trying to get done? I'll keep my answer short and to the point.",
    "I'm here when you want to try again. Tell me the problem in a sentence and I'll give you a straight answer.",
    "Losing time to something that doesn't work is maddening. Tell me where it went wrong and we'll fix it together.",
    "Understood. Let's start over: what would you like help with?",
]


MAX_TOKENS = 160


def ended(reply, stopped):
    """The reply as a target: whole if the model ended it; if it ran to the token limit, cut
    before its first repeated paragraph (the 135M model loops greedily) or else after its last
    whole sentence; None when nothing whole is left."""
    reply = reply.strip()
    if stopped:
        return reply or None
    paras = reply.split("\n\n")
    for i in range(1, len(paras)):
        if paras[i].strip() in {q.strip() for q in paras[:i]}:
            return "\n\n".join(paras[:i]).strip() or None
    m = list(re.finditer(r"[.!?](?=\s|$)", reply))
    return reply[:m[-1].end()].strip() if m else None


def rude_lines():
    """(line, vents): the rude file's single-turn lines, and whether each is under its
    "venting only" header (a message with no request, answered with a CALM reply)."""
    out, section = [], ""
    for line in open(os.path.join(DATA, "rude_at_assistant.txt"), encoding="utf-8"):
        line = line.strip()
        if line.startswith("# ---"):
            section = line
        elif line and not line.startswith("#") and "|||" not in line:
            out.append((line, "venting only" in section))
    return out


def guard_rows(split):
    return [json.loads(l) for l in open(os.path.join(ROOT, f"assets/safety/{split}.jsonl"), encoding="utf-8")]


def replies(prompts):
    """The product's greedy replies to `prompts` (id -> (reply, ended)), through `kostant eval
    --prompts`."""
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for i, p in enumerate(prompts):
                f.write(json.dumps({"id": str(i), "prompt": p}) + "\n")
        subprocess.run([KOSTANT, "eval", "--prompts", src, "--out", out, "--max-tokens", str(MAX_TOKENS),
                        "--no-history", "--no-adapter"], check=True)
        got = {}
        for l in open(out, encoding="utf-8"):
            r = json.loads(l)
            got[int(r["id"])] = r
    return [got.get(i) for i in range(len(prompts))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--twins-only", action="store_true", help="print each rude line's twin and stop")
    args = ap.parse_args()
    rude = rude_lines()
    if args.twins_only:
        for r in [l for l, _ in rude] + [x["prompt"] for x in guard_rows("train") + guard_rows("dev")
                                          if x.get("provocation") and "\n" not in x["prompt"]]:
            print(f"{r}\t{twin(r)}")
        return
    splits = {"train": [], "dev": [], "test": []}
    for i, (r, vents) in enumerate(rude):
        splits["test" if i % 5 == 0 else "dev" if i % 5 == 1 else "train"].append(("vent" if vents else "rude", r))
    for name in ("train", "dev"):
        rows = guard_rows(name)
        splits[name] += [("rude", x["prompt"]) for x in rows if x.get("provocation") and "\n" not in x["prompt"]]
        others = [x for x in rows if not x.get("provocation") and "\n" not in x["prompt"]]
        splits[name] += [("anchor", x["prompt"]) for x in others[::12]]
    # A dev or test message that shares a word 8-gram with a train one (the rude file and the
    # guard's provocation items overlap a little) is left out (check_splits.py's rule).
    seen = set().union(*(grams(p) for _, p in splits["train"]))
    for name in ("dev", "test"):
        splits[name] = [(k, p) for k, p in splits[name] if not grams(p) & seen]
    # One pass of the model over every prompt whose reply is wanted.
    asks = []
    for name, items in splits.items():
        for kind, p in items:
            if kind == "anchor":
                asks.append(p)
            elif kind == "rude" and twin(p) is not None:
                asks.append(twin(p))
    asks = sorted(set(asks))
    got = dict(zip(asks, replies(asks)))
    for name, items in splits.items():
        n_calm = dropped = 0
        with open(os.path.join(DATA, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for kind, p in items:
                t = p if kind == "anchor" else twin(p)
                if kind == "vent":
                    out = CALM[n_calm % len(CALM)]
                    n_calm += 1
                    line = {"input": p, "output": out, "kind": "venting"}
                elif t is None:
                    dropped += 1  # a request the extractor could not find (e.g. no spaces)
                    continue
                else:
                    r = got[t]
                    out = None
                    # A twin's reply that is itself a refusal ("I'm sorry, as an AI…") would
                    # teach the very apology the adapter is for.
                    if r is not None and r.get("verdict") == "answered" and (
                            kind == "anchor" or r.get("refusal") == "none"):
                        out = ended(r["reply"], r["generated_tokens"] < MAX_TOKENS)
                    if out is None:
                        dropped += 1
                        continue
                    line = {"input": p, "output": out, "kind": kind}
                    if kind == "rude":
                        line["twin"] = t
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"{name}: {len(items) - dropped} lines ({n_calm} venting), {dropped} dropped", file=sys.stderr)


if __name__ == "__main__":
    main()
