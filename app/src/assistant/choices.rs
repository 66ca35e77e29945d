//! Replies whose shape a grammar guarantees: three reply suggestions, a summary as a chosen
//! number of bullets, a rewrite in a chosen tone with no preamble. Each [`Shape`] gives the
//! system prompt that asks for it, the GBNF grammar that holds the decoding to it, and the
//! parse of what was generated. The guard screens a shaped reply like any other.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use kostant_engine::Grammar;
use kostant_safety::{policy, Verdict};

use crate::features::Feature;

/// Three numbered suggestions, one line each of one or two sentences ending in `.`, `!` or
/// `?` (at most 199 characters). Sentence ends are where a small model, left to itself, runs
/// the next suggestion on in the same line ("Sure! 2. No, thanks."), so a line stops after
/// its second sentence and no sentence starts with a digit. Abbreviations and decimals
/// ("Mr.", "10.30") end a sentence too. The grammar cannot compare the lines, so it cannot make
/// them differ: the prompt asks for three different ones, and identical lines are kept as
/// written ([`choices`]).
pub const REPLY_GRAMMAR: &str = r#"# Three reply suggestions, numbered, one line each.
root ::= "1. " line "\n2. " line "\n3. " line
line ::= sentence (" " sentence)?
sentence ::= [^\n\r\t .!?0-9] [^\n\r.!?]{0,97} [.!?]
"#;

/// A rewrite with no preamble: the text starts with a visible character and its first line
/// does not end with a colon, which rules out "Here is the rewritten text:" and the like. It
/// does not rule out a preamble that ends as a sentence does.
pub const REWRITE_GRAMMAR: &str = r#"# Plain text whose first line does not end with a colon.
root ::= first ("\n" [^\x00]*)?
first ::= [^\n\r\t :] ([^\n\r]* [^\n\r:])?
"#;

/// How long a bulleted summary is: a number of one-line bullets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SummaryLength {
    Short,
    Medium,
}

impl SummaryLength {
    pub const ALL: [SummaryLength; 2] = [SummaryLength::Short, SummaryLength::Medium];

    pub fn bullets(self) -> usize {
        match self {
            SummaryLength::Short => 3,
            SummaryLength::Medium => 5,
        }
    }

    /// The name on the command line.
    pub fn id(self) -> &'static str {
        match self {
            SummaryLength::Short => "short",
            SummaryLength::Medium => "medium",
        }
    }

    /// The app's label for the choice.
    pub fn label(self) -> &'static str {
        match self {
            SummaryLength::Short => "Short",
            SummaryLength::Medium => "Medium",
        }
    }
}

/// The tone a rewrite is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tone {
    Friendlier,
    Formal,
    Shorter,
}

impl Tone {
    pub const ALL: [Tone; 3] = [Tone::Friendlier, Tone::Formal, Tone::Shorter];

    /// The name on the command line.
    pub fn id(self) -> &'static str {
        match self {
            Tone::Friendlier => "friendlier",
            Tone::Formal => "formal",
            Tone::Shorter => "shorter",
        }
    }

    /// The app's label for the choice.
    pub fn label(self) -> &'static str {
        match self {
            Tone::Friendlier => "Friendlier",
            Tone::Formal => "More formal",
            Tone::Shorter => "Shorter",
        }
    }

    /// What the system prompt asks the rewrite to be.
    fn instruction(self) -> &'static str {
        match self {
            Tone::Friendlier => "in a friendlier, warmer tone",
            Tone::Formal => "in a more formal tone",
            Tone::Shorter => "shorter, keeping only what matters",
        }
    }
}

/// A value from the command line; the error names the ones there are.
fn parse_named<T: Copy>(s: &str, all: &[T], id: fn(T) -> &'static str) -> Result<T, String> {
    let s = s.trim();
    all.iter().copied().find(|v| id(*v) == s).ok_or_else(|| {
        let known: Vec<&str> = all.iter().map(|v| id(*v)).collect();
        format!("unknown choice {s:?} (known: {})", known.join(", "))
    })
}

