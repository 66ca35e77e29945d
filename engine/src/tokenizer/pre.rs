//! Pre-tokenizers of byte-level BPE vocabularies, chosen by the GGUF key `tokenizer.ggml.pre`.
//!
//! A pre-tokenizer cuts text into words before BPE merges run inside each word. llama.cpp
//! (`llama-vocab.cpp`, `llm_tokenizer_bpe`) describes each one as a list of regexes applied in
//! turn: every regex splits each piece left by the previous one into its matches and the
//! stretches between them, all kept ("isolated"). The regexes below are llama.cpp's, written
//! for `fancy-regex`; where llama.cpp spells a case-insensitive contraction as `'[sS]` (ASCII
//! only, unlike Unicode-folding `(?i:'s)`) we keep its spelling so both agree on every input.

use crate::{EngineError, Result};

/// GPT-2's word regex. llama.cpp's copy omits the final `|\s+`, but its hand-written splitter
/// (`unicode_regex_split_custom_gpt2`) implements it, and a split keeps unmatched stretches
/// anyway, so the full form is the faithful one.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3's regex: digits in groups of up to three, letters with one leading non-letter.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's regex: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How one family of vocabularies is pre-tokenized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizer {
    /// The regexes, applied in order, each splitting the pieces of the one before.
    pub(crate) regexes: &'static [&'static str],
    /// A word that is itself in the vocabulary becomes that one token without running merges
    /// (llama.cpp's `ignore_merges`, set for the Llama 3 family).
    pub(crate) ignore_merges: bool,
    /// Whether a BOS token is added when the GGUF has no `tokenizer.ggml.add_bos_token`.
    pub(crate) default_add_bos: bool,
}

/// The pre-tokenizer for the value of `tokenizer.ggml.pre`; `None` (key absent) means
/// llama.cpp's "default". Names are llama.cpp's; each group shares one llama.cpp pre type
/// whose other settings only affect detokenization, which we do not clean up.
pub(crate) fn for_name(pre: Option<&str>) -> Result<PreTokenizer> {
    let spec = |regexes, ignore_merges, default_add_bos| PreTokenizer {
        regexes,
        ignore_merges,
        default_add_bos,
    };
    Ok(match pre.unwrap_or("default") {
        // llama.cpp's fallback for BPE vocabularies converted without a pre-tokenizer name.
        "default" => spec(
            &[
                r"[\p{P}\$\+<=>\^~\|]+",
                r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                r"\p{N}+",
                r"[0-9][0-9][0-9]",
            ],
            false,
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => spec(&[LLAMA3], true, true),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => spec(&[QWEN2], false, false),
        // SmolLM, StarCoder and friends: every digit alone, then GPT-2's regex.
        "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva-7b" => {
            spec(&[r"\p{N}", GPT2], false, false)
        }
        // llama.cpp spells GPT-2's own name "gpt-2"; "gpt2" is accepted as the same thing.
        "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" | "jais" => spec(&[GPT2], false, false),
        other => {
            return Err(EngineError::Tokenizer(format!(
                "unsupported pre-tokenizer {other:?} (tokenizer.ggml.pre); supported: default, \
                 llama-bpe, qwen2, smollm, gpt-2 and their aliases"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_resolve_and_unknown_names_are_named_in_the_error() {
        assert_eq!(for_name(Some("smollm")).unwrap().regexes.len(), 2);
        assert!(for_name(Some("llama-bpe")).unwrap().ignore_merges);
        assert_eq!(for_name(None).unwrap(), for_name(Some("default")).unwrap());
        let err = for_name(Some("klingon")).unwrap_err().to_string();
        assert!(err.contains("\"klingon\""), "{err}");
    }

    #[test]
    fn every_regex_compiles() {
        for name in ["default", "llama-bpe", "qwen2", "smollm", "gpt-2"] {
            for re in for_name(Some(name)).unwrap().regexes {
                fancy_regex_compiles(re);
            }
        }
    }

    fn fancy_regex_compiles(re: &str) {
        use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
        use tokenizers::SplitDelimiterBehavior;
        Split::new(
            SplitPattern::Regex(re.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .unwrap_or_else(|e| panic!("{re}: {e}"));
    }
}
