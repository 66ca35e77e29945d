//! How well a reply does a feature's job, scored against a reference: ROUGE-L (summaries),
//! exact match and character error rate (proofreading), chrF (replies and rewrites), each a
//! per-example score whose mean gets a 95% bootstrap interval.
//!
//! Definitions follow the papers, not any one package's code: ROUGE-L is the F1 of the longest
//! common subsequence over lower-cased words (Lin 2004); chrF is the character n-gram F-score
//! for n = 1..6 with beta = 2, spaces removed, precisions and recalls averaged over n (Popović
//! 2015); the character error rate is the Levenshtein distance over the reference's length.

use serde::{Deserialize, Serialize};

/// Lower-cased words: runs of letters and digits (an apostrophe inside a word stays in it).
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let inner_apostrophe = (c == '\'' || c == '’')
            && !cur.is_empty()
            && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Length of the longest common subsequence of `a` and `b`.
fn lcs<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diag = 0;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
            diag = up;
        }
    }
    row[b.len()]
}

/// ROUGE-L F1 over words, in [0, 1]; 0 when either side has no words.
pub fn rouge_l(candidate: &str, reference: &str) -> f64 {
    let (c, r) = (words(candidate), words(reference));
    let common = lcs(&c, &r);
    if common == 0 {
        return 0.0;
    }
    let p = common as f64 / c.len() as f64;
    let rec = common as f64 / r.len() as f64;
    2.0 * p * rec / (p + rec)
}

/// Levenshtein distance between `a` and `b`, by characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let next = (diag + usize::from(x != y))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Character error rate: edits to turn `candidate` into `reference`, per reference character
/// (both trimmed). 0 is perfect; it exceeds 1 when the candidate is mostly extra text.
pub fn char_error_rate(candidate: &str, reference: &str) -> f64 {
    let reference = reference.trim();
    let n = reference.chars().count().max(1);
    edit_distance(candidate.trim(), reference) as f64 / n as f64
}

/// Whether the candidate is the reference, up to surrounding white space.
pub fn exact_match(candidate: &str, reference: &str) -> bool {
    candidate.trim() == reference.trim()
}

/// chrF (beta = 2, n = 1..6, spaces removed), in [0, 1].
pub fn chrf(candidate: &str, reference: &str) -> f64 {
    const MAX_N: usize = 6;
    const BETA2: f64 = 4.0;
    let strip = |s: &str| -> Vec<char> { s.chars().filter(|c| !c.is_whitespace()).collect() };
    let (c, r) = (strip(candidate), strip(reference));
    let (mut p_sum, mut r_sum, mut orders) = (0.0, 0.0, 0);
    for n in 1..=MAX_N {
        if c.len() < n || r.len() < n {
            break;
        }
        let (cc, rc) = (ngram_counts(&c, n), ngram_counts(&r, n));
        let matched: usize = cc
            .iter()
            .map(|(g, &k)| k.min(rc.get(g).copied().unwrap_or(0)))
            .sum();
        p_sum += matched as f64 / (c.len() + 1 - n) as f64;
        r_sum += matched as f64 / (r.len() + 1 - n) as f64;
        orders += 1;
    }
    if orders == 0 {
        return 0.0;
    }
    let (p, rec) = (p_sum / orders as f64, r_sum / orders as f64);
    if p + rec == 0.0 {
        return 0.0;
    }
    (1.0 + BETA2) * p * rec / (BETA2 * p + rec)
}

fn ngram_counts(s: &[char], n: usize) -> std::collections::HashMap<&[char], usize> {
    let mut m = std::collections::HashMap::new();
    for g in s.windows(n) {
        *m.entry(g).or_default() += 1;
    }
    m
}

/// The digit strings of `text` ("3", "2024", "15" from "15:30").
pub fn numbers(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut cur = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            cur.push(c);
        } else if !cur.is_empty() {
            out.insert(std::mem::take(&mut cur));
        }
    }
    out
}

/// A mean with its 95% percentile-bootstrap interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mean {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
}

/// Resamples per interval: enough that the 2.5% and 97.5% percentiles move by well under the
/// intervals' own width between seeds.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

