#!/usr/bin/env python3
"""llama.cpp's llama-lookup over the prompts `kostant bench --speculative lookup --dump-prompts DIR`
wrote, for the comparison in docs/benchmarks-log.md (issue 24). Per set (the prompt id's prefix) and per
draft length, the decode speed over all prompts (decoded tokens / decode seconds, as llama-lookup
reports them) and its acceptance; the best draft length per set is what the table quotes.

Usage: scripts/bench-llama-lookup.py LLAMA_LOOKUP MODEL DIR THREADS [N_PREDICT] [DRAFTS...]
e.g.   scripts/bench-llama-lookup.py /tmp/llamacpp/build/bin/llama-lookup \
           models/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/prompts 2 128 4 8 16
"""
import collections
import json
import pathlib
import re
import subprocess
import sys
import tempfile


def run(binary, model, prompt_file, threads, n_predict, draft):
    # llama.cpp drops one trailing newline of a prompt file; the rendered prompt ends in one.
    text = prompt_file.read_text() + "\n"
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        out = subprocess.run(
            [binary, "-m", model, "-f", f.name, "-n", str(n_predict), "--spec-draft-n-max",
             str(draft), "-t", str(threads), "--temp", "0", "-c", "2048"],
            capture_output=True, text=True, check=True).stderr
    grab = lambda pat: re.search(pat, out)
    enc = grab(r"encoded\s+(\d+) tokens")
    dec = grab(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
    drafted = grab(r"n_drafted\s+=\s+(\d+)")
    accepted = grab(r"n_accept\s+=\s+(\d+)")
    return {
        "prompt_tokens": int(enc.group(1)),
        "tokens": int(dec.group(1)),
        "seconds": float(dec.group(2)),
        "drafted": int(drafted.group(1)),
        "accepted": int(accepted.group(1)),
    }


def main():
    binary, model, folder, threads = sys.argv[1:5]
    n_predict = int(sys.argv[5]) if len(sys.argv) > 5 else 128
    drafts = [int(d) for d in sys.argv[6:]] or [4, 8, 16]
    totals = collections.defaultdict(lambda: collections.Counter())
    for p in sorted(pathlib.Path(folder).glob("*.txt")):
        name = p.stem.rsplit("-", 1)[0]
        for d in drafts:
            r = run(binary, model, p, threads, n_predict, d)
            t = totals[(name, d)]
            t["prompts"] += 1
            for k in ("tokens", "drafted", "accepted", "prompt_tokens"):
                t[k] += r[k]
            t["ms"] += r["seconds"] * 1e3
    report = []
    for (name, d), t in sorted(totals.items()):
        report.append({
            "set": name, "draft": d, "prompts": t["prompts"],
            "tok_s": t["tokens"] * 1e3 / t["ms"],
            "acceptance": t["accepted"] / max(t["drafted"], 1),
            "mean_prompt_tokens": t["prompt_tokens"] / t["prompts"],
        })
    print(json.dumps({"threads": int(threads), "n_predict": n_predict, "runs": report}))


if __name__ == "__main__":
    main()