impl FromStr for SummaryLength {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_named(s, &SummaryLength::ALL, SummaryLength::id)
    }
}

impl FromStr for Tone {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_named(s, &Tone::ALL, Tone::id)
    }
}

/// The shape a feature's reply is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Reply: three suggestions to choose from.
    Choices,
    /// Summarize at a chosen length: that many bullets.
    Bullets(SummaryLength),
    /// Rewrite in a chosen tone, with no preamble.
    Rewrite(Tone),
}

impl Shape {
    /// The shape of `feature`'s reply: Reply always offers choices; Summarize and Rewrite are
    /// shaped when a length or a tone is chosen, and write freely otherwise.
    pub fn of(
        feature: Feature,
        length: Option<SummaryLength>,
        tone: Option<Tone>,
    ) -> Option<Shape> {
        match feature {
            Feature::Reply => Some(Shape::Choices),
            Feature::Summarize => length.map(Shape::Bullets),
            Feature::Rewrite => tone.map(Shape::Rewrite),
            _ => None,
        }
    }

    /// The system prompt that asks for this shape, with the policy's tone rules.
    pub fn system_prompt(self) -> String {
        let task = match self {
            Shape::Choices => "Write three different short replies to the message the user \
                 pastes, as the user, each ready to send: one line each, numbered 1. to 3. \
                 Match the message's language and register."
                .to_string(),
            Shape::Bullets(length) => format!(
                "Summarize the text the user gives you as exactly {} bullet points, one line \
                 each, starting with \"- \". Keep its facts, names and numbers; add nothing that \
                 is not in it.",
                length.bullets()
            ),
            Shape::Rewrite(tone) => format!(
                "Rewrite the text the user gives you {}. Keep its meaning and language, and \
                 return only the rewritten text.",
                tone.instruction()
            ),
        };
        format!("{task} {}", policy::TONE_RULES)
    }

    /// The GBNF text of this shape's grammar.
    pub fn grammar_text(self) -> String {
        match self {
            Shape::Choices => REPLY_GRAMMAR.to_string(),
            Shape::Bullets(length) => bullets_grammar(length.bullets()),
            Shape::Rewrite(_) => REWRITE_GRAMMAR.to_string(),
        }
    }

    /// The compiled grammar. The texts are ours and tested to compile, so a failure here is a
    /// bug, reported as the engine's error rather than a panic.
    pub fn grammar(self) -> kostant_engine::Result<Arc<Grammar>> {
        Grammar::parse(&self.grammar_text()).map(Arc::new)
    }

    /// The items of a reply of this shape (the choices, the bullets) when it was answered in
    /// full and has them; `None` for a refused, withdrawn or cut-off reply, and for a rewrite,
    /// which is one text.
    pub fn items(self, text: &str, verdict: Verdict) -> Option<Vec<String>> {
        if verdict != Verdict::Answered {
            return None;
        }
        match self {
            Shape::Choices => choices(text),
            Shape::Bullets(length) => bullets(text, length.bullets()),
            Shape::Rewrite(_) => None,
        }
    }
}

/// A grammar for exactly `n` one-line bullets starting with "- ".
pub fn bullets_grammar(n: usize) -> String {
    let more = match n {
        0 | 1 => String::new(),
        n => format!(" (\"\\n- \" bullet){{{}}}", n - 1),
    };
    format!(
        "# Exactly {n} bullets, one line each.\nroot ::= \"- \" bullet{more}\n\
         bullet ::= [^\\n\\r\\t ] [^\\n\\r]{{0,199}}\n"
    )
}

