//! BERT's WordPiece tokenizer, built from the GGUF's vocabulary through the `tokenizers` crate
//! (the normalizer, pre-tokenizer and model sentence-transformers' `tokenizer.json` names), so
//! that its ids are the reference tokenizer's.
//!
//! llama.cpp's converter stores the vocabulary in a "phantom space" spelling: a word-initial
//! piece carries a leading U+2581, a continuation piece ("##ing" in BERT's own vocabulary) is
//! stored bare, control tokens ([CLS], [SEP], ...) unchanged. Reading it back undoes that, with
//! the token types telling the control tokens apart.

use std::collections::HashSet;

use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::AddedToken;

use crate::gguf::Gguf;
use crate::{EngineError, Result};

const PHANTOM_SPACE: char = '\u{2581}';
const CONTINUATION: &str = "##";
// llama.cpp's token types: control and user-defined tokens are kept as written.
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;
// BERT's WordPiece gives up on a longer word and emits [UNK] (tokenizer.json's setting).
const MAX_WORD_CHARS: usize = 100;
// llama.cpp's defaults for a `bert` vocabulary that names no id.
const DEFAULT_UNK: u32 = 100;
const DEFAULT_CLS: u32 = 101;
const DEFAULT_SEP: u32 = 102;

pub struct WordPieceTokenizer {
    hf: tokenizers::Tokenizer,
    cls: u32,
    sep: u32,
}

impl WordPieceTokenizer {
    pub fn from_gguf(g: &Gguf, n_vocab: usize) -> Result<WordPieceTokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        if model != "bert" {
            return Err(EngineError::Tokenizer(format!(
                "tokenizer model {model:?} is not bert's WordPiece"
            )));
        }
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?;
        let types = g.get_i32_array("tokenizer.ggml.token_type")?;
        if tokens.len() != n_vocab || types.len() != n_vocab {
            return Err(EngineError::Tokenizer(format!(
                "{} tokens and {} token types for an embedding of {n_vocab} rows",
                tokens.len(),
                types.len()
            )));
        }
        let id = |key: &str, default: u32| special_id(g, key, default, n_vocab);
        let unk = id("tokenizer.ggml.unknown_token_id", DEFAULT_UNK)?;
        let cls = id("tokenizer.ggml.cls_token_id", DEFAULT_CLS)?;
        let sep = id("tokenizer.ggml.seperator_token_id", DEFAULT_SEP)?;
        let pieces: Vec<String> = tokens
            .iter()
            .zip(&types)
            .map(|(t, &ty)| wordpiece_spelling(t, ty))
            .collect();
        let hf = build(&pieces, &types, &pieces[unk as usize])?;
        Ok(WordPieceTokenizer { hf, cls, sep })
    }

    /// The ids of `text` between [CLS] and [SEP], cut to `max_tokens` in all by dropping the
    /// text's last pieces (as the reference tokenizer truncates).
    pub fn encode(&self, text: &str, max_tokens: usize) -> Result<Vec<u32>> {
        let body = self.pieces(text)?;
        let keep = body.len().min(max_tokens.saturating_sub(2));
        let mut ids = Vec::with_capacity(keep + 2);
        ids.push(self.cls);
        ids.extend_from_slice(&body[..keep]);
        ids.push(self.sep);
        Ok(ids)
    }

    /// How many tokens `text` takes, [CLS] and [SEP] included, before any truncation.
    pub fn count(&self, text: &str) -> Result<usize> {
        Ok(self.pieces(text)?.len() + 2)
    }

    fn pieces(&self, text: &str) -> Result<Vec<u32>> {
        // Special tokens written in the text ("[SEP]") are matched as the reference does; an
        // encoder has no control flow they could forge.
        let enc = self
            .hf
            .encode_fast(text, false)
            .map_err(|e| EngineError::Tokenizer(format!("encoding text: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }
}

/// A token in BERT's own spelling, from llama.cpp's phantom-space one.
fn wordpiece_spelling(token: &str, ty: i32) -> String {
    if ty == TOKEN_CONTROL || ty == TOKEN_USER_DEFINED {
        return token.to_owned();
    }
    match token.strip_prefix(PHANTOM_SPACE) {
        Some(word_start) => word_start.to_owned(),
        None => format!("{CONTINUATION}{token}"),
    }
}

fn special_id(g: &Gguf, key: &str, default: u32, n_vocab: usize) -> Result<u32> {
    let id = g.get_u32_opt(key)?.unwrap_or(default);
    if id as usize >= n_vocab {
        return Err(EngineError::Tokenizer(format!(
            "key {key}: id {id} is outside the vocabulary of {n_vocab}"
        )));
    }
    Ok(id)
}

/// The `tokenizers` pipeline of an uncased BERT: clean-up, CJK characters split out, accents
/// stripped and lower case, split on whitespace and punctuation, WordPiece.
fn build(pieces: &[String], types: &[i32], unk: &str) -> Result<tokenizers::Tokenizer> {
    let mut vocab = Vocab::with_capacity(pieces.len());
    for (i, p) in pieces.iter().enumerate() {
        // A repeated spelling keeps its first id, as a JSON vocabulary can hold only one.
        vocab.entry(p.clone()).or_insert(i as u32);
    }
    let model = WordPiece::builder()
        .vocab(vocab)
        .unk_token(unk.to_owned())
        .continuing_subword_prefix(CONTINUATION.to_owned())
        .max_input_chars_per_word(MAX_WORD_CHARS)
        .build()
        .map_err(|e| EngineError::Tokenizer(format!("building WordPiece: {e}")))?;
    let mut hf = tokenizers::Tokenizer::new(model);
    hf.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
    hf.with_pre_tokenizer(Some(BertPreTokenizer));
    let mut seen = HashSet::new();
    let specials: Vec<AddedToken> = pieces
        .iter()
        .zip(types)
        .filter(|(p, &ty)| ty == TOKEN_CONTROL && !p.is_empty() && seen.insert(p.as_str()))
        .map(|(p, _)| AddedToken::from(p.clone(), true))
        .collect();
    hf.add_special_tokens(&specials);
    Ok(hf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phantom_space_spelling_is_undone() {
        assert_eq!(wordpiece_spelling("\u{2581}hello", 1), "hello");
        assert_eq!(wordpiece_spelling("ing", 1), "##ing");
        assert_eq!(wordpiece_spelling("[CLS]", TOKEN_CONTROL), "[CLS]");
        assert_eq!(wordpiece_spelling("\u{2581}[PAD7]", 5), "[PAD7]");
    }
}
