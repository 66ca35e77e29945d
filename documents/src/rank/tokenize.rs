//! The words BM25 counts: lower-cased runs of letters and digits, common English function
//! words dropped, and plurals folded to their singular (an S-stemmer: "ponds" → "pond",
//! "lilies" → "lily"), so a query's words meet the text's in either number.

/// English words too common to say anything about a chunk.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no",
    "not", "of", "on", "or", "our", "so", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why",
    "will", "with", "you", "your",
];

/// Calls `f` with each term of `text`, in order; one buffer is reused, so nothing is
/// allocated per word.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::new();
    for piece in text.split(|c: char| !c.is_alphanumeric()) {
        if piece.is_empty() {
            continue;
        }
        word.clear();
        word.extend(piece.chars().flat_map(char::to_lowercase));
        if STOP_WORDS.contains(&word.as_str()) {
            continue;
        }
        stem(&mut word);
        f(&word);
    }
}

/// The terms of `text` as owned strings.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_string()));
    out
}

/// Harman's S-stemmer: "-ies" → "-y", "-es" → "-e", "-s" → "", with its exceptions ("-aies",
/// "-eies", "-aes", "-ees", "-oes", "-us", "-ss"); words of three letters or fewer and
/// non-ASCII words are left alone.
fn stem(word: &mut String) {
    if word.len() <= 3 || !word.is_ascii() {
        return;
    }
    if let Some(base) = word.strip_suffix("ies") {
        if !base.ends_with(['a', 'e']) {
            word.truncate(word.len() - 3);
            word.push('y');
        }
    } else if let Some(base) = word.strip_suffix("es") {
        if !base.ends_with(['a', 'e', 'o']) {
            word.truncate(word.len() - 1);
        }
    } else if let Some(base) = word.strip_suffix('s') {
        if !base.ends_with(['u', 's']) {
            word.truncate(word.len() - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowered_stopped_and_singular() {
        assert_eq!(
            terms("How do the Water-Lilies grow in PONDS? Glass, buses; Øresund 42 s"),
            ["water", "lily", "grow", "pond", "glass", "buse", "øresund", "42", "s"]
        );
    }
}
