//! JSON Schema to GBNF: the grammar of the JSON documents a schema accepts, laid out the way
//! llama.cpp's converter lays its grammars out (the same whitespace rule, the same primitive
//! rules for strings and numbers, objects with their required properties first, in order), so
//! a schema constrains our output as it would constrain llama.cpp's.
//!
//! Supported: `type` (one or a list), `properties`, `required`, `additionalProperties` (false,
//! true or a schema), `items`, `minItems`, `maxItems`, `minLength`, `maxLength`, `enum`,
//! `const`, `anyOf`/`oneOf`, and `$ref` to `#/definitions/...` or `#/$defs/...`. Annotations
//! (`title`, `description`, `default`, `examples`, `$schema`, `$id`, `$comment`) are ignored;
//! any other keyword is refused by name, so a schema is never silently loosened.

use std::collections::HashMap;

use super::json::{parse, Json};
use super::limits::MAX_REPEAT;
use crate::{EngineError, Result};

/// Blanks allowed between tokens: nothing, a space, or one or two newlines and an indent.
const SPACE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// Rules every grammar may need, with the rules each uses.
const PRIMITIVES: [(&str, &str, &[&str]); 11] = [
    ("boolean", r#"("true" | "false") space"#, &[]),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
        &[],
    ),
    ("decimal-part", "[0-9]{1,16}", &[]),
    ("integral-part", "[0] | [1-9] [0-9]{0,15}", &[]),
    (
        "number",
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space"#,
        &["integral-part", "decimal-part"],
    ),
    (
        "integer",
        r#"("-"? integral-part) space"#,
        &["integral-part"],
    ),
    (
        "value",
        "object | array | string | number | boolean | null",
        &["object", "array", "string", "number", "boolean", "null"],
    ),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
        &["string", "value"],
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? "]" space"#,
        &["value"],
    ),
    ("string", r#""\"" char* "\"" space"#, &["char"]),
    ("null", r#""null" space"#, &[]),
];

/// Keywords that describe and never constrain.
const ANNOTATIONS: [&str; 7] = [
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
];

/// Keywords this converter reads.
const SUPPORTED: [&str; 15] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "$ref",
    "definitions",
];

/// The GBNF grammar of the documents the JSON schema `text` accepts. Malformed JSON is refused
/// with its line and column, an unsupported keyword with its name and place in the schema.
pub fn to_gbnf(text: &str) -> Result<String> {
    let schema = parse(text)?;
    let mut c = Converter {
        root: &schema,
        rules: Vec::new(),
        refs: HashMap::new(),
    };
    c.add("space", SPACE.to_string());
    let body = c.body(&schema, "root", "#")?;
    c.rules.insert(1, ("root".to_string(), body));
    let mut out = String::new();
    for (name, body) in &c.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    Ok(out)
}

fn unsupported(at: &str, what: &str) -> EngineError {
    EngineError::JsonSchema(format!("{at}: {what}"))
}

