//! The model's own tokenizer, built in code from the vocabulary a GGUF carries.
//!
//! A GGUF stores the tokenizer as metadata: `tokenizer.ggml.model` (the algorithm), the token
//! strings, their types, BPE merges or scores, the pre-tokenizer name and the special ids. The
//! behaviour follows llama.cpp's `llama-vocab.cpp`, which the golden tests
//! (`tests/tokenizer_golden.rs`) compare against id for id; we keep our own per-token byte
//! table for decoding.
//!
//! Supported:
//! - `gpt2` (byte-level BPE) with the pre-tokenizers listed in `pre.rs`, built as a
//!   `tokenizers::Tokenizer` (HF's BPE model, regex pre-tokenizers, added-token splitting);
//! - `llama` (SentencePiece BPE with scores, `spm.rs`), with special tokens split out as
//!   llama.cpp does (`special.rs`).
//!
//! The rest (`bert`, `t5`, ...) are refused with an error that names them.
//!
//! Token types (`tokenizer.ggml.token_type`): 1 normal, 2 unknown, 3 control, 4 user-defined,
//! 5 unused, 6 byte (0, "undefined", is read as normal). Control and unknown tokens are split
//! out of the text as single ids only when special tokens are parsed; user-defined tokens
//! always are (llama.cpp's `tokenizer_st_partition`, HF's non-special added tokens).

mod byte_level;
mod pre;
mod special;
mod spm;
mod stream;

use std::collections::HashSet;
use std::sync::Arc;

use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, AddedVocabulary, Model, NormalizerWrapper, OffsetType};
use tokenizers::{PreTokenizer, PreTokenizerWrapper, SplitDelimiterBehavior};

pub use stream::StreamDecoder;

use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// Largest vocabulary accepted. Real ones reach about 260k; ids must also fit `u32`.
pub const MAX_VOCAB: usize = 1 << 21;

/// Texts of tokens that end a turn in the chat formats we know, beyond the GGUF's own
/// eos/eot/eom ids. llama.cpp keeps the same list (`special_eog_ids`, as of 0c1e570) because
/// converters do not always record these ids, and treats each as a control token whatever its
/// stored type: Gemma 3's `</s>` is stored user-defined, yet llama.cpp neither splits it out of
/// plain text nor renders it. (llama.cpp then takes `<|end|>` back out when `<|return|>` and
/// `<|call|>` are present, and `</s>` when `<|tool_response>` is: gpt-oss and Gemma 4
/// vocabularies, whose pre-tokenizers we refuse, so that is not repeated here.)
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];

/// What a token is, from `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenKind {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenKind {
    fn from_gguf(t: i32) -> Option<TokenKind> {
        Some(match t {
            0 | 1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => return None,
        })
    }

    /// Tokens that stand for a role or an event rather than text: not rendered by `decode`,
    /// and only recognised in input text when special tokens are parsed.
    fn is_special(self) -> bool {
        matches!(self, TokenKind::Control | TokenKind::Unknown)
    }
}

/// The tokenizer of one model. A cheap handle: clones share one immutable vocabulary, and it
/// is `Send + Sync`, so a model and every stream decoder can hold it.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    algorithm: Algorithm,
    kinds: Vec<TokenKind>,
    /// The bytes of every token back to back; token `i` is `pieces[ends[i-1]..ends[i]]`.
    pieces: Vec<u8>,
    ends: Vec<usize>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    /// Whether decoding drops one leading space from the first token (llama.cpp's
    /// `llama_detokenize` does when the vocabulary adds a space prefix when encoding).
    strip_leading_space: bool,
    end_of_generation: Vec<u32>,
}

/// How text becomes ids.
enum Algorithm {
    ByteLevelBpe {
        /// Splits control and user-defined tokens out of the text, then runs BPE on the rest.
        hf: Box<tokenizers::Tokenizer>,
        /// The user-defined tokens alone, for encoding with control tokens as plain text. HF
        /// keeps its "special tokens as text" switch on the tokenizer, not per call; a second
        /// added vocabulary in front of the same pre-tokenizer and BPE costs far less than a
        /// second tokenizer (which would copy the vocabulary and merges).
        user_defined: Box<AddedVocabulary>,
    },
    SentencePiece {
        specials: special::SpecialTokens,
        spm: spm::Spm,
    },
}