impl Mean {
    /// The mean of `scores` and its 95% bootstrap interval (`BOOTSTRAP_RESAMPLES` resamples,
    /// a fixed seed so a report repeats).
    pub fn bootstrap(scores: &[f64]) -> Mean {
        let n = scores.len();
        if n == 0 {
            return Mean {
                mean: 0.0,
                lo: 0.0,
                hi: 0.0,
                n: 0,
            };
        }
        let mean = scores.iter().sum::<f64>() / n as f64;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            // xorshift64*: a fixed, dependency-free stream for resampling.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
            .map(|_| {
                (0..n)
                    .map(|_| scores[(next() % n as u64) as usize])
                    .sum::<f64>()
                    / n as f64
            })
            .collect();
        means.sort_by(f64::total_cmp);
        let at = |q: f64| means[((q * (BOOTSTRAP_RESAMPLES - 1) as f64).round()) as usize];
        Mean {
            mean,
            lo: at(0.025),
            hi: at(0.975),
            n,
        }
    }

    /// "0.412 [0.371, 0.455]".
    pub fn display(&self) -> String {
        format!("{:.3} [{:.3}, {:.3}]", self.mean, self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lower_cased_runs_of_letters_and_digits() {
        assert_eq!(
            words("Don't stop: 3 CATS, l'été!"),
            ["don't", "stop", "3", "cats", "l'été"]
        );
    }

    #[test]
    fn rouge_l_is_the_lcs_f1() {
        // LCS of "the cat sat on the mat" and "the cat is on the mat" is 5 words.
        let f = rouge_l("the cat sat on the mat", "the cat is on the mat");
        assert!((f - 5.0 / 6.0).abs() < 1e-12, "{f}");
        assert_eq!(rouge_l("same words here", "Same words, here."), 1.0);
        assert_eq!(rouge_l("nothing shared", "at all"), 0.0);
        assert_eq!(rouge_l("", "a reference"), 0.0);
        // Order matters: a reversed sentence shares a 1-word subsequence.
        let rev = rouge_l("c b a", "a b c");
        assert!((rev - 1.0 / 3.0).abs() < 1e-12, "{rev}");
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("héllo", "hello"), 1);
        assert_eq!(
            char_error_rate(" I have two cats. ", "I have two cats."),
            0.0
        );
        let cer = char_error_rate("I has two cat.", "I have two cats.");
        assert!((cer - 3.0 / 16.0).abs() < 1e-12, "{cer}");
    }

    #[test]
    fn chrf_is_one_for_equal_texts_and_falls_with_the_overlap() {
        assert!((chrf("Thanks, see you at 5!", "Thanks, see you at 5!") - 1.0).abs() < 1e-12);
        // Spaces are ignored.
        assert!((chrf("seeyou", "see you") - 1.0).abs() < 1e-12);
        let close = chrf("Thanks, see you at five!", "Thanks, see you at 5!");
        let far = chrf("I cannot help with that.", "Thanks, see you at 5!");
        assert!(close > 0.6 && close < 1.0, "{close}");
        assert!(far < 0.2, "{far}");
        assert_eq!(chrf("", "x"), 0.0);
    }

    #[test]
    fn chrf_weighs_recall_twice_as_much_as_precision() {
        // A candidate holding the reference and as much again scores above one holding half
        // of it: beta = 2 favours recall.
        let longer = chrf("abcdefgh zzzzzzzz", "abcdefgh");
        let shorter = chrf("abcd", "abcdefgh");
        assert!(longer > shorter, "{longer} vs {shorter}");
    }

    #[test]
    fn numbers_are_digit_strings() {
        let n = numbers("Meet at 15:30 on the 2nd, room 4B.");
        assert_eq!(
            n.into_iter().collect::<Vec<_>>(),
            ["15", "2", "30", "4"].map(String::from)
        );
    }

    #[test]
    fn the_bootstrap_interval_holds_the_mean_and_narrows_with_n() {
        let few: Vec<f64> = (0..10).map(|i| f64::from(i % 2)).collect();
        let many: Vec<f64> = (0..400).map(|i| f64::from(i % 2)).collect();
        let (a, b) = (Mean::bootstrap(&few), Mean::bootstrap(&many));
        assert!((a.mean - 0.5).abs() < 1e-12 && (b.mean - 0.5).abs() < 1e-12);
        assert!(a.lo < 0.5 && a.hi > 0.5 && b.lo < 0.5 && b.hi > 0.5);
        assert!(b.hi - b.lo < (a.hi - a.lo) / 3.0, "{a:?} {b:?}");
        // A constant has no spread.
        let c = Mean::bootstrap(&[0.7; 20]);
        assert!(
            (c.lo - 0.7).abs() < 1e-12 && (c.hi - 0.7).abs() < 1e-12,
            "{c:?}"
        );
        assert_eq!(Mean::bootstrap(&[]).n, 0);
    }
}
