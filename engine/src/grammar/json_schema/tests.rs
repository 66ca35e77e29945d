//! The JSON schema converter's tests: each keyword's grammar accepts the documents the schema
//! allows and refuses the others; malformed and unsupported schemas are refused clearly.

use std::sync::Arc;

use super::to_gbnf;
use crate::grammar::{Grammar, GrammarState};

/// Whether the grammar of `schema` accepts `doc` whole.
fn accepts(schema: &str, doc: &str) -> bool {
    let g = Grammar::parse(&to_gbnf(schema).unwrap()).unwrap();
    let mut s = GrammarState::new(Arc::new(g));
    s.advance(doc.as_bytes()) && s.can_end()
}

fn err(schema: &str) -> String {
    to_gbnf(schema).unwrap_err().to_string()
}

#[test]
fn objects_keep_required_properties_in_order() {
    let s = r#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}"#;
    assert!(accepts(s, r#"{"name": "Ada", "age": 36}"#));
    assert!(accepts(s, "{\n  \"name\":\"Ada\",\n  \"age\": -3\n}"));
    assert!(!accepts(s, r#"{"age": 36, "name": "Ada"}"#));
    assert!(!accepts(s, r#"{"name": "Ada"}"#));
    assert!(!accepts(s, r#"{"name": "Ada", "age": 3.5}"#));
}

#[test]
fn optional_properties_may_be_left_out() {
    let s = r#"{"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}, "required": ["b"]}"#;
    for ok in [
        r#"{"b": null}"#,
        r#"{"b": null, "a": true}"#,
        r#"{"b": null, "c": 1.5e3}"#,
        r#"{"b": null, "a": false, "c": 0}"#,
    ] {
        assert!(accepts(s, ok), "{ok}");
    }
    assert!(!accepts(s, r#"{"b": null, "c": 1, "a": true}"#));
    assert!(
        !accepts(s, r#"{"b": null, "d": 1}"#),
        "no additional properties"
    );
}

#[test]
fn additional_properties_true_or_a_schema() {
    let s = r#"{"properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": {"type": "string"}}"#;
    assert!(accepts(s, r#"{"id": 1, "x": "y", "idx": "z"}"#));
    assert!(!accepts(s, r#"{"id": 1, "x": 2}"#));
    assert!(
        !accepts(s, r#"{"id": 1, "id": "again"}"#),
        "a named key is not additional"
    );
    let any = r#"{"type": "object", "additionalProperties": true}"#;
    assert!(accepts(any, r#"{"k": [1, {"n": null}]}"#));
    let none = r#"{"type": "object", "additionalProperties": false}"#;
    assert!(accepts(none, "{}") && !accepts(none, r#"{"k": 1}"#));
}

#[test]
fn arrays_count_their_items() {
    let s = r#"{"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}"#;
    assert!(!accepts(s, "[]"));
    assert!(accepts(s, "[1]") && accepts(s, "[1, 2, 3]"));
    assert!(!accepts(s, "[1, 2, 3, 4]"));
    let any = r#"{"type": "array"}"#;
    assert!(accepts(any, r#"[1, "a", [true]]"#) && accepts(any, "[]"));
}

#[test]
fn strings_enums_and_constants() {
    let s = r#"{"type": "string", "minLength": 2, "maxLength": 3}"#;
    assert!(!accepts(s, r#""a""#) && accepts(s, r#""ab""#) && accepts(s, r#""a\nc""#));
    assert!(!accepts(s, r#""abcd""#));
    let e = r#"{"enum": ["red", "green", 3, null]}"#;
    assert!(accepts(e, r#""red""#) && accepts(e, "3") && accepts(e, "null"));
    assert!(!accepts(e, r#""blue""#));
    let c = r#"{"const": {"k": [1, "two"]}}"#;
    assert!(accepts(c, r#"{"k":[1,"two"]}"#) && !accepts(c, r#"{"k":[1]}"#));
    let plain = r#"{"type": "string"}"#;
    assert!(accepts(plain, r#""tab\t and \u00e9 é""#));
    assert!(!accepts(plain, "\"raw\nnewline\""));
}

#[test]
fn types_and_unions() {
    let s = r#"{"type": ["integer", "null"]}"#;
    assert!(accepts(s, "12") && accepts(s, "null") && !accepts(s, "1.5"));
    let u = r#"{"anyOf": [{"type": "boolean"}, {"type": "string", "maxLength": 1}]}"#;
    assert!(accepts(u, "true") && accepts(u, r#""x""#) && !accepts(u, r#""xy""#));
    assert!(accepts("{}", r#"{"any": [1, 2.5, "x", false, null]}"#));
    let n = r#"{"type": "number"}"#;
    assert!(accepts(n, "-0.25E-2") && !accepts(n, "01") && !accepts(n, "1."));
}

#[test]
fn references_to_definitions() {
    let s = r##"{"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
        "type": "array", "items": {"$ref": "#/$defs/point"}}"##;
    assert!(accepts(s, r#"[{"x": 1, "y": 2}, {"x": 0, "y": -1}]"#));
    assert!(!accepts(s, r#"[{"x": 1}]"#));
    let tree = r##"{"definitions": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}}, "required": ["kids"]}},
        "$ref": "#/definitions/node"}"##;
    assert!(accepts(
        tree,
        r#"{"kids": [{"kids": []}, {"kids": [{"kids": []}]}]}"#
    ));
}

#[test]
fn malformed_json_gives_line_and_column() {
    assert_eq!(
        err("{\n  \"type\": \"object\",\n  \"properties\": {\"a\" {}}\n}"),
        "json schema: line 3, column 22: expected ':'"
    );
}

#[test]
fn unsupported_keywords_are_named() {
    assert_eq!(
        err(r#"{"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$"}}}"#),
        "json schema: #/properties/a: the keyword 'pattern' is not supported"
    );
    assert_eq!(
        err(r#"{"$ref": "https://example.com/s.json"}"#),
        "json schema: #: '$ref' https://example.com/s.json is not supported: only #/definitions/... and #/$defs/..."
    );
    assert_eq!(
        err(r#"{"type": "array", "maxItems": 5000}"#),
        "json schema: #: 'maxItems' must be a whole number from 0 to 1000, got 5000"
    );
    assert_eq!(
        err(r#"{"type": "date"}"#),
        "json schema: #: unknown type 'date'"
    );
}

#[test]
fn the_grammar_uses_llama_cpp_whitespace() {
    let g = to_gbnf(r#"{"type": "boolean"}"#).unwrap();
    assert!(
        g.starts_with("space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\nroot ::= boolean\n"),
        "{g}"
    );
}