/// What `from_gguf` read that only one algorithm uses.
enum ModelSpec<'a> {
    ByteLevelBpe {
        merges: Vec<&'a str>,
        pre: pre::PreTokenizer,
    },
    SentencePiece {
        scores: Option<Vec<f32>>,
        unk: Option<u32>,
        add_space_prefix: bool,
    },
}

/// The vocabularies we build (`tokenizer.ggml.model`), with what users call them.
pub const SUPPORTED_MODELS: [(&str, &str); 2] =
    [("gpt2", "byte-level BPE"), ("llama", "SentencePiece BPE")];

impl Tokenizer {
    /// Builds the tokenizer described by `g`'s `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        if !SUPPORTED_MODELS.iter().any(|(m, _)| *m == model) {
            let what = match model {
                "bert" => " (WordPiece)",
                "t5" => " (Unigram)",
                _ => "",
            };
            let known: Vec<String> = SUPPORTED_MODELS
                .iter()
                .map(|(m, name)| format!("{m:?} ({name})"))
                .collect();
            return Err(EngineError::Tokenizer(format!(
                "unsupported tokenizer model {model:?}{what} (tokenizer.ggml.model); \
                 supported: {}",
                known.join(", ")
            )));
        }
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?;
        let types = g.get_i32_array_opt("tokenizer.ggml.token_type")?;
        let id = |key: &str| -> Result<Option<u32>> {
            // An id outside the vocabulary is ignored, as llama.cpp does, rather than trusted.
            Ok(g.get_u32_opt(key)?.filter(|&i| (i as usize) < tokens.len()))
        };
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let eot = id("tokenizer.ggml.eot_token_id")?;
        let eom = id("tokenizer.ggml.eom_token_id")?;
        let (spec, default_add_bos) = if model == "gpt2" {
            let merges = g
                .get_str_array_opt("tokenizer.ggml.merges")?
                .ok_or_else(|| {
                    EngineError::Tokenizer(
                        "byte-level BPE vocabulary has no merges (tokenizer.ggml.merges)".into(),
                    )
                })?;
            let pre = pre::for_name(g.get_str_opt("tokenizer.ggml.pre")?)?;
            let default_add_bos = pre.default_add_bos;
            (ModelSpec::ByteLevelBpe { merges, pre }, default_add_bos)
        } else {
            // llama.cpp ignores tokenizer.ggml.pre for SentencePiece vocabularies, adds BOS and
            // a space prefix unless the GGUF says otherwise.
            let spec = ModelSpec::SentencePiece {
                scores: g.get_f32_array_opt("tokenizer.ggml.scores")?,
                unk: id("tokenizer.ggml.unknown_token_id")?,
                add_space_prefix: g
                    .get_bool_opt("tokenizer.ggml.add_space_prefix")?
                    .unwrap_or(true),
            };
            (spec, true)
        };
        let add_bos = g
            .get_bool_opt("tokenizer.ggml.add_bos_token")?
            .unwrap_or(default_add_bos);
        Vocabulary {
            tokens: &tokens,
            types: types.as_deref(),
            spec,
            bos,
            eos,
            eot_like: [eot, eom].into_iter().flatten().collect(),
            add_bos,
        }
        .build()
    }

    /// Token ids of `text`. With `parse_special`, the text of a control token (such as
    /// `<|im_start|>`) becomes that token; without, it is tokenized like any other text, which
    /// is what user-supplied content needs. Never adds BOS: see [`Tokenizer::add_bos`].
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let (hf, user_defined) = match &self.inner.algorithm {
            Algorithm::ByteLevelBpe { hf, user_defined } => (hf, user_defined),
            Algorithm::SentencePiece { specials, spm } => {
                let mut ids = Vec::new();
                spm.encode(&specials.split(text, parse_special), &mut ids)?;
                return Ok(ids);
            }
        };
        let encoding = if parse_special {
            hf.encode_fast(text, false)
        } else {
            Self::encode_specials_as_text(hf, user_defined, text)
        };
        let encoding = encoding.map_err(|e| {
            EngineError::Tokenizer(format!("cannot tokenize {} bytes of text: {e}", text.len()))
        })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// HF's encoding pipeline (`encode_single_sequence`: split out added tokens, pre-tokenize,
    /// run the model) with only the user-defined tokens split out.
    fn encode_specials_as_text(
        hf: &tokenizers::Tokenizer,
        user_defined: &AddedVocabulary,
        text: &str,
    ) -> tokenizers::Result<tokenizers::Encoding> {
        let mut words = user_defined.extract_and_normalize(None::<&NormalizerWrapper>, text);
        if let Some(pre) = hf.get_pre_tokenizer() {
            pre.pre_tokenize(&mut words)?;
        }
        words.tokenize(|word| hf.get_model().tokenize(word.get()))?;
        words.into_encoding(None, 0, OffsetType::None)
    }

    /// The text of `ids`. Control and unknown tokens render as nothing; bytes that are not
    /// valid UTF-8 (a character cut off by the end of `ids`) render as U+FFFD. Ids outside the
    /// vocabulary are skipped. If the vocabulary adds a space prefix when encoding
    /// (SentencePiece with `add_space_prefix`), the first id's leading space is dropped, as
    /// llama.cpp's `llama_detokenize` does, so that `decode(encode(text))` is `text`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            self.append_text_bytes(id, i == 0, &mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The raw bytes of one token: a normal token's bytes after undoing the byte-level or
    /// "▁" spelling (possibly part of a UTF-8 character), a byte token's byte, a control
    /// token's own text. Empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.piece(id).unwrap_or_default().to_vec()
    }

    /// Appends what `id` contributes to decoded text: nothing for special tokens. `first`
    /// says whether it opens the text (see [`Tokenizer::decode`] on the leading space).
    fn append_text_bytes(&self, id: u32, first: bool, out: &mut Vec<u8>) {
        let kind = self.inner.kinds.get(id as usize);
        if let (Some(kind), Some(mut piece)) = (kind, self.piece(id)) {
            if !kind.is_special() {
                if first && self.inner.strip_leading_space {
                    piece = piece.strip_prefix(b" ").unwrap_or(piece);
                }
                out.extend_from_slice(piece);
            }
        }
    }

    fn piece(&self, id: u32) -> Option<&[u8]> {
        let inner = &*self.inner;
        let i = id as usize;
        let end = *inner.ends.get(i)?;
        let start = if i == 0 { 0 } else { inner.ends[i - 1] };
        Some(&inner.pieces[start..end])
    }

    /// Number of tokens in the vocabulary (the rows of the embedding matrix).
    pub fn vocab_size(&self) -> usize {
        self.inner.kinds.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.inner.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.inner.eos
    }

    /// Whether a prompt should start with BOS (`tokenizer.ggml.add_bos_token`, else the
    /// pre-tokenizer family's default). When true, [`Tokenizer::bos_id`] is `Some`.
    pub fn add_bos(&self) -> bool {
        self.inner.add_bos
    }

    /// The id of the token whose vocabulary entry is exactly `text`, such as `"<|im_end|>"`.
    /// Normal tokens are spelled as stored: in the byte-level alphabet (`"Ġthe"` for " the"),
    /// or with SentencePiece's "▁" for spaces (`"▁the"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.inner.algorithm {
            Algorithm::ByteLevelBpe { hf, .. } => hf.token_to_id(text),
            Algorithm::SentencePiece { spm, .. } => spm.token_id(text),
        }
    }

    /// Whether `id` is a control token (a role marker, BOS, EOS and the like).
    pub fn is_control(&self, id: u32) -> bool {
        self.inner.kinds.get(id as usize) == Some(&TokenKind::Control)
    }

    /// Ids that end a reply: EOS, the GGUF's eot/eom ids, and the end-of-turn tokens of known
    /// chat formats present in the vocabulary. Sorted, without duplicates.
    pub fn end_of_generation_ids(&self) -> Vec<u32> {
        self.inner.end_of_generation.clone()
    }
}

