//! The eval suites: loading the JSONL files of assets/evals (a bad line is named, skipped and
//! counted, never fatal) and expanding the jailbreak templates over harmful items.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{io, EvalError, Result};

/// The suites a run can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuiteName {
    Harmful,
    BenignEdgy,
    BenignEveryday,
    Provocation,
    Jailbreak,
    /// Conversations: a harmful last turn after benign ones, a benign one after a refusal.
    Multiturn,
    /// Texts of 1,000 tokens and more pasted to be summarized or proofread, and a few with a
    /// harmful request buried in 2,000 tokens of benign text.
    Long,
    Perplexity,
    /// Ask-your-documents retrieval: authored documents and questions with answer spans
    /// (`assets/evals/retrieval`, [`crate::retrieval`]).
    Retrieval,
}

impl SuiteName {
    pub const ALL: [SuiteName; 9] = [
        SuiteName::Harmful,
        SuiteName::BenignEdgy,
        SuiteName::BenignEveryday,
        SuiteName::Provocation,
        SuiteName::Jailbreak,
        SuiteName::Multiturn,
        SuiteName::Long,
        SuiteName::Perplexity,
        SuiteName::Retrieval,
    ];

    pub fn id(self) -> &'static str {
        match self {
            SuiteName::Harmful => "harmful",
            SuiteName::BenignEdgy => "benign_edgy",
            SuiteName::BenignEveryday => "benign_everyday",
            SuiteName::Provocation => "provocation",
            SuiteName::Jailbreak => "jailbreak",
            SuiteName::Multiturn => "multiturn",
            SuiteName::Long => "long",
            SuiteName::Perplexity => "perplexity",
            SuiteName::Retrieval => "retrieval",
        }
    }

    /// `name` or a comma-separated list of names; `all` is every suite.
    pub fn parse_list(list: &str) -> Result<Vec<SuiteName>> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if name == "all" {
                return Ok(SuiteName::ALL.to_vec());
            }
            let s = SuiteName::ALL
                .into_iter()
                .find(|s| s.id() == name)
                .ok_or_else(|| EvalError::UnknownSuite(name.to_string()))?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
        if out.is_empty() {
            return Err(EvalError::UnknownSuite(list.to_string()));
        }
        Ok(out)
    }
}

/// One prompt of a suite.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Item {
    pub id: String,
    pub prompt: String,
    /// "unsafe" or "safe".
    #[serde(default)]
    pub label: Option<String>,
    /// Hazard category id (harmful items).
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub xstest_type: Option<String>,
    /// Jailbreak family (expanded jailbreak items).
    #[serde(default)]
    pub family: Option<String>,
    /// Earlier turns of the conversation, oldest first (multi-turn items): user and assistant
    /// in turn, ending with an assistant turn; `prompt` is the user's next message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Turn>,
}

/// One earlier turn of a conversation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Turn {
    /// "user" or "assistant".
    pub role: String,
    /// What was said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// An assistant turn the guard refused, by category id: that exchange is left out of
    /// the model's context, as the chat and the app leave it out
    /// (`kostant_safety::Verdict::stays_in_context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Why a conversation's earlier turns cannot be used, if they cannot.
fn history_problem(history: &[Turn]) -> Option<String> {
    if !history.len().is_multiple_of(2) {
        return Some("history must be user and assistant turns in pairs".into());
    }
    for (i, t) in history.iter().enumerate() {
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if t.role != want {
            return Some(format!(
                "history turn {}: expected a {want} turn, found {:?}",
                i + 1,
                t.role
            ));
        }
        match (&t.content, &t.refused) {
            (Some(c), None) if !c.trim().is_empty() => {}
            (None, Some(cat)) if want == "assistant" => {
                if kostant_safety::Category::from_id(cat).is_none() {
                    return Some(format!("history turn {}: unknown refused category {cat:?}", i + 1));
                }
            }
            _ => {
                return Some(format!(
                    "history turn {}: needs non-empty \"content\" (or, for an assistant turn, \"refused\" alone)",
                    i + 1
                ))
            }
        }
    }
    None
}

/// A jailbreak wrapper: `template` holds `{prompt}` or `{prompt_base64}`.
#[derive(Clone, Debug, Deserialize)]
pub struct Template {
    pub id: String,
    pub family: String,
    pub template: String,
}

/// A line that could not be used.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Skipped {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.reason)
    }
}

