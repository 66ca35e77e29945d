//! Turns parsed rules into the flat element array the matcher walks (llama.cpp's layout: each
//! rule is its alternatives back to back, separated by `Alt` and closed by `End`). Groups and
//! repetitions become generated rules; rule references are checked to exist and the grammar
//! is refused if a rule can reach itself without reading a character (left recursion), which
//! the stack-based matcher could not terminate on.

use std::collections::HashMap;

use super::limits::{MAX_ELEMENTS, MAX_RULES};
use super::parse::{Item, Pos, RuleDef};
use super::{Elem, Grammar};
use crate::{EngineError, Result};

/// Compiles `defs` (from [`super::parse::parse`]) into a grammar starting at `root`.
pub(crate) fn compile(defs: Vec<RuleDef>) -> Result<Grammar> {
    let mut c = Compiler::default();
    for d in &defs {
        if let Some(&(_, first)) = c.ids.get(&d.name) {
            return Err(at(
                d.at,
                &format!(
                    "rule '{}' is defined twice (first at line {})",
                    d.name, first.line
                ),
            ));
        }
        c.ids.insert(d.name.clone(), (c.names.len() as u32, d.at));
        c.names.push(d.name.clone());
        c.bodies.push(Vec::new());
    }
    let Some(&(root, _)) = c.ids.get("root") else {
        return Err(EngineError::Grammar(
            "grammar has no rule named 'root' to start from".into(),
        ));
    };
    for (i, d) in defs.iter().enumerate() {
        let alts = c.alternatives(&d.alternatives, &d.name)?;
        c.bodies[i] = alts;
    }
    refuse_left_recursion(&c.bodies, &c.names)?;
    Ok(Grammar::from_rules(c.bodies, c.names, root))
}

fn at(p: Pos, what: &str) -> EngineError {
    EngineError::Grammar(format!(
        "grammar line {}, column {}: {what}",
        p.line, p.column
    ))
}

#[derive(Default)]
struct Compiler {
    ids: HashMap<String, (u32, Pos)>,
    names: Vec<String>,
    /// Each rule's alternatives, each a sequence of elements (no `Alt` or `End` yet).
    bodies: Vec<Vec<Vec<Elem>>>,
    elements: usize,
}

impl Compiler {
    fn alternatives(&mut self, alts: &[Vec<Item>], rule: &str) -> Result<Vec<Vec<Elem>>> {
        alts.iter().map(|seq| self.sequence(seq, rule)).collect()
    }

    fn sequence(&mut self, items: &[Item], rule: &str) -> Result<Vec<Elem>> {
        let mut out = Vec::new();
        for item in items {
            self.item(item, rule, &mut out)?;
        }
        self.count(out.len() + 1)?;
        Ok(out)
    }

    fn count(&mut self, n: usize) -> Result<()> {
        self.elements += n;
        if self.elements > MAX_ELEMENTS {
            return Err(EngineError::Grammar(format!(
                "grammar expands to more than {MAX_ELEMENTS} elements (repetitions count each copy)"
            )));
        }
        Ok(())
    }

    /// A new rule named after the rule it was written in, as llama.cpp names its own.
    fn generated(&mut self, rule: &str, alts: Vec<Vec<Elem>>) -> Result<Elem> {
        if self.names.len() >= MAX_RULES {
            return Err(EngineError::Grammar(format!(
                "grammar needs more than {MAX_RULES} rules (groups and repetitions count)"
            )));
        }
        let id = self.names.len() as u32;
        self.names.push(format!("{rule}_{id}"));
        self.bodies.push(alts);
        Ok(Elem::RuleRef(id))
    }

    fn item(&mut self, item: &Item, rule: &str, out: &mut Vec<Elem>) -> Result<()> {
        match item {
            Item::Literal(chars) => out.extend(chars.iter().map(|&c| Elem::Char(c))),
            Item::Class { negated, ranges } => class(*negated, ranges, out),
            Item::Any => out.push(Elem::Any),
            Item::Ref { name, at: p } => match self.ids.get(name) {
                Some(&(id, _)) => out.push(Elem::RuleRef(id)),
                None => return Err(at(*p, &format!("undefined rule '{name}'"))),
            },
            Item::Group(alts) if alts.len() == 1 => {
                for i in &alts[0] {
                    self.item(i, rule, out)?;
                }
            }
            Item::Group(alts) => {
                let alts = self.alternatives(alts, rule)?;
                out.push(self.generated(rule, alts)?);
            }
            Item::Repeat { item, min, max } => self.repeat(item, *min, *max, rule, out)?,
        }
        Ok(())
    }

    /// `item{min,max}`: `min` copies, then either a rule `s ::= item s | ` (no maximum) or a
    /// chain of `max - min` nested optional rules, so that a bounded repetition stays linear.
    fn repeat(
        &mut self,
        item: &Item,
        min: u32,
        max: Option<u32>,
        rule: &str,
        out: &mut Vec<Elem>,
    ) -> Result<()> {
        let mut one = Vec::new();
        self.item(item, rule, &mut one)?;
        // Several copies of a long item share one rule.
        if one.len() > 1 && (min > 1 || max.is_none_or(|m| m > 1)) {
            one = vec![self.generated(rule, vec![one])?];
        }
        self.count(one.len() * min as usize)?;
        for _ in 0..min {
            out.extend_from_slice(&one);
        }
        match max {
            None => {
                let id = self.names.len() as u32;
                let mut again = one.clone();
                again.push(Elem::RuleRef(id));
                self.count(again.len() + 2)?;
                out.push(self.generated(rule, vec![again, Vec::new()])?);
            }
            Some(max) => {
                let mut tail: Option<Elem> = None;
                for _ in min..max {
                    let mut more = one.clone();
                    more.extend(tail);
                    self.count(more.len() + 2)?;
                    tail = Some(self.generated(rule, vec![more, Vec::new()])?);
                }
                out.extend(tail);
            }
        }
        Ok(())
    }
}