/// The three suggestions of a reply written to [`REPLY_GRAMMAR`], trimmed, or `None` when the
/// text is not three numbered non-empty lines (a reply stopped early). Identical suggestions
/// are kept: the list is what the model wrote.
pub fn choices(text: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = text.trim_end().split('\n').collect();
    if lines.len() != 3 {
        return None;
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| item(line.strip_prefix(&format!("{}. ", i + 1))?))
        .collect()
}

/// The `n` bullets of a summary written to [`bullets_grammar`], without their "- ", or `None`
/// when the text is not `n` such lines.
pub fn bullets(text: &str, n: usize) -> Option<Vec<String>> {
    let items: Option<Vec<String>> = text
        .trim_end()
        .split('\n')
        .map(|line| item(line.strip_prefix("- ")?))
        .collect();
    items.filter(|items| items.len() == n)
}

fn item(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

impl fmt::Display for SummaryLength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl fmt::Display for Tone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kostant_safety::StoppedBy;

    const ALL_SHAPES: [Shape; 6] = [
        Shape::Choices,
        Shape::Bullets(SummaryLength::Short),
        Shape::Bullets(SummaryLength::Medium),
        Shape::Rewrite(Tone::Friendlier),
        Shape::Rewrite(Tone::Formal),
        Shape::Rewrite(Tone::Shorter),
    ];

    /// Whether the grammar accepts `text` whole: every character in turn, then complete.
    fn accepts(shape: Shape, text: &str) -> bool {
        let mut state = kostant_engine::grammar::GrammarState::new(shape.grammar().unwrap());
        state.advance(text.as_bytes()) && state.can_end()
    }

    #[test]
    fn every_shape_compiles_and_its_prompt_names_it() {
        for shape in ALL_SHAPES {
            shape.grammar().unwrap_or_else(|e| panic!("{shape:?}: {e}"));
            assert!(shape.system_prompt().contains(policy::TONE_RULES));
        }
        assert!(Shape::Choices.system_prompt().contains("three different"));
        assert!(Shape::Bullets(SummaryLength::Medium)
            .system_prompt()
            .contains("exactly 5 bullet points"));
        assert!(Shape::Rewrite(Tone::Formal)
            .system_prompt()
            .contains("more formal"));
    }

    #[test]
    fn features_take_their_shapes() {
        let (l, t) = (Some(SummaryLength::Short), Some(Tone::Shorter));
        assert_eq!(Shape::of(Feature::Reply, None, None), Some(Shape::Choices));
        assert_eq!(Shape::of(Feature::Summarize, None, t), None);
        assert_eq!(
            Shape::of(Feature::Summarize, l, t),
            Some(Shape::Bullets(SummaryLength::Short))
        );
        assert_eq!(
            Shape::of(Feature::Rewrite, l, t),
            Some(Shape::Rewrite(Tone::Shorter))
        );
        assert_eq!(Shape::of(Feature::Chat, l, t), None);
        assert_eq!(Shape::of(Feature::Proofread, l, t), None);
    }

    #[test]
    fn reply_grammar_holds_three_numbered_lines() {
        let good =
            "1. Sounds good, see you then!\n2. Sorry, I can't make it.\n3. Thanks! Can we do Friday?";
        assert!(accepts(Shape::Choices, good));
        assert_eq!(
            choices(good).unwrap(),
            [
                "Sounds good, see you then!",
                "Sorry, I can't make it.",
                "Thanks! Can we do Friday?"
            ]
        );
        for bad in [
            "1. Yes\n2. No",
            "1. Yes.\n2. No.\n3. Maybe.\n4. Later.",
            "1. \n2. No.\n3. Maybe.",
            "Sure! 1. Yes.\n2. No.\n3. Maybe.",
            "1. Yes.\n\n2. No.\n3. Maybe.",
        ] {
            assert!(!accepts(Shape::Choices, bad), "{bad:?}");
            assert_eq!(choices(bad), None, "{bad:?}");
        }
        // A suggestion run on into the next, or a third sentence, cannot be written.
        for bad in [
            "1. Yes! 2. No.\n2. No.\n3. Maybe.",
            "1. Yes. No. Maybe.\n2. No.\n3. Maybe.",
        ] {
            assert!(!accepts(Shape::Choices, bad), "{bad:?}");
        }
        // A sentence holds 99 characters, its end included.
        let long = "a".repeat(98);
        assert!(accepts(
            Shape::Choices,
            &format!("1. {long}.\n2. b.\n3. c?")
        ));
        assert!(!accepts(
            Shape::Choices,
            &format!("1. {long}a.\n2. b.\n3. c?")
        ));
        // The parse reads what the grammar would not allow too, so it takes any reply.
        assert_eq!(choices("1. Yes\n2. No\n3. Maybe").unwrap()[2], "Maybe");
    }

    #[test]
    fn identical_choices_are_kept_as_written() {
        // The grammar cannot compare lines: three alike pass it, and the list shows them all
        // rather than hiding that the model repeated itself.
        let same = "1. Thank you!\n2. thank  you!\n3. Thank you!";
        assert!(accepts(Shape::Choices, same));
        assert_eq!(choices(same).unwrap().len(), 3);
    }

    #[test]
    fn bullet_grammars_hold_their_count() {
        let three = "- The meeting moved to Friday.\n- Bring the report.\n- Lunch is provided.";
        let short = Shape::Bullets(SummaryLength::Short);
        let medium = Shape::Bullets(SummaryLength::Medium);
        assert!(accepts(short, three));
        assert!(!accepts(medium, three));
        assert_eq!(bullets(three, 3).unwrap()[1], "Bring the report.");
        assert_eq!(bullets(three, 5), None);
        let five = format!("{three}\n- Parking is free.\n- Call Ana if late.");
        assert!(accepts(medium, &five) && !accepts(short, &five));
        assert_eq!(bullets(&five, 5).unwrap().len(), 5);
        for bad in ["The meeting moved.", "- a\n- b\n-c", "- a\n- b\n- c\n"] {
            assert!(!accepts(short, bad), "{bad:?}");
        }
    }

    #[test]
    fn rewrite_grammar_refuses_a_preamble_ending_in_a_colon() {
        let rewrite = Shape::Rewrite(Tone::Friendlier);
        assert!(accepts(rewrite, "Hi Sam, thanks so much for the notes!"));
        assert!(accepts(rewrite, "Dear Sam,\n\nThank you: it helped.\nBest"));
        assert!(!accepts(rewrite, "Here is the rewritten text:\nHi Sam!"));
        assert!(!accepts(rewrite, " Hi Sam"));
        assert!(!accepts(rewrite, "\nHi Sam"));
        assert_eq!(rewrite.items("Hi Sam", Verdict::Answered), None);
    }

    #[test]
    fn only_an_answered_reply_has_items() {
        let text = "1. Yes.\n2. No.\n3. Maybe.";
        assert!(Shape::Choices.items(text, Verdict::Answered).is_some());
        let withdrawn = Verdict::Stopped {
            by: StoppedBy::Guard,
            category: None,
        };
        assert_eq!(Shape::Choices.items(text, withdrawn), None);
        let stopped = Verdict::Stopped {
            by: StoppedBy::User,
            category: None,
        };
        assert_eq!(Shape::Choices.items(text, stopped), None);
    }

    #[test]
    fn lengths_and_tones_parse_by_name() {
        assert_eq!("short".parse(), Ok(SummaryLength::Short));
        assert_eq!(" medium".parse(), Ok(SummaryLength::Medium));
        assert_eq!("formal".parse(), Ok(Tone::Formal));
        let e = "long".parse::<SummaryLength>().unwrap_err();
        assert!(e.contains("\"long\"") && e.contains("short, medium"), "{e}");
        for t in Tone::ALL {
            assert_eq!(t.id().parse(), Ok(t));
        }
    }
}
