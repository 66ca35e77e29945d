//! How a chunk is named to a person and to the ranking: its document and place in one line.

use crate::ingest::Place;

/// Where a chunk is, as a person reads it: "lease.pdf, page 3, Money › Deposit".
pub fn place_label(doc_name: &str, place: &Place) -> String {
    let mut label = doc_name.to_string();
    if let Some(page) = place.page {
        label.push_str(&format!(", page {page}"));
    }
    if let Some(h) = &place.heading {
        label.push_str(&format!(", {h}"));
    }
    label
}

/// The text a chunk is embedded and keyword-scored by: its [`place_label`] on a line, then the
/// chunk. A chunk from the middle of a section does not say what the section is about; its
/// document's name and heading path do, as they do for the person reading it.
pub fn indexed_text(doc_name: &str, place: &Place, text: &str) -> String {
    format!("{}\n{text}", place_label(doc_name, place))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_document_page_and_heading_path() {
        let place = Place {
            page: Some(3),
            heading: Some("Money › Deposit".into()),
        };
        assert_eq!(
            place_label("lease.pdf", &place),
            "lease.pdf, page 3, Money › Deposit"
        );
        assert_eq!(place_label("a.txt", &Place::default()), "a.txt");
        assert_eq!(
            indexed_text("a.txt", &Place::default(), "Two months."),
            "a.txt\nTwo months."
        );
    }
}