/// A character class as llama.cpp lays it out: the first range as `Char` (or `CharNot`), the
/// others as `CharAlt`, each range's upper end as `RngUpper`.
fn class(negated: bool, ranges: &[(u32, u32)], out: &mut Vec<Elem>) {
    if ranges.is_empty() {
        // `[]` matches nothing, `[^]` anything.
        if negated {
            out.push(Elem::Any);
        } else {
            out.extend([Elem::Char(1), Elem::RngUpper(0)]);
        }
        return;
    }
    for (i, &(lo, hi)) in ranges.iter().enumerate() {
        out.push(match (i, negated) {
            (0, false) => Elem::Char(lo),
            (0, true) => Elem::CharNot(lo),
            _ => Elem::CharAlt(lo),
        });
        if hi != lo {
            out.push(Elem::RngUpper(hi));
        }
    }
}

/// Rules that can match the empty string.
fn nullable_rules(bodies: &[Vec<Vec<Elem>>]) -> Vec<bool> {
    let mut nullable = vec![false; bodies.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for (r, alts) in bodies.iter().enumerate() {
            if nullable[r] {
                continue;
            }
            let empty = alts.iter().any(|seq| {
                seq.iter().all(|e| match e {
                    Elem::RuleRef(t) => nullable[*t as usize],
                    _ => false,
                })
            });
            if empty {
                nullable[r] = true;
                changed = true;
            }
        }
    }
    nullable
}

/// Refuses a rule that can reach itself before reading any character, naming the cycle.
fn refuse_left_recursion(bodies: &[Vec<Vec<Elem>>], names: &[String]) -> Result<()> {
    let nullable = nullable_rules(bodies);
    // Rules each rule can start with: references reached before anything that reads.
    let leftmost: Vec<Vec<u32>> = bodies
        .iter()
        .map(|alts| {
            let mut refs = Vec::new();
            for seq in alts {
                for e in seq {
                    match e {
                        Elem::RuleRef(t) => {
                            refs.push(*t);
                            if !nullable[*t as usize] {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            }
            refs
        })
        .collect();
    // Iterative depth-first search: 0 unvisited, 1 on the path, 2 done.
    let mut state = vec![0u8; bodies.len()];
    for start in 0..bodies.len() {
        if state[start] != 0 {
            continue;
        }
        let mut path: Vec<(u32, usize)> = vec![(start as u32, 0)];
        state[start] = 1;
        while let Some(&mut (r, ref mut next)) = path.last_mut() {
            let edges = &leftmost[r as usize];
            if *next == edges.len() {
                state[r as usize] = 2;
                path.pop();
                continue;
            }
            let t = edges[*next];
            *next += 1;
            match state[t as usize] {
                0 => {
                    state[t as usize] = 1;
                    path.push((t, 0));
                }
                1 => return Err(left_recursion(t, &path, names)),
                _ => {}
            }
        }
    }
    Ok(())
}

fn left_recursion(t: u32, path: &[(u32, usize)], names: &[String]) -> EngineError {
    let from = path.iter().position(|&(r, _)| r == t).unwrap_or(0);
    let cycle: Vec<&str> = path[from..]
        .iter()
        .map(|&(r, _)| names[r as usize].as_str())
        .chain([names[t as usize].as_str()])
        .collect();
    EngineError::Grammar(format!(
        "grammar rule '{}' is left-recursive ({}): it can reach itself before reading a character",
        names[t as usize],
        cycle.join(" -> ")
    ))
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse;
    use super::*;

    fn err(text: &str) -> String {
        compile(parse(text).unwrap()).unwrap_err().to_string()
    }

    #[test]
    fn refuses_undefined_rules_with_their_place() {
        assert_eq!(
            err("root ::= \"a\" thing\n"),
            "grammar line 1, column 14: undefined rule 'thing'"
        );
    }

    #[test]
    fn refuses_a_missing_root_and_twice_defined_rules() {
        assert_eq!(
            err("start ::= \"a\""),
            "grammar has no rule named 'root' to start from"
        );
        assert_eq!(
            err("root ::= \"a\"\nroot ::= \"b\""),
            "grammar line 2, column 1: rule 'root' is defined twice (first at line 1)"
        );
    }

    #[test]
    fn refuses_left_recursion_naming_the_cycle() {
        assert_eq!(
            err("root ::= expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]"),
            "grammar rule 'expr' is left-recursive (expr -> expr): it can reach itself before reading a character"
        );
        assert_eq!(
            err("root ::= a\na ::= b? \"x\" | c\nb ::= \"y\"\nc ::= opt a\nopt ::= \"z\"?"),
            "grammar rule 'a' is left-recursive (a -> c -> a): it can reach itself before reading a character"
        );
        // Right recursion is fine.
        compile(parse("root ::= \"a\" root | \"b\"").unwrap()).unwrap();
    }

    #[test]
    fn repetitions_stay_linear_and_are_capped() {
        // A thousand copies of a long literal share one rule; nested repetitions multiply
        // references, not elements.
        let g = format!("root ::= \"{}\"{{1000}}", "a".repeat(1000));
        compile(parse(&g).unwrap()).unwrap();
        let g = "root ::= ((((\"a\"{1000}){1000}){1000}){1000})";
        assert!(compile(parse(g).unwrap()).unwrap().rule_count() < 10);
        // Each bounded optional count is a rule: 25 of them pass the cap.
        let g = format!("root ::= {}", "\"a\"{0,1000} ".repeat(25));
        assert!(err(&g).contains("more than 20000 rules"), "{}", err(&g));
    }
}
