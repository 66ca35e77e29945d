//! A long message read in its parts: lines, and sentences of a long line, each judged on its
//! own by a head trained for it (`Head::parts`).
//!
//! Why: the guard's head was trained on short requests. Read over 512-token windows of pasted
//! prose (an email, a story, a leaflet) it saw text unlike anything it learned and called most
//! of it unsafe (42 of 52 long benign texts refused, docs/eval-report.md), while a request
//! buried in a window was diluted by the prose around it. A request is a line or a sentence:
//! read part by part, a buried one is read whole and alone, and pasted prose is read as what it
//! is, since the parts head learned from lines of pasted texts (safe) and requests buried among
//! them (unsafe). The parts' states still come from the chat's own pass over the whole message,
//! so reading them costs no extra pass.

use std::ops::Range;

use kostant_engine::Model;

use crate::reader::Features;

/// Most tokens in one part: a longer line is cut at sentence ends, and a sentence longer than
/// this at this length. 96 tokens hold any one-paragraph request the training data buries
/// (at most 60 words).
pub const PART_MAX_TOKENS: usize = 96;

/// The parts of the message at `tokens[range]`: runs ending at a token that ends a line; a
/// line longer than `max_len` tokens is cut after sentence ends into runs of at most
/// `max_len`, and a sentence longer than that at `max_len`. Runs of line breaks alone carry no
/// words and are left out.
pub fn part_ranges(
    model: &Model,
    tokens: &[u32],
    range: Range<usize>,
    max_len: usize,
) -> Vec<Range<usize>> {
    let max_len = max_len.max(1);
    let end = range.end.min(tokens.len());
    let texts: Vec<String> = (range.start..end)
        .map(|i| model.tokenizer.decode(&tokens[i..=i]))
        .collect();
    let text_at = |i: usize| texts[i - range.start].as_str();
    let mut out = Vec::new();
    let mut line_start = range.start;
    for i in range.start..end {
        if text_at(i).contains('\n') || i + 1 == end {
            cut_line(line_start..i + 1, &text_at, max_len, &mut out);
            line_start = i + 1;
        }
    }
    out.retain(|r| r.clone().any(|i| !text_at(i).trim().is_empty()));
    out
}

/// Cuts one line into runs of at most `max_len` tokens, after sentence ends where it can.
fn cut_line<'t>(
    line: Range<usize>,
    text_at: &impl Fn(usize) -> &'t str,
    max_len: usize,
    out: &mut Vec<Range<usize>>,
) {
    let mut from = line.start;
    let mut last_sentence_end = None;
    for i in line.clone() {
        if i + 1 - from > max_len {
            let cut = last_sentence_end.filter(|&c| c > from).unwrap_or(i);
            out.push(from..cut);
            from = cut;
            last_sentence_end = None;
        }
        if text_at(i).contains(['.', '!', '?', '。', '！', '？', ';']) {
            last_sentence_end = Some(i + 1);
        }
    }
    if from < line.end {
        out.push(from..line.end);
    }
}

/// The features of each part (per tap: mean and last state over its tokens), from `states`
/// (one (n, n_embd) matrix per tap, row 0 = token 0 of the pass).
pub fn part_features(states: &[Vec<f32>], parts: &[Range<usize>], n_embd: usize) -> Vec<Vec<f32>> {
    let mut features = Features::new(states.len(), n_embd);
    parts
        .iter()
        .filter_map(|r| {
            features.clear();
            features.add_rows(states, r.clone());
            features.vector()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(texts: &[&str], max_len: usize) -> Vec<Range<usize>> {
        let text_at = |i: usize| texts[i];
        let mut out = Vec::new();
        cut_line(0..texts.len(), &text_at, max_len, &mut out);
        out
    }

    #[test]
    fn a_short_line_is_one_part() {
        assert_eq!(cut(&["Give", " me", " that", ".", "\n"], 8), vec![0..5]);
    }

    #[test]
    fn a_long_line_is_cut_after_sentence_ends() {
        // Two sentences of 4 tokens, then one of 3: at most 6 tokens a part.
        let t = ["A", " b", " c", ".", " D", " e", " f", "!", " G", " h", "?"];
        assert_eq!(cut(&t, 6), vec![0..4, 4..8, 8..11]);
    }

    #[test]
    fn a_sentence_longer_than_a_part_is_cut_at_the_limit() {
        let t = ["a"; 10];
        assert_eq!(cut(&t, 4), vec![0..4, 4..8, 8..10]);
    }
}