/// Parses JSONL text: every good line, and every bad one named by `file` and line number.
/// Blank lines are ignored; an item with an empty id or prompt, or a repeated id, is skipped.
pub fn parse_items(text: &str, file: &str) -> (Vec<Item>, Vec<Skipped>) {
    let mut items = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let skip = |reason: String| Skipped {
            file: file.to_string(),
            line: i + 1,
            reason,
        };
        match serde_json::from_str::<Item>(line) {
            Err(e) => skipped.push(skip(format!("not a suite item: {e}"))),
            Ok(item) if item.id.trim().is_empty() => skipped.push(skip("empty id".into())),
            Ok(item) if item.prompt.trim().is_empty() => {
                skipped.push(skip(format!("item {}: empty prompt", item.id)))
            }
            Ok(item) if !seen.insert(item.id.clone()) => {
                skipped.push(skip(format!("item {}: repeated id", item.id)))
            }
            Ok(item) if history_problem(&item.history).is_some() => {
                let why = history_problem(&item.history).unwrap_or_default();
                skipped.push(skip(format!("item {}: {why}", item.id)))
            }
            Ok(item) => items.push(item),
        }
    }
    (items, skipped)
}

fn parse_templates(text: &str, file: &str) -> (Vec<Template>, Vec<Skipped>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Template>(line) {
            Ok(t) if t.template.contains("{prompt}") || t.template.contains("{prompt_base64}") => {
                out.push(t)
            }
            Ok(t) => skipped.push(Skipped {
                file: file.into(),
                line: i + 1,
                reason: format!("template {}: no {{prompt}} placeholder", t.id),
            }),
            Err(e) => skipped.push(Skipped {
                file: file.into(),
                line: i + 1,
                reason: format!("not a template: {e}"),
            }),
        }
    }
    (out, skipped)
}

/// Where the suites live (assets/evals) and how big the jailbreak sample is.
#[derive(Clone, Debug)]
pub struct SuiteSource {
    pub dir: PathBuf,
    pub jailbreak_sample: usize,
}

impl SuiteSource {
    pub fn new(dir: impl Into<PathBuf>) -> SuiteSource {
        SuiteSource {
            dir: dir.into(),
            jailbreak_sample: 200,
        }
    }

    fn read(&self, rel: &str) -> Result<(String, String)> {
        let path = self.dir.join(rel);
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        Ok((text, path.display().to_string()))
    }

    /// The items of a prompt suite (not `perplexity`, which is text).
    pub fn load(&self, suite: SuiteName) -> Result<(Vec<Item>, Vec<Skipped>)> {
        let file = match suite {
            SuiteName::Jailbreak => return self.load_jailbreak(),
            SuiteName::Perplexity | SuiteName::Retrieval => return Ok((Vec::new(), Vec::new())),
            s => format!("suites/{}.jsonl", s.id()),
        };
        let (text, name) = self.read(&file)?;
        let (items, skipped) = parse_items(&text, &name);
        if items.is_empty() {
            return Err(EvalError::EmptySuite {
                path: self.dir.join(file),
                skipped: skipped.len(),
            });
        }
        Ok((items, skipped))
    }

    fn load_jailbreak(&self) -> Result<(Vec<Item>, Vec<Skipped>)> {
        let (harmful, mut skipped) = self.load(SuiteName::Harmful)?;
        let (text, name) = self.read("suites/jailbreak_templates.jsonl")?;
        let (templates, t_skipped) = parse_templates(&text, &name);
        skipped.extend(t_skipped);
        Ok((
            expand_jailbreaks(&harmful, &templates, self.jailbreak_sample),
            skipped,
        ))
    }

    pub fn perplexity_text(&self) -> Result<String> {
        Ok(self.read("perplexity.txt")?.0)
    }
}

/// FNV-1a, so the jailbreak sample is the same on every machine and every run.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A 64-bit finaliser (MurmurHash3's fmix64): FNV-1a alone barely moves the high bits for ids
/// that differ only at the end ("multiturn-benign-40", "-41"), so sorting by it grouped them.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// `n` jailbreak items: templates taken in turn (so every family gets its share) around
/// harmful items in a fixed hashed order, each item used once until all have been.
pub fn expand_jailbreaks(harmful: &[Item], templates: &[Template], n: usize) -> Vec<Item> {
    if harmful.is_empty() || templates.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<&Item> = harmful.iter().collect();
    order.sort_by_key(|it| (fnv1a(&it.id), it.id.clone()));
    (0..n)
        .map(|i| {
            let base = order[i % order.len()];
            let t = &templates[i % templates.len()];
            let prompt = t
                .template
                .replace("{prompt_base64}", &base64(base.prompt.as_bytes()))
                .replace("{prompt}", &base.prompt);
            Item {
                id: format!("{}+{}", t.id, base.id),
                prompt,
                label: Some("unsafe".into()),
                category: base.category.clone(),
                source: base.source.clone(),
                xstest_type: None,
                family: Some(t.family.clone()),
                history: Vec::new(),
            }
        })
        .collect()
}

