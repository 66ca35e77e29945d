//! A proofread reply's changes under review: which ones the user accepted, the text they
//! make (what Copy copies), and the rows the reply lists ("was → now").

use crate::assistant::proofread::Proofread;

/// The changes of one proofread reply and which are accepted. None is accepted until the user
/// says so: the text is theirs.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeReview {
    proofread: Proofread,
    accepted: Vec<bool>,
}

/// One change as the reply lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRow {
    /// The words taken out (empty for an insertion).
    pub removed: String,
    /// The words put in (empty for a deletion).
    pub inserted: String,
    pub accepted: bool,
}

impl ChangeReview {
    pub fn new(proofread: Proofread) -> ChangeReview {
        let accepted = vec![false; proofread.changes.len()];
        ChangeReview {
            proofread,
            accepted,
        }
    }

    /// Accepts change `i`, or takes it back; an index past the end changes nothing.
    pub fn toggle(&mut self, i: usize) {
        if let Some(a) = self.accepted.get_mut(i) {
            *a = !*a;
        }
    }

    pub fn accept_all(&mut self) {
        self.accepted.fill(true);
    }

    pub fn all_accepted(&self) -> bool {
        self.accepted.iter().all(|a| *a)
    }

    pub fn is_empty(&self) -> bool {
        self.accepted.is_empty()
    }

    /// The user's text with the accepted changes in place.
    pub fn text(&self) -> String {
        self.proofread.apply(|i| self.accepted[i])
    }

    pub fn rows(&self) -> Vec<ChangeRow> {
        self.proofread
            .changes
            .iter()
            .zip(&self.accepted)
            .map(|(c, a)| ChangeRow {
                removed: c.removed.trim().to_string(),
                inserted: c.inserted.trim().to_string(),
                accepted: *a,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assistant::proofread::proofread;

    fn review() -> ChangeReview {
        let p = proofread("She dont like the the rain. i agree", |s| {
            Ok::<_, ()>(match s {
                "She dont like the the rain." => "She doesn't like the rain.".into(),
                _ => "I agree.".into(),
            })
        })
        .unwrap();
        ChangeReview::new(p)
    }

    #[test]
    fn nothing_is_accepted_until_the_user_says_so() {
        let r = review();
        assert_eq!(r.text(), "She dont like the the rain. i agree");
        assert_eq!(r.rows().len(), 4, "{:?}", r.rows());
        assert!(r.rows().iter().all(|c| !c.accepted));
    }

    #[test]
    fn a_subset_of_changes_applies_alone() {
        let mut r = review();
        r.toggle(0);
        r.toggle(2);
        assert_eq!(r.text(), "She doesn't like the the rain. I agree");
        r.toggle(0);
        assert_eq!(r.text(), "She dont like the the rain. I agree");
        r.toggle(99);
        assert!(!r.all_accepted());
    }

    #[test]
    fn accept_all_gives_the_corrected_text() {
        let mut r = review();
        r.accept_all();
        assert!(r.all_accepted());
        assert_eq!(r.text(), "She doesn't like the rain. I agree.");
        let rows = r.rows();
        assert_eq!(
            (rows[0].removed.as_str(), rows[0].inserted.as_str()),
            ("dont", "doesn't")
        );
        assert_eq!(
            (rows[1].removed.as_str(), rows[1].inserted.as_str()),
            ("the", "")
        );
    }
}
