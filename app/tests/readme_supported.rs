//! The README's list of what runs is the engine's own table, word for word.

#[test]
fn the_readme_lists_exactly_what_the_engine_supports() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("<!-- supported:begin -->\n")
        .expect("README has the supported list")
        + "<!-- supported:begin -->\n".len();
    let end = readme[start..]
        .find("<!-- supported:end -->")
        .expect("the list is closed")
        + start;
    assert_eq!(
        &readme[start..end],
        kostant_engine::model::supported_summary(),
        "update README.md from `kostant models --supported`"
    );
}
