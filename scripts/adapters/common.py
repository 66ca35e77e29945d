"""Shared pieces of the adapter scripts: the features' system prompts, the GGUF's tokenizer and
the chat template the training examples are rendered with.

The system prompts are copies of safety/src/features.rs `Feature::system_prompt` (task sentence,
one space, `kostant_safety::policy::TONE_RULES` from safety/src/policy.rs). `check_prompts()`
reads both Rust files and fails if a copy here has drifted.
"""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BASE_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
FEATURES = ["summarize", "proofread", "reply", "rewrite", "chat"]

TONE_RULES = "Stay polite and calm even if the user is rude, and do not insult them back."
TASKS = {
    # Chat's is safety/src/policy.rs `default_system_prompt` (its task sentences, then the rules).
    "chat": "You are a knowledgeable assistant. Give a direct, useful answer to every question.",
    "summarize": "Summarize the text the user gives you in a few short sentences. Keep its facts, "
                 "names and numbers; add nothing that is not in it.",
    "reply": "Write a reply to the message the user pastes, as the user, ready to send. Match "
             "the message's language and register.",
    "rewrite": "Rewrite the text the user gives you so that it reads clearly and correctly. Keep "
               "its meaning and language, and return only the rewritten text.",
    "proofread": "Correct the spelling, grammar and punctuation of the text the user gives you. "
                 "Keep its meaning, wording and language, and reply with the corrected text only.",
}


def system_prompt(feature):
    return f"{TASKS[feature]} {TONE_RULES}"


def _rust_string(src, start):
    """The value of a Rust string literal starting at src[start] == '"', with `\\` line
    continuations folded as rustc folds them (backslash, newline, leading whitespace)."""
    assert src[start] == '"'
    out, i = [], start + 1
    while src[i] != '"':
        if src[i] == "\\":
            if src[i + 1] == "\n":
                i += 2
                while src[i] in " \t\n":
                    i += 1
                continue
            out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}[src[i + 1]])
            i += 2
            continue
        out.append(src[i])
        i += 1
    return "".join(out)


def check_prompts():
    feats = open(os.path.join(ROOT, "safety/src/features.rs")).read()
    policy = open(os.path.join(ROOT, "safety/src/policy.rs")).read()
    m = re.search(r"pub const TONE_RULES: &str =\s*", policy)
    assert _rust_string(policy, m.end()) == TONE_RULES, "TONE_RULES drifted from safety/src/policy.rs"
    assert re.search(r'format!\("\{task\} \{\}", policy::TONE_RULES\)', feats), "features.rs joins differently"
    m = re.search(r"pub fn default_system_prompt\(\) -> String \{\s*format!\(\s*", policy)
    assert _rust_string(policy, m.end()) == TASKS["chat"] + " {TONE_RULES}", "chat's prompt drifted from policy.rs"
    for f, text in TASKS.items():
        if f == "chat":
            continue
        m = re.search(r"Feature::%s => \{\s*" % f.capitalize(), feats)
        assert m, f
        assert _rust_string(feats, m.end()) == text, f"{f}'s task prompt drifted from safety/src/features.rs"


class Tokenizer:
    """The GGUF's byte-level BPE (`tokenizer.ggml.model` gpt2, pre-tokenizer `smollm`: single
    digits split off, then GPT-2's regex), rebuilt with the `tokenizers` package from the
    file's own tokens and merges. Control tokens (ids 0..16, e.g. <|im_start|>) are matched as
    whole tokens in the text, as llama.cpp does with special-token parsing on.
    `scripts/adapters/check_tokenizer.py` compares it with llama.cpp's ids in
    engine/tests/fixtures/tokenizer_golden.json and generation_golden.json."""

    def __init__(self, path=MODEL):
        import gguf
        from tokenizers import Tokenizer as HfTok, AddedToken, decoders, models, pre_tokenizers

        r = gguf.GGUFReader(path)

        def strings(key):
            f = r.fields[key]
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

        def scalar(key):
            f = r.fields[key]
            return f.parts[f.data[0]][0]

        tokens = strings("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
        types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
        self.pre = bytes(r.fields["tokenizer.ggml.pre"].parts[r.fields["tokenizer.ggml.pre"].data[0]]).decode()
        assert bytes(r.fields["tokenizer.ggml.model"].parts[r.fields["tokenizer.ggml.model"].data[0]]).decode() == "gpt2"
        assert self.pre == "smollm", self.pre
        self.eos = int(scalar("tokenizer.ggml.eos_token_id"))
        vocab = {t: i for i, t in enumerate(tokens)}
        def build():
            t = HfTok(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
            t.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ])
            t.decoder = decoders.ByteLevel()
            return t

        self.plain = build()  # no special-token parsing
        self.tok = build()
        control = [tokens[i] for i, t in enumerate(types) if t == 3]  # LLAMA_TOKEN_TYPE_CONTROL
        self.tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
        self.tokens, self.control = tokens, control

    def encode(self, text, parse_special=True):
        t = self.tok if parse_special else self.plain
        return t.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)


def render(feature, user, assistant=None):
    """ChatML as the GGUF's template renders it (no BOS: add_bos_token is false). Returns the
    prompt, and with `assistant` also the target text (reply + <|im_end|>)."""
    prompt = (f"<|im_start|>system\n{system_prompt(feature)}<|im_end|>\n"
              f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    if assistant is None:
        return prompt
    return prompt, f"{assistant}<|im_end|>"


REWRITE_TONES = ["friendlier", "more formal", "shorter", "clearer"]


def user_message(feature, ex):
    """The user turn for one data line: the text itself; for rewrite, the requested tone as a
    first line, `Make it {tone}:` then a newline and the text (a tone line is what a user types).
    A rewrite line with `"tone_line": false` (only allowed with tone "clearer", about a quarter
    of those) is rendered as the bare text: the app's rewrite chip sends the text alone, and a
    text with no instruction gets the clearer version."""
    if feature == "rewrite" and ex.get("tone") and ex.get("tone_line", True):
        return f"Make it {ex['tone']}:\n{ex['input']}"
    return ex["input"]