/// A GBNF string literal of `s`.
fn literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                out.push_str(&format!("\\x{:02X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A rule name made of what GBNF allows.
fn rule_name(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    if out.is_empty() {
        out.push('x');
    }
    out
}

/// `item{min,max}` with `separator` between items, as GBNF (`max` `None`: no limit).
fn repetition(item: &str, min: u32, max: Option<u32>, separator: &str) -> String {
    if max == Some(0) {
        return String::new();
    }
    let more_min = min.saturating_sub(1);
    let more_max = max.map(|m| m - 1);
    let more = match (more_min, more_max) {
        (_, Some(0)) => String::new(),
        (0, None) => format!(" ({separator} {item})*"),
        (m, None) => format!(" ({separator} {item}){{{m},}}"),
        (m, Some(n)) => format!(" ({separator} {item}){{{m},{n}}}"),
    };
    let seq = format!("{item}{more}");
    if min == 0 {
        format!("({seq})?")
    } else {
        seq
    }
}

struct Converter<'s> {
    root: &'s Json,
    /// Rules in order of creation: `space`, `root`, then the rest.
    rules: Vec<(String, String)>,
    /// Rule names of the `$ref` targets converted so far.
    refs: HashMap<String, String>,
}

impl<'s> Converter<'s> {
    /// Adds a rule, or finds one with the same body; a taken name gets a number.
    fn add(&mut self, name: &str, body: String) -> String {
        let base = rule_name(name);
        let mut candidate = base.clone();
        let mut n = 0;
        loop {
            match self.rules.iter().find(|(k, _)| *k == candidate) {
                None => {
                    self.rules.push((candidate.clone(), body));
                    return candidate;
                }
                Some((_, b)) if *b == body => return candidate,
                Some(_) => {
                    n += 1;
                    candidate = format!("{base}{n}");
                }
            }
        }
    }

    fn primitive(&mut self, name: &str) -> String {
        if self.rules.iter().any(|(k, _)| k == name) {
            return name.to_string();
        }
        if let Some((_, body, deps)) = PRIMITIVES.iter().find(|(n, _, _)| *n == name) {
            self.rules.push((name.to_string(), body.to_string()));
            for d in *deps {
                self.primitive(d);
            }
        }
        name.to_string()
    }

    /// A rule for `schema` named after `name`; returns its name.
    fn visit(&mut self, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        if let Some(Json::String(r)) = schema.get("$ref") {
            return self.reference(r, at);
        }
        let body = self.body(schema, name, at)?;
        Ok(self.add(name, body))
    }

    /// The right-hand side of the rule for `schema`.
    fn body(&mut self, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        let Json::Object(kv) = schema else {
            return match schema {
                Json::Bool(true) => Ok(self.primitive("value")),
                _ => Err(unsupported(at, "a schema must be an object")),
            };
        };
        for (k, _) in kv {
            let known = SUPPORTED.contains(&k.as_str())
                || ANNOTATIONS.contains(&k.as_str())
                || k == "$defs";
            if !known {
                return Err(unsupported(
                    at,
                    &format!("the keyword '{k}' is not supported"),
                ));
            }
        }
        if let Some(Json::String(r)) = schema.get("$ref") {
            return self.reference(r, at);
        }
        if let Some(alts) = schema.get("anyOf").or(schema.get("oneOf")) {
            return self.union(alts, name, at);
        }
        if let Some(c) = schema.get("const") {
            return Ok(format!("{} space", literal(&c.dump())));
        }
        if let Some(e) = schema.get("enum") {
            let Json::Array(values) = e else {
                return Err(unsupported(at, "'enum' must be an array"));
            };
            let alts: Vec<String> = values.iter().map(|v| literal(&v.dump())).collect();
            return Ok(format!("({}) space", alts.join(" | ")));
        }
        match schema.get("type") {
            None => self.untyped(schema, name, at),
            Some(Json::String(t)) => self.typed(t, schema, name, at),
            Some(Json::Array(ts)) => {
                let mut alts = Vec::new();
                for (i, t) in ts.iter().enumerate() {
                    let Some(t) = t.as_str() else {
                        return Err(unsupported(at, "'type' lists a non-string"));
                    };
                    let body = self.typed(t, schema, &format!("{name}-{i}"), at)?;
                    alts.push(self.add(&format!("{name}-{t}"), body));
                }
                Ok(alts.join(" | "))
            }
            Some(_) => Err(unsupported(at, "'type' must be a string or an array")),
        }
    }

    /// A schema without `type`: what its keywords imply, or any JSON value.
    fn untyped(&mut self, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        if schema.get("properties").is_some() || schema.get("additionalProperties").is_some() {
            self.typed("object", schema, name, at)
        } else if schema.get("items").is_some() {
            self.typed("array", schema, name, at)
        } else {
            Ok(self.primitive("value"))
        }
    }

    fn typed(&mut self, t: &str, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        Ok(match t {
            "object" => self.object(schema, name, at)?,
            "array" => self.array(schema, name, at)?,
            "string" => self.string(schema, at)?,
            "number" | "integer" | "boolean" | "null" => self.primitive(t),
            other => return Err(unsupported(at, &format!("unknown type '{other}'"))),
        })
    }

    fn union(&mut self, alts: &'s Json, name: &str, at: &str) -> Result<String> {
        let Json::Array(alts) = alts else {
            return Err(unsupported(at, "'anyOf' and 'oneOf' must be arrays"));
        };
        let mut names = Vec::new();
        for (i, s) in alts.iter().enumerate() {
            names.push(self.visit(s, &format!("{name}-{i}"), &format!("{at}/anyOf/{i}"))?);
        }
        Ok(names.join(" | "))
    }

    /// A count keyword (`minItems` and the like), checked against what the grammar allows.
    fn count(schema: &Json, key: &str, at: &str) -> Result<Option<u32>> {
        match schema.get(key) {
            None => Ok(None),
            Some(Json::Number(n)) => match n.parse::<u32>() {
                Ok(v) if v <= MAX_REPEAT => Ok(Some(v)),
                _ => Err(unsupported(
                    at,
                    &format!("'{key}' must be a whole number from 0 to {MAX_REPEAT}, got {n}"),
                )),
            },
            Some(_) => Err(unsupported(at, &format!("'{key}' must be a number"))),
        }
    }

    fn string(&mut self, schema: &Json, at: &str) -> Result<String> {
        let min = Self::count(schema, "minLength", at)?;
        let max = Self::count(schema, "maxLength", at)?;
        if min.is_none() && max.is_none() {
            return Ok(self.primitive("string"));
        }
        let (min, max) = (min.unwrap_or(0), max);
        if max.is_some_and(|m| m < min) {
            return Err(unsupported(at, "'maxLength' is below 'minLength'"));
        }
        let char_rule = self.primitive("char");
        let reps = match max {
            None if min == 0 => format!("{char_rule}*"),
            None => format!("{char_rule}{{{min},}}"),
            Some(m) => format!("{char_rule}{{{min},{m}}}"),
        };
        Ok(format!(r#""\"" {reps} "\"" space"#))
    }

    fn array(&mut self, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        let min = Self::count(schema, "minItems", at)?.unwrap_or(0);
        let max = Self::count(schema, "maxItems", at)?;
        if max.is_some_and(|m| m < min) {
            return Err(unsupported(at, "'maxItems' is below 'minItems'"));
        }
        let item = match schema.get("items") {
            None => self.primitive("value"),
            Some(Json::Array(_)) => {
                return Err(unsupported(
                    at,
                    "'items' as an array (tuples) is not supported",
                ))
            }
            Some(s) => self.visit(s, &format!("{name}-item"), &format!("{at}/items"))?,
        };
        let inner = repetition(&item, min, max, r#""," space"#);
        Ok(format!(r#""[" space {inner} "]" space"#))
    }

    fn object(&mut self, schema: &'s Json, name: &str, at: &str) -> Result<String> {
        let props: &[(String, Json)] = match schema.get("properties") {
            None => &[],
            Some(Json::Object(kv)) => kv,
            Some(_) => return Err(unsupported(at, "'properties' must be an object")),
        };
        let additional = schema.get("additionalProperties");
        if props.is_empty() && matches!(additional, None | Some(Json::Bool(true))) {
            return Ok(self.primitive("object"));
        }
        let required: Vec<&str> = match schema.get("required") {
            None => Vec::new(),
            Some(Json::Array(r)) => r.iter().filter_map(Json::as_str).collect(),
            Some(_) => return Err(unsupported(at, "'required' must be an array")),
        };
        let mut kv_rules = Vec::new();
        for (key, sub) in props {
            let prop_at = format!("{at}/properties/{key}");
            let value = self.visit(sub, &format!("{name}-{key}"), &prop_at)?;
            let kv = format!(
                "{} space \":\" space {value}",
                literal(&Json::String(key.clone()).dump())
            );
            let rule = self.add(&format!("{name}-{key}-kv"), kv);
            kv_rules.push((key.as_str(), rule, required.contains(&key.as_str())));
        }
        let mut optional: Vec<(String, bool)> = kv_rules
            .iter()
            .filter(|k| !k.2)
            .map(|k| (k.1.clone(), false))
            .collect();
        if let Some(extra) = self.additional(additional, props, name, at)? {
            optional.push((extra, true));
        }
        let req: Vec<&str> = kv_rules
            .iter()
            .filter(|k| k.2)
            .map(|k| k.1.as_str())
            .collect();
        let mut body = String::from(r#""{" space "#);
        body.push_str(&req.join(r#" "," space "#));
        if !optional.is_empty() {
            let chains: Vec<String> = (0..optional.len())
                .map(|i| self.optional_chain(&optional[i..], false))
                .collect();
            let alts = chains.join(" | ");
            if req.is_empty() {
                body.push_str(&format!("({alts})?"));
            } else {
                body.push_str(&format!(r#" ("," space ({alts}))?"#));
            }
        }
        body.push_str(r#" "}" space"#);
        Ok(body)
    }

    /// Optional properties in order, each after a comma: the first of `kvs` (unless
    /// `first_optional`), then any of the rest. The additional-property rule may repeat.
    fn optional_chain(&mut self, kvs: &[(String, bool)], first_optional: bool) -> String {
        let (kv, repeats) = &kvs[0];
        let comma = format!(r#"("," space {kv})"#);
        let mut out = match (first_optional, repeats) {
            (true, true) => format!("{comma}*"),
            (true, false) => format!("{comma}?"),
            (false, true) => format!("{kv} {comma}*"),
            (false, false) => kv.clone(),
        };
        if kvs.len() > 1 {
            let rest = self.optional_chain(&kvs[1..], true);
            let rule = self.add(&format!("{kv}-rest"), rest);
            out.push(' ');
            out.push_str(&rule);
        }
        out
    }

    /// The rule for one property beyond the named ones, if `additionalProperties` allows any:
    /// a key other than the named ones, and a value of its schema (any value for `true`).
    fn additional(
        &mut self,
        additional: Option<&'s Json>,
        props: &[(String, Json)],
        name: &str,
        at: &str,
    ) -> Result<Option<String>> {
        let value = match additional {
            None | Some(Json::Bool(false)) => return Ok(None),
            Some(Json::Bool(true)) => self.primitive("value"),
            Some(s @ Json::Object(_)) => self.visit(
                s,
                &format!("{name}-additional-value"),
                &format!("{at}/additionalProperties"),
            )?,
            Some(_) => {
                return Err(unsupported(
                    at,
                    "'additionalProperties' must be a boolean or a schema",
                ))
            }
        };
        let key = if props.is_empty() {
            self.primitive("string")
        } else {
            let names: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
            self.key_other_than(&names, &format!("{name}-additional-k"))
        };
        let kv = format!(r#"{key} ":" space {value}"#);
        Ok(Some(self.add(&format!("{name}-additional-kv"), kv)))
    }

    /// A JSON string that is none of `names`: a trie of the names, one rule per node, each
    /// leaving the trie by a character that no name continues with, or ending where no name
    /// ends.
    fn key_other_than(&mut self, names: &[&str], name: &str) -> String {
        self.primitive("char");
        let prefixes: Vec<Vec<char>> = names.iter().map(|n| n.chars().collect()).collect();
        let start = self.key_node(&prefixes, 0, name);
        let body = format!(r#""\"" {start} "\"" space"#);
        self.add(name, body)
    }

    fn key_node(&mut self, names: &[Vec<char>], depth: usize, name: &str) -> String {
        let ends_here = names.iter().any(|n| n.len() == depth);
        let mut next: Vec<char> = names.iter().filter_map(|n| n.get(depth).copied()).collect();
        next.sort_unstable();
        next.dedup();
        let mut alts = Vec::new();
        for &c in &next {
            let below: Vec<Vec<char>> = names
                .iter()
                .filter(|n| n.get(depth) == Some(&c))
                .cloned()
                .collect();
            let child = self.key_node(&below, depth + 1, name);
            alts.push(format!("{} {child}", literal(&c.to_string())));
        }
        let excluded: String = next
            .iter()
            .map(|&c| match c {
                ']' | '\\' | '^' | '-' => format!("\\{c}"),
                c => c.to_string(),
            })
            .collect();
        alts.push(format!(r#"[^"\\\x7F\x00-\x1F{excluded}] char*"#));
        alts.push(r#"[\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}) char*"#.to_string());
        if !ends_here {
            // First: an empty alternative last would let the rule run on past its line.
            alts.insert(0, String::new());
        }
        self.add(&format!("{name}-{depth}"), alts.join(" | "))
    }

    /// The rule for `$ref` target `r` (`#/definitions/x` or `#/$defs/x`), converted once.
    fn reference(&mut self, r: &str, at: &str) -> Result<String> {
        if let Some(done) = self.refs.get(r) {
            return Ok(done.clone());
        }
        let path: Vec<&str> = match r.strip_prefix("#/") {
            Some(p) => p.split('/').collect(),
            None => {
                return Err(unsupported(
                    at,
                    &format!("'$ref' {r} is not supported: only #/definitions/... and #/$defs/..."),
                ))
            }
        };
        let [section @ ("definitions" | "$defs"), def] = path[..] else {
            return Err(unsupported(
                at,
                &format!("'$ref' {r} is not supported: only #/definitions/... and #/$defs/..."),
            ));
        };
        let root = self.root;
        let target = root
            .get(section)
            .and_then(|s| s.get(def))
            .ok_or_else(|| unsupported(at, &format!("'$ref' {r} points at nothing")))?;
        // Named before it is converted, so a definition may refer to itself.
        let rule = rule_name(&format!("ref-{def}"));
        self.refs.insert(r.to_string(), rule.clone());
        let placeholder = self.rules.len();
        self.rules.push((rule.clone(), String::new()));
        let body = self.body(target, &rule, r)?;
        self.rules[placeholder].1 = body;
        Ok(rule)
    }
}

#[cfg(test)]
mod tests;