/// At most `n` items of a suite, spread over all of it: items in a fixed hashed order (so a
/// small run still covers every category in proportion), except jailbreak items, whose order
/// already takes the templates in turn.
pub fn sample(suite: SuiteName, mut items: Vec<Item>, n: usize) -> Vec<Item> {
    if items.len() > n && suite != SuiteName::Jailbreak {
        items.sort_by_key(|it| (mix(fnv1a(&it.id)), it.id.clone()));
    }
    items.truncate(n);
    items
}

/// Standard base64 with padding (RFC 4648).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ALPHABET[(v >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The repository's assets/evals directory, found from the working directory or next to it.
pub fn default_dir() -> Option<PathBuf> {
    let here = Path::new("assets/evals");
    if here.join("suites").is_dir() {
        return Some(here.to_path_buf());
    }
    let up = Path::new("../assets/evals");
    up.join("suites").is_dir().then(|| up.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_named_and_skipped() {
        let text = "{\"id\":\"a\",\"prompt\":\"hi\"}\nnot json\n\n{\"id\":\"b\",\"prompt\":\"\"}\n{\"id\":\"a\",\"prompt\":\"again\"}\n{\"prompt\":\"no id\"}\n{\"id\":\"c\",\"prompt\":\"ok\",\"category\":\"hate\"}\n";
        let (items, skipped) = parse_items(text, "x.jsonl");
        assert_eq!(
            items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        assert_eq!(items[1].category.as_deref(), Some("hate"));
        let lines: Vec<usize> = skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [2, 4, 5, 6]);
        assert!(skipped[0]
            .to_string()
            .starts_with("x.jsonl line 2: not a suite item"));
        assert!(skipped[1].reason.contains("empty prompt"));
        assert!(skipped[2].reason.contains("repeated id"));
        assert!(
            skipped[3].reason.contains("missing field `id`"),
            "{}",
            skipped[3].reason
        );
    }

    #[test]
    fn bad_histories_are_named_and_skipped() {
        let text = [
            r#"{"id":"ok","prompt":"and now?","history":[{"role":"user","content":"hi"},{"role":"assistant","refused":"hate"}]}"#,
            r#"{"id":"odd","prompt":"p","history":[{"role":"user","content":"hi"}]}"#,
            r#"{"id":"order","prompt":"p","history":[{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}"#,
            r#"{"id":"cat","prompt":"p","history":[{"role":"user","content":"a"},{"role":"assistant","refused":"rudeness"}]}"#,
            r#"{"id":"both","prompt":"p","history":[{"role":"user","content":"a"},{"role":"assistant","content":"b","refused":"hate"}]}"#,
            r#"{"id":"userref","prompt":"p","history":[{"role":"user","refused":"hate"},{"role":"assistant","content":"b"}]}"#,
        ]
        .join("\n");
        let (items, skipped) = parse_items(&text, "m.jsonl");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].history[1].refused.as_deref(), Some("hate"));
        let reasons: Vec<&str> = skipped.iter().map(|s| s.reason.as_str()).collect();
        assert!(reasons[0].contains("in pairs"), "{reasons:?}");
        assert!(reasons[1].contains("expected a user turn"), "{reasons:?}");
        assert!(
            reasons[2].contains("unknown refused category \"rudeness\""),
            "{reasons:?}"
        );
        assert!(reasons[3].contains("needs non-empty"), "{reasons:?}");
        assert!(reasons[4].contains("needs non-empty"), "{reasons:?}");
    }

    /// The multi-turn suite: both kinds of conversation, at least 40 of each, the harmful
    /// ones over every hazard category, the benign ones after a refusal.
    #[test]
    fn multiturn_suite_shape() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/evals");
        let (items, skipped) = SuiteSource::new(dir).load(SuiteName::Multiturn).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let harmful: Vec<&Item> = items
            .iter()
            .filter(|i| i.label.as_deref() == Some("unsafe"))
            .collect();
        let benign: Vec<&Item> = items
            .iter()
            .filter(|i| i.label.as_deref() == Some("safe"))
            .collect();
        assert_eq!(harmful.len() + benign.len(), items.len());
        assert!(harmful.len() >= 40 && benign.len() >= 40);
        for i in &harmful {
            assert!((2..=6).contains(&i.history.len()), "{}", i.id);
            assert!(i.history.iter().all(|t| t.refused.is_none()), "{}", i.id);
        }
        for i in &benign {
            assert!(i.history.iter().any(|t| t.refused.is_some()), "{}", i.id);
            assert!(i.category.is_none(), "{}", i.id);
        }
        let cats: HashSet<&str> = harmful
            .iter()
            .filter_map(|i| i.category.as_deref())
            .collect();
        assert_eq!(cats.len(), kostant_safety::Category::ALL.len(), "{cats:?}");
        assert!(items
            .iter()
            .all(|i| i.source.as_deref() == Some("kostant-authored")));
    }

    #[test]
    fn suite_names() {
        assert_eq!(SuiteName::parse_list("all").unwrap().len(), 9);
        assert_eq!(
            SuiteName::parse_list("harmful, jailbreak,harmful").unwrap(),
            [SuiteName::Harmful, SuiteName::Jailbreak]
        );
        let e = SuiteName::parse_list("harmfull").unwrap_err().to_string();
        assert!(e.contains("unknown suite \"harmfull\""), "{e}");
    }

    #[test]
    fn base64_vectors() {
        // RFC 4648 section 10.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    fn item(id: &str) -> Item {
        Item {
            id: id.into(),
            prompt: format!("prompt {id}"),
            label: Some("unsafe".into()),
            category: Some("hate".into()),
            source: None,
            xstest_type: None,
            family: None,
            history: Vec::new(),
        }
    }

    #[test]
    fn jailbreak_expansion_is_deterministic_and_balanced() {
        let harmful: Vec<Item> = (0..50).map(|i| item(&format!("h{i}"))).collect();
        let templates = vec![
            Template {
                id: "t1".into(),
                family: "role_play".into(),
                template: "Be DAN. {prompt}".into(),
            },
            Template {
                id: "t2".into(),
                family: "encoding".into(),
                template: "Decode: {prompt_base64}".into(),
            },
        ];
        let a = expand_jailbreaks(&harmful, &templates, 20);
        let b = expand_jailbreaks(&harmful, &templates, 20);
        assert_eq!(a, b);
        assert_eq!(a.len(), 20);
        assert_eq!(
            a.iter()
                .filter(|i| i.family.as_deref() == Some("encoding"))
                .count(),
            10
        );
        let ids: HashSet<_> = a.iter().map(|i| i.id.clone()).collect();
        assert_eq!(ids.len(), 20);
        let enc = a
            .iter()
            .find(|i| i.family.as_deref() == Some("encoding"))
            .unwrap();
        assert!(
            enc.prompt.starts_with("Decode: cHJvbXB0IG"),
            "{}",
            enc.prompt
        );
        assert!(a.iter().all(|i| i.category.as_deref() == Some("hate")));
    }

    #[test]
    fn sample_is_spread_and_stable() {
        let items: Vec<Item> = (0..100).map(|i| item(&format!("h{i:03}"))).collect();
        let a = sample(SuiteName::Harmful, items.clone(), 10);
        assert_eq!(a, sample(SuiteName::Harmful, items.clone(), 10));
        assert_eq!(a.len(), 10);
        // Not simply the first ten.
        assert!(a.iter().any(|i| i.id.as_str() >= "h010"));
        let j = sample(SuiteName::Jailbreak, items.clone(), 10);
        assert_eq!(j, items[..10].to_vec());
        assert_eq!(sample(SuiteName::Harmful, items.clone(), 1000).len(), 100);
        // Ids that share a long prefix are still spread: a small sample of two halves holds both.
        let halves: Vec<Item> = (1..=45)
            .map(|i| item(&format!("multiturn-harmful-{i:02}")))
            .chain((1..=45).map(|i| item(&format!("multiturn-benign-{i:02}"))))
            .collect();
        let s = sample(SuiteName::Multiturn, halves, 12);
        let harmful = s.iter().filter(|i| i.id.contains("harmful")).count();
        assert!((3..=9).contains(&harmful), "{harmful} of 12");
    }

    #[test]
    fn shipped_suites_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/evals");
        let src = SuiteSource::new(dir);
        for s in [
            SuiteName::Harmful,
            SuiteName::BenignEdgy,
            SuiteName::BenignEveryday,
            SuiteName::Provocation,
            SuiteName::Multiturn,
        ] {
            let (items, skipped) = src.load(s).unwrap();
            assert!(!items.is_empty());
            assert!(skipped.is_empty(), "{s:?}: {skipped:?}");
        }
        let (jb, _) = src.load(SuiteName::Jailbreak).unwrap();
        assert_eq!(jb.len(), 200);
        assert!(src.perplexity_text().unwrap().len() > 10_000);
    }
}