/// Everything `from_gguf` read, before validation and assembly.
struct Vocabulary<'a> {
    tokens: &'a [&'a str],
    types: Option<&'a [i32]>,
    spec: ModelSpec<'a>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot_like: Vec<u32>,
    add_bos: bool,
}

impl Vocabulary<'_> {
    fn build(self) -> Result<Tokenizer> {
        let n = self.tokens.len();
        if n == 0 || n > MAX_VOCAB {
            return Err(EngineError::Tokenizer(format!(
                "vocabulary has {n} tokens (tokenizer.ggml.tokens); expected 1 to {MAX_VOCAB}"
            )));
        }
        let mut kinds = self.kinds()?;
        if self.add_bos && self.bos.is_none() {
            return Err(EngineError::Tokenizer(
                "add_bos_token is set but there is no valid tokenizer.ggml.bos_token_id".into(),
            ));
        }

        let mut end_of_generation: Vec<u32> = self
            .eos
            .into_iter()
            .chain(self.eot_like.iter().copied())
            .collect();
        for (i, t) in self.tokens.iter().enumerate() {
            if END_OF_GENERATION_TEXTS.contains(t) {
                end_of_generation.push(i as u32);
                kinds[i] = TokenKind::Control;
            }
        }
        end_of_generation.sort_unstable();
        end_of_generation.dedup();

        let (pieces, ends) = self.pieces(&kinds);
        let (algorithm, strip_leading_space) = match &self.spec {
            ModelSpec::ByteLevelBpe { merges, pre } => {
                let hf = self.hf_tokenizer(&kinds, merges, pre)?;
                let mut user_defined = AddedVocabulary::new();
                user_defined.add_tokens(
                    &self.added_tokens(&kinds, |k| k == TokenKind::UserDefined),
                    hf.get_model(),
                    None::<&NormalizerWrapper>,
                );
                let (hf, user_defined) = (Box::new(hf), Box::new(user_defined));
                (Algorithm::ByteLevelBpe { hf, user_defined }, false)
            }
            ModelSpec::SentencePiece {
                scores,
                unk,
                add_space_prefix,
            } => {
                let specials = special::SpecialTokens::new(self.tokens, &kinds)?;
                let spm = spm::Spm::new(self.tokens, scores.as_deref(), *unk, *add_space_prefix)?;
                (
                    Algorithm::SentencePiece { specials, spm },
                    *add_space_prefix,
                )
            }
        };
        Ok(Tokenizer {
            inner: Arc::new(Inner {
                algorithm,
                kinds,
                pieces,
                ends,
                bos: self.bos,
                eos: self.eos,
                add_bos: self.add_bos,
                strip_leading_space,
                end_of_generation,
            }),
        })
    }

    fn kinds(&self) -> Result<Vec<TokenKind>> {
        let Some(types) = self.types else {
            return Ok(vec![TokenKind::Normal; self.tokens.len()]);
        };
        if types.len() != self.tokens.len() {
            return Err(EngineError::Tokenizer(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                self.tokens.len()
            )));
        }
        types
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                TokenKind::from_gguf(t).ok_or_else(|| {
                    EngineError::Tokenizer(format!(
                        "token {i} ({:?}) has type {t} (tokenizer.ggml.token_type); expected 0 to 6",
                        self.tokens[i]
                    ))
                })
            })
            .collect()
    }

    /// Every token's bytes, concatenated, with the end offset of each.
    fn pieces(&self, kinds: &[TokenKind]) -> (Vec<u8>, Vec<usize>) {
        let decoder = byte_level::ByteDecoder::new();
        let mut pieces = Vec::with_capacity(self.tokens.iter().map(|t| t.len()).sum());
        let mut ends = Vec::with_capacity(self.tokens.len());
        for (token, kind) in self.tokens.iter().zip(kinds) {
            match kind {
                TokenKind::Normal | TokenKind::Unused => match self.spec {
                    ModelSpec::ByteLevelBpe { .. } => decoder.decode_into(token, &mut pieces),
                    ModelSpec::SentencePiece { .. } => {
                        // SentencePiece spells a space "▁" (llama.cpp's unescape_whitespace).
                        for (i, part) in token.split('\u{2581}').enumerate() {
                            if i > 0 {
                                pieces.push(b' ');
                            }
                            pieces.extend_from_slice(part.as_bytes());
                        }
                    }
                },
                TokenKind::Byte => match parse_byte_token(token) {
                    Some(b) => pieces.push(b),
                    None => pieces.extend_from_slice(token.as_bytes()),
                },
                TokenKind::Unknown | TokenKind::Control | TokenKind::UserDefined => {
                    pieces.extend_from_slice(token.as_bytes())
                }
            }
            ends.push(pieces.len());
        }
        (pieces, ends)
    }

    /// The HF tokenizer: BPE over the vocabulary and merges, the family's regex splits, then
    /// the byte-level spelling, with control and user-defined tokens as added tokens.
    ///
    /// Vocabularies need not hold a token for every byte (SmolLM2 has none for 0x04, 0x06,
    /// 0x13, 0x14, 0x16, 0x1D and some bytes above 0xF0). Such bytes are dropped from the ids,
    /// by HF's BPE (no unknown token) as by llama.cpp, so both agree on those inputs too.
    fn hf_tokenizer(
        &self,
        kinds: &[TokenKind],
        merges: &[&str],
        pre: &pre::PreTokenizer,
    ) -> Result<tokenizers::Tokenizer> {
        let bad = |what: String| EngineError::Tokenizer(what);
        let vocab: Vocab = self
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges = Self::merges(merges, &vocab)?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges)
            .build()
            .map_err(|e| bad(format!("cannot build BPE from the vocabulary: {e}")))?;

        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(pre.regexes.len() + 1);
        for re in pre.regexes {
            let split = Split::new(
                SplitPattern::Regex((*re).into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| bad(format!("pre-tokenizer regex {re:?}: {e}")))?;
            steps.push(split.into());
        }
        // Words are already cut; this step only spells their bytes in the byte-level alphabet.
        steps.push(ByteLevel::new(false, false, false).into());

        let mut hf = tokenizers::Tokenizer::new(bpe);
        hf.with_pre_tokenizer(Some(Sequence::new(steps)));
        hf.add_tokens(&self.added_tokens(kinds, |k| k.is_special() || k == TokenKind::UserDefined));
        Ok(hf)
    }

    /// The tokens of the kinds `pick` accepts as HF added tokens: "special" (split out only
    /// when special tokens are parsed) for control and unknown tokens, plain for user-defined.
    fn added_tokens(
        &self,
        kinds: &[TokenKind],
        pick: impl Fn(TokenKind) -> bool,
    ) -> Vec<AddedToken> {
        self.tokens
            .iter()
            .zip(kinds)
            .filter(|&(t, &k)| !t.is_empty() && pick(k))
            .map(|(t, k)| AddedToken::from(*t, k.is_special()))
            .collect()
    }

    /// The merges as token pairs, in rank order. Each entry is "left right" (split at the first
    /// space after the first character, as llama.cpp does, since the left token may itself be
    /// a space). A pair seen twice keeps its first rank. Merges whose parts or result are not in
    /// the vocabulary can never produce a token and are dropped (HF's BPE refuses them).
    fn merges(merges: &[&str], vocab: &Vocab) -> Result<Merges> {
        let mut seen = HashSet::with_capacity(merges.len());
        let mut out = Vec::with_capacity(merges.len());
        let mut joined = String::new();
        for (i, m) in merges.iter().enumerate() {
            let first = m.chars().next().map_or(0, char::len_utf8);
            let split = m[first..]
                .find(' ')
                .filter(|_| first > 0)
                .map(|p| p + first);
            let Some(pos) = split else {
                return Err(EngineError::Tokenizer(format!(
                    "merge {i} ({m:?}) is not two tokens separated by a space (tokenizer.ggml.merges)"
                )));
            };
            let (left, right) = (&m[..pos], &m[pos + 1..]);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let ids = (
                vocab.get(left),
                vocab.get(right),
                vocab.contains_key(joined.as_str()),
            );
            if let (Some(&l), Some(&r), true) = ids {
                if seen.insert((l, r)) {
                    out.push((left.to_string(), right.to_string()));
                }
            }
        }
        Ok(out)
    }
}

/// The byte of a SentencePiece-style byte token such as `<0x0A>`.
fn parse_byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

#[cfg(test)]
mod tests;
