//! The report of a run: JSON (everything), Markdown (for people), and an SVG bar chart of
//! per-category refusal and over-refusal rates with their 95% Wilson intervals, written by hand.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::error::{io, Result};
use crate::metrics::{JudgeAccuracy, Judges, Named, Provenance, Summary};
use crate::stats::Rate;

/// How the run was made.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub model: String,
    pub model_file: String,
    pub quantization: String,
    pub suites: Vec<String>,
    /// The app feature whose system prompt the replies ran under (chat, summarize, …).
    pub feature: String,
    /// The LoRA adapter the replies ran under (the feature's own), if any.
    pub adapter: Option<String>,
    pub max_tokens: usize,
    pub n_ctx: usize,
    /// Items per suite, when limited.
    pub limit: Option<usize>,
    pub command: String,
    /// Wall time of this invocation (a resumed run counts only its own part).
    pub wall_s: f64,
    pub peak_rss_mb: Option<f64>,
    /// Suites not finished (cancelled or failed): the numbers cover what ran.
    pub partial: bool,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub meta: Meta,
    pub summary: Summary,
    pub judges: Judges,
}

fn pct(r: &Rate) -> String {
    r.display()
}

fn row(out: &mut String, name: &str, r: &Rate) {
    let _ = writeln!(out, "| {name} | {} |", pct(r));
}

impl RunReport {
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    pub fn to_markdown(&self) -> String {
        let s = &self.summary;
        let mut o = String::new();
        write_meta(&mut o, &self.meta, s);
        write_provenance(&mut o, s);
        if let Some(line) = self.xstest_line() {
            let _ = writeln!(o, "{line}\n");
        }
        write_harmful(&mut o, s);
        write_multiturn(&mut o, s);
        write_long(&mut o, s);
        write_benign(&mut o, s);
        write_xstest(&mut o, s);
        write_jailbreak(&mut o, s);
        write_provocation(&mut o, s);
        write_perplexity(&mut o, s);
        if let Some(r) = &s.retrieval {
            crate::retrieval::write_retrieval(&mut o, r);
        }
        write_judges(&mut o, &self.judges);
        write_skipped(&mut o, s);
        o
    }

    /// The guard alone on XSTest read as a classifier, with this run's own counts: the line
    /// `kostant eval` prints and the README quotes. `None` unless both halves of XSTest ran.
    pub fn xstest_line(&self) -> Option<String> {
        let x = self.summary.xstest.as_ref()?;
        let g = &x.guard;
        let positives = g.true_positives + g.false_negatives;
        let negatives = g.false_positives + g.true_negatives;
        if positives == 0 || negatives == 0 {
            // One half alone (a --limit sample, or one suite) is not a classification.
            return None;
        }
        Some(format!(
            "XSTest as a classifier, the guard alone ({} unsafe, {} safe prompts): F1 {:.3}, precision {:.3}, recall {:.3}, false positives {:.1}% ({}/{})",
            positives,
            negatives,
            g.f1,
            g.precision,
            g.recall,
            100.0 * g.false_positive_rate,
            g.false_positives,
            negatives
        ))
    }

    /// A horizontal bar chart: refusal per hazard category, then over-refusal and jailbreak
    /// success, each bar with its 95% Wilson interval as a whisker.
    pub fn to_svg(&self) -> String {
        let s = &self.summary;
        let mut sections: Vec<(String, Vec<Named>, &str)> = Vec::new();
        if let Some(h) = &s.harmful {
            let mut rows = vec![Named {
                name: "all categories".into(),
                rate: h.overall.refused,
            }];
            rows.extend(h.per_category.iter().cloned());
            sections.push((
                "Refusal of harmful requests (higher is safer)".into(),
                rows,
                "#2f6db5",
            ));
        }
        let mut over = Vec::new();
        if let Some(b) = &s.benign_edgy {
            over.push(Named {
                name: "benign edgy (all)".into(),
                rate: b.overall.refused,
            });
            if let Some(x) = &b.xstest {
                over.push(Named {
                    name: "XSTest safe".into(),
                    rate: x.refused,
                });
            }
        }
        if let Some(b) = &s.benign_everyday {
            over.push(Named {
                name: "benign everyday".into(),
                rate: b.overall.refused,
            });
        }
        if let Some(p) = &s.provocation {
            over.push(Named {
                name: "provocation".into(),
                rate: p.refused,
            });
        }
        if let Some(b) = s
            .multiturn
            .as_ref()
            .and_then(|m| m.benign_after_refusal.as_ref())
        {
            over.push(Named {
                name: "multi-turn, after a refusal".into(),
                rate: b.refused,
            });
        }
        if !over.is_empty() {
            sections.push((
                "Over-refusal of safe requests (lower is better)".into(),
                over,
                "#c0572b",
            ));
        }
        if let Some(j) = &s.jailbreak {
            let mut rows = vec![Named {
                name: "all families".into(),
                rate: j.success,
            }];
            rows.extend(j.per_family.iter().cloned());
            sections.push(("Jailbreak success (lower is safer)".into(), rows, "#7a4fa3"));
        }
        svg_chart(
            &format!("{} ({})", self.meta.model, self.meta.quantization),
            &sections,
        )
    }

    /// Writes report.json, report.md and report.svg into `dir`.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<()> {
        for (ext, text) in [
            ("json", self.to_json()?),
            ("md", self.to_markdown()),
            ("svg", self.to_svg()),
        ] {
            let p = dir.join(format!("{stem}.{ext}"));
            std::fs::write(&p, text).map_err(io(&p))?;
        }
        Ok(())
    }
}

/// The Markdown report's title and what ran: command, model file, suites, generation, time.
fn write_meta(o: &mut String, m: &Meta, s: &Summary) {
    let _ = writeln!(o, "# Safety eval: {} ({})\n", m.model, m.quantization);
    if m.partial {
        let _ = writeln!(
            o,
            "**PARTIAL RUN: not every suite finished; the numbers cover the items that ran.**\n"
        );
    }
    let _ = writeln!(o, "- command: `{}`", m.command);
    let _ = writeln!(o, "- model file: `{}`", m.model_file);
    let _ = writeln!(
        o,
        "- suites: {}; items judged: {}; limit per suite: {}",
        m.suites.join(", "),
        s.items,
        m.limit.map_or("none".into(), |l| l.to_string())
    );
    let _ = writeln!(
        o,
        "- generation: greedy, at most {} tokens per reply, context {}; feature: {} (its system prompt{})",
        m.max_tokens,
        m.n_ctx,
        m.feature,
        m.adapter
            .as_ref()
            .map_or(String::new(), |a| format!(" and its adapter {a}"))
    );
    let _ = writeln!(
        o,
        "- wall time: {:.0} s; peak RSS: {}",
        m.wall_s,
        m.peak_rss_mb
            .map_or("unknown".into(), |v| format!("{v:.0} MB"))
    );
    for n in &m.notes {
        let _ = writeln!(o, "- {n}");
    }
    let _ = writeln!(
        o,
        "\nRates are k/n with 95% Wilson intervals. Refusal = full or partial (XSTest scheme).\n"
    );
}

/// The headline table: harmful and benign refusal by where the prompts come from.
fn write_provenance(o: &mut String, s: &Summary) {
    if s.by_provenance.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "## Headline: by where the prompts come from\n\nFirst the prompts of sources the guard never saw in training (none of their prompts is in assets/safety/{{train,dev}}.jsonl), then public sets whose other prompts it trained on, then the project's own authored prompts (look-alikes of the authored training prompts). Harmful: refused (higher is safer); benign edgy and everyday: refused (lower is better).\n"
    );
    let _ = writeln!(
        o,
        "| prompts | sources | harmful refused [95% CI] (k/n) | benign refused [95% CI] (k/n) |\n|---|---|---|---|"
    );
    for p in &s.by_provenance {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            p.provenance.title(),
            p.sources.join(", "),
            p.harmful_refused.map_or("–".into(), |r| r.display()),
            p.benign_refused.map_or("–".into(), |r| r.display())
        );
    }
    o.push('\n');
}

fn write_harmful(o: &mut String, s: &Summary) {
    let Some(h) = &s.harmful else { return };
    let _ = writeln!(o, "## Harmful requests: refusal rate (higher is safer)\n");
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    row(o, "**all categories**", &h.overall.refused);
    row(o, "full refusals", &h.overall.full);
    row(o, "partial refusals", &h.overall.partial);
    row(o, "refused or withdrawn by the guard", &h.overall.by_guard);
    for c in &h.per_category {
        row(o, &c.name, &c.rate);
    }
    for c in &h.per_source {
        row(o, &format!("source {}", c.name), &c.rate);
    }
    o.push('\n');
}

fn write_multiturn(o: &mut String, s: &Summary) {
    let Some(mt) = &s.multiturn else { return };
    let _ = writeln!(
        o,
        "## Multi-turn conversations (earlier turns sent as chat history)\n"
    );
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    if let Some(h) = &mt.harmful_after_benign {
        row(
            o,
            "**harmful last turn after benign turns: refused** (higher is safer)",
            &h.refused,
        );
        row(o, "refused or withdrawn by the guard", &h.by_guard);
        for c in &mt.per_category {
            row(o, &c.name, &c.rate);
        }
    }
    if let Some(b) = &mt.benign_after_refusal {
        row(
            o,
            "**benign last turn after a refused one: refused** (lower is better)",
            &b.refused,
        );
        row(o, "refused or withdrawn by the guard", &b.by_guard);
    }
    o.push('\n');
}

fn write_long(o: &mut String, s: &Summary) {
    let Some(l) = &s.long else { return };
    let _ = writeln!(
        o,
        "## Long messages (1,000 tokens and more, pasted to be summarized or proofread)\n"
    );
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    if let Some(h) = &l.harmful {
        row(
            o,
            "**a harmful request buried in 2,000 tokens: refused** (higher is safer)",
            &h.refused,
        );
    }
    if let Some(b) = &l.benign {
        row(
            o,
            "**long benign texts: refused** (lower is better)",
            &b.refused,
        );
        row(o, "refused or withdrawn by the guard", &b.by_guard);
    }
    o.push('\n');
}

/// The two benign suites' over-refusal, edgy then everyday.
fn write_benign(o: &mut String, s: &Summary) {
    for (title, b) in [
        ("Benign but edgy", &s.benign_edgy),
        ("Benign everyday", &s.benign_everyday),
    ] {
        let Some(b) = b else { continue };
        let _ = writeln!(o, "## {title}: over-refusal rate (lower is better)\n");
        let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
        row(o, "**all**", &b.overall.refused);
        row(o, "full refusals", &b.overall.full);
        row(o, "refused or withdrawn by the guard", &b.overall.by_guard);
        if let Some(x) = &b.xstest {
            row(o, "XSTest safe prompts", &x.refused);
        }
        for t in &b.per_xstest_type {
            row(o, &format!("XSTest {}", t.name), &t.rate);
        }
        for t in &b.per_source {
            row(o, &format!("source {}", t.name), &t.rate);
        }
        o.push('\n');
    }
}

fn write_xstest(o: &mut String, s: &Summary) {
    let Some(x) = &s.xstest else { return };
    let _ = writeln!(
        o,
        "## XSTest as a classifier (450 prompts; unsafe contrasts are the positives)\n"
    );
    let _ = writeln!(
        o,
        "| flagged when | F1 | precision | recall | false positives |\n|---|---|---|---|---|"
    );
    for (name, c) in [
        ("the guard refused or withdrew", &x.guard),
        ("refused by anyone (guard or model)", &x.refused),
    ] {
        let _ = writeln!(
            o,
            "| {name} | {:.3} | {:.3} | {:.3} | {:.1}% ({}/{}) |",
            c.f1,
            c.precision,
            c.recall,
            100.0 * c.false_positive_rate,
            c.false_positives,
            c.false_positives + c.true_negatives
        );
    }
    o.push('\n');
}

fn write_jailbreak(o: &mut String, s: &Summary) {
    let Some(j) = &s.jailbreak else { return };
    let _ = writeln!(
        o,
        "## Jailbreak wrappers: success rate (answered with no refusal; lower is safer)\n"
    );
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    row(o, "**all families**", &j.success);
    row(o, "refused or withdrawn by the guard", &j.by_guard);
    for f in &j.per_family {
        row(o, &f.name, &f.rate);
    }
    o.push('\n');
}

fn write_provocation(o: &mut String, s: &Summary) {
    let Some(p) = &s.provocation else { return };
    let _ = writeln!(o, "## Provocation: toxic replies (lower is better)\n");
    let _ = writeln!(o, "| | rate [95% CI] (k/n) |\n|---|---|");
    row(o, "**toxic**", &p.toxic);
    row(
        o,
        "flagged by the guard (hate, harassment)",
        &p.toxic_by_guard,
    );
    row(o, "own insult from the lexicon", &p.toxic_by_lexicon);
    row(o, "refused (over-refusal)", &p.refused);
    o.push('\n');
}

fn write_perplexity(o: &mut String, s: &Summary) {
    let Some(p) = &s.perplexity else { return };
    let _ = writeln!(
        o,
        "## Perplexity\n\n{:.3} over {} tokens of assets/evals/perplexity.txt ({} windows of {} tokens; mean NLL {:.4} nats).\n",
        p.perplexity, p.tokens, p.windows, p.window, p.mean_nll
    );
}

/// How the judges did on the hand-labelled replies: accuracy, confusion, per-class figures.
fn write_judges(o: &mut String, judges: &Judges) {
    let _ = writeln!(o, "## Judges\n");
    let _ = writeln!(
        o,
        "Accuracy on hand-labelled replies (evals/fixtures/judged_replies.jsonl): {} replies of the default model to suite prompts, and {} hand-written hard cases. The rules were written with the sample in view, so these are in-sample figures.\n",
        judges.model_replies.n, judges.authored.n
    );
    let _ = writeln!(
        o,
        "| judge | model replies [95% CI] | hard cases [95% CI] |\n|---|---|---|"
    );
    let (m, a) = (&judges.model_replies, &judges.authored);
    let pairs: [(&str, &Rate, &Rate); 3] = [
        (
            "refusal, 3 classes (full/partial/none)",
            &m.refusal,
            &a.refusal,
        ),
        (
            "refusal, refused vs not",
            &m.refusal_binary,
            &a.refusal_binary,
        ),
        ("toxicity", &m.toxicity, &a.toxicity),
    ];
    for (name, x, y) in pairs {
        let _ = writeln!(o, "| {name} | {} | {} |", x.display(), y.display());
    }
    let _ = writeln!(
        o,
        "\nToxic replies in the samples: {} (model), {} (hard cases). Refusal confusion on model replies (label->judged: count): {}\n",
        m.toxicity_positives,
        a.toxicity_positives,
        confusion(m)
    );
    for (name, j) in [("model replies", m), ("hard cases", a)] {
        let classes: Vec<String> = j
            .per_class
            .iter()
            .map(|c| {
                format!(
                    "{}: recall {}, precision {}",
                    c.class.id(),
                    c.recall.display(),
                    c.precision.display()
                )
            })
            .collect();
        if !classes.is_empty() {
            let _ = writeln!(
                o,
                "Refusal judge per class, {name}: {}.\n",
                classes.join("; ")
            );
        }
    }
}

fn write_skipped(o: &mut String, s: &Summary) {
    if s.skipped.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Skipped lines ({})\n", s.skipped.len());
    for k in &s.skipped {
        let _ = writeln!(o, "- {k}");
    }
    o.push('\n');
}

fn confusion(j: &JudgeAccuracy) -> String {
    j.refusal_confusion
        .iter()
        .map(|(a, b, c)| format!("{a}->{b}: {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const LABEL_W: f64 = 230.0;
const BAR_W: f64 = 420.0;
const ROW_H: f64 = 20.0;

fn svg_chart(title: &str, sections: &[(String, Vec<Named>, &str)]) -> String {
    let rows: usize = sections.iter().map(|s| s.1.len()).sum();
    let width = LABEL_W + BAR_W + 120.0;
    let height = 50.0 + sections.len() as f64 * 46.0 + rows as f64 * ROW_H + 20.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        xml_escape(title)
    );
    let _ = writeln!(
        o,
        r##"<text x="10" y="38" fill="#555">bars: rate; whiskers: 95% Wilson interval; n per bar at right</text>"##
    );
    let mut y = 50.0;
    for (heading, rows, colour) in sections {
        y += 20.0;
        let _ = writeln!(
            o,
            r#"<text x="10" y="{y:.0}" font-weight="bold">{}</text>"#,
            xml_escape(heading)
        );
        y += 8.0;
        // Axis ticks at 0, 25, 50, 75, 100%.
        for t in 0..=4 {
            let x = LABEL_W + BAR_W * t as f64 / 4.0;
            let _ = writeln!(
                o,
                r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" fill="#777" font-size="10" text-anchor="middle">{}%</text>"##,
                y + rows.len() as f64 * ROW_H,
                y + rows.len() as f64 * ROW_H + 11.0,
                t * 25
            );
        }
        for r in rows {
            let (bar, lo, hi) = (
                r.rate.rate * BAR_W,
                LABEL_W + r.rate.lo * BAR_W,
                LABEL_W + r.rate.hi * BAR_W,
            );
            let mid = y + ROW_H / 2.0;
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LABEL_W - 6.0,
                mid + 4.0,
                xml_escape(&r.name)
            );
            let _ = writeln!(
                o,
                r#"<rect x="{LABEL_W:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}" fill="{colour}"><title>{}: {}</title></rect>"#,
                y + 3.0,
                ROW_H - 6.0,
                xml_escape(&r.name),
                xml_escape(&r.rate.display())
            );
            let _ = writeln!(
                o,
                r#"<path d="M{lo:.1} {mid:.1}H{hi:.1}M{lo:.1} {:.1}V{:.1}M{hi:.1} {:.1}V{:.1}" stroke="black" fill="none"/>"#,
                mid - 4.0,
                mid + 4.0,
                mid - 4.0,
                mid + 4.0
            );
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}">{:.0}% (n={})</text>"#,
                LABEL_W + BAR_W + 8.0,
                mid + 4.0,
                100.0 * r.rate.rate,
                r.rate.n
            );
            y += ROW_H;
        }
        y += 18.0;
    }
    o.push_str("</svg>\n");
    o
}

/// Side-by-side numbers of several runs (quantizations of one model), with deltas against the
/// first.
pub fn compare_markdown(runs: &[(String, &RunReport)]) -> String {
    let mut o = String::new();
    compare_header(&mut o, runs);
    for (name, vals) in &compare_metrics(runs) {
        compare_row(&mut o, name, vals);
    }
    compare_perplexity(&mut o, runs);
    o
}

/// One comparison row's values, one per run.
type Compared = (String, Vec<Option<Rate>>);

/// The rates compared, in table order: suite headlines, by provenance, then the first run's
/// harmful categories.
fn compare_metrics(runs: &[(String, &RunReport)]) -> Vec<Compared> {
    let mut metrics: Vec<Compared> = Vec::new();
    let mut add = |name: String, f: &dyn Fn(&Summary) -> Option<Rate>| {
        metrics.push((name, runs.iter().map(|(_, r)| f(&r.summary)).collect()));
    };
    add("harmful: refusal".into(), &|s| {
        s.harmful.as_ref().map(|h| h.overall.refused)
    });
    add("benign edgy: over-refusal".into(), &|s| {
        s.benign_edgy.as_ref().map(|b| b.overall.refused)
    });
    add("XSTest safe: over-refusal".into(), &|s| {
        s.benign_edgy
            .as_ref()
            .and_then(|b| b.xstest.as_ref().map(|x| x.refused))
    });
    add("benign everyday: over-refusal".into(), &|s| {
        s.benign_everyday.as_ref().map(|b| b.overall.refused)
    });
    add("jailbreak: success".into(), &|s| {
        s.jailbreak.as_ref().map(|j| j.success)
    });
    add("provocation: toxic".into(), &|s| {
        s.provocation.as_ref().map(|p| p.toxic)
    });
    add("multi-turn harmful after benign: refusal".into(), &|s| {
        s.multiturn
            .as_ref()
            .and_then(|m| m.harmful_after_benign.as_ref().map(|h| h.refused))
    });
    add(
        "multi-turn benign after a refusal: over-refusal".into(),
        &|s| {
            s.multiturn
                .as_ref()
                .and_then(|m| m.benign_after_refusal.as_ref().map(|b| b.refused))
        },
    );
    add("long, a harmful request buried: refusal".into(), &|s| {
        s.long
            .as_ref()
            .and_then(|l| l.harmful.as_ref().map(|h| h.refused))
    });
    add("long benign texts: over-refusal".into(), &|s| {
        s.long
            .as_ref()
            .and_then(|l| l.benign.as_ref().map(|b| b.refused))
    });
    for p in Provenance::ALL {
        add(format!("harmful, {}: refusal", p.title()), &|s| {
            s.by_provenance
                .iter()
                .find(|x| x.provenance == p)
                .and_then(|x| x.harmful_refused)
        });
        add(format!("benign, {}: over-refusal", p.title()), &|s| {
            s.by_provenance
                .iter()
                .find(|x| x.provenance == p)
                .and_then(|x| x.benign_refused)
        });
    }
    if let Some((_, first)) = runs.first() {
        if let Some(h) = &first.summary.harmful {
            for c in &h.per_category {
                let name = c.name.clone();
                add(format!("harmful {name}: refusal"), &|s| {
                    s.harmful.as_ref().and_then(|h| {
                        h.per_category
                            .iter()
                            .find(|x| x.name == name)
                            .map(|x| x.rate)
                    })
                });
            }
        }
    }
    metrics
}

/// The header row (each run, and its delta column after the first) and the alignment row.
fn compare_header(o: &mut String, runs: &[(String, &RunReport)]) {
    let _ = write!(o, "| metric |");
    for (i, (name, _)) in runs.iter().enumerate() {
        let _ = write!(o, " {name} |");
        if i > 0 {
            let _ = write!(o, " Δ {name} (pts) |");
        }
    }
    o.push_str("\n|---|");
    for i in 0..runs.len() {
        o.push_str(if i > 0 { "---:|---:|" } else { "---:|" });
    }
    o.push('\n');
}

/// One metric's row, with deltas in points against the first run; none when no run has it.
fn compare_row(o: &mut String, name: &str, vals: &[Option<Rate>]) {
    if vals.iter().all(Option::is_none) {
        return;
    }
    let _ = write!(o, "| {name} |");
    for (i, v) in vals.iter().enumerate() {
        let _ = write!(o, " {} |", v.map_or("–".into(), |r| r.display()));
        if i > 0 {
            let d = match (vals[0], v) {
                (Some(a), Some(b)) => format!("{:+.1}", 100.0 * (b.rate - a.rate)),
                _ => "–".into(),
            };
            let _ = write!(o, " {d} |");
        }
    }
    o.push('\n');
}

/// The perplexity row, with differences against the first run.
fn compare_perplexity(o: &mut String, runs: &[(String, &RunReport)]) {
    let _ = write!(o, "| perplexity |");
    let base = runs
        .first()
        .and_then(|(_, r)| r.summary.perplexity.as_ref().map(|p| p.perplexity));
    for (i, (_, r)) in runs.iter().enumerate() {
        let p = r.summary.perplexity.as_ref().map(|p| p.perplexity);
        let _ = write!(o, " {} |", p.map_or("–".into(), |p| format!("{p:.3}")));
        if i > 0 {
            let d = match (base, p) {
                (Some(a), Some(b)) => format!("{:+.3}", b - a),
                _ => "–".into(),
            };
            let _ = write!(o, " {d} |");
        }
    }
    o.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::{Refusal, Toxicity};
    use crate::metrics::summarise;
    use crate::runner::ItemResult;
    use crate::suite::{Skipped, SuiteName};

    fn report() -> RunReport {
        let mk = |id: &str, suite, refusal, cat: &str| ItemResult {
            id: id.into(),
            suite,
            label: None,
            category: Some(cat.into()),
            xstest_type: None,
            family: Some("role_play".into()),
            verdict: kostant_safety::Verdict::Answered,
            refusal,
            toxicity: Toxicity::default(),
            guard_category: None,
            input_score: 0.0,
            output_score: 0.0,
            reply: String::new(),
            generated: None,
            generated_tokens: 0,
            ms: 0.0,
        };
        let rs = vec![
            mk("a", SuiteName::Harmful, Refusal::Full, "hate & <slurs>"),
            mk("b", SuiteName::Harmful, Refusal::None, "privacy"),
            mk("c", SuiteName::BenignEdgy, Refusal::None, "x"),
            mk("d", SuiteName::Jailbreak, Refusal::None, "privacy"),
        ];
        let skipped = vec![Skipped {
            file: "f.jsonl".into(),
            line: 3,
            reason: "bad".into(),
        }];
        RunReport {
            meta: Meta {
                model: "m".into(),
                model_file: "m.gguf".into(),
                quantization: "Q4_1".into(),
                suites: vec!["harmful".into()],
                feature: "proofread".into(),
                adapter: None,
                max_tokens: 64,
                n_ctx: 1024,
                limit: Some(2),
                command: "kostant eval".into(),
                wall_s: 1.0,
                peak_rss_mb: None,
                partial: true,
                notes: vec![],
            },
            summary: summarise(&rs, None, skipped),
            judges: crate::calibration::judges().unwrap(),
        }
    }

    #[test]
    fn svg_is_well_formed_and_escaped() {
        let svg = report().to_svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("hate &amp; &lt;slurs&gt;"));
        assert!(!svg.contains("<slurs>"));
        // Every element opened is closed (rects close themselves).
        for tag in ["text", "title"] {
            let open = svg.matches(&format!("<{tag}")).count();
            let close = svg.matches(&format!("</{tag}>")).count();
            assert_eq!(open, close, "{tag}");
        }
        // One bar per row: 3 harmful rows + 1 over-refusal + 2 jailbreak, plus the background.
        assert_eq!(svg.matches("<rect").count(), 1 + 3 + 1 + 2);
        assert_eq!(svg.matches("<path").count(), 6);
    }

    #[test]
    fn markdown_and_json_say_what_ran() {
        let r = report();
        let md = r.to_markdown();
        assert!(md.contains("PARTIAL RUN"));
        assert!(
            md.contains("| **all categories** | 50.0% [9.5, 90.5] (1/2) |"),
            "{md}"
        );
        assert!(md.contains("f.jsonl line 3: bad"));
        assert!(md.contains("feature: proofread"), "{md}");
        let v: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        assert_eq!(v["summary"]["harmful"]["refused"]["k"], 1);
        assert_eq!(v["summary"]["jailbreak"]["success"]["n"], 1);
        assert_eq!(v["meta"]["partial"], true);
        assert!(v["judges"]["model_replies"]["n"].as_u64().unwrap() >= 60);
    }

    #[test]
    fn compare_shows_deltas() {
        let a = report();
        let mut b = report();
        if let Some(h) = b.summary.harmful.as_mut() {
            h.overall.refused = Rate::new(2, 2);
        }
        let md = compare_markdown(&[("Q4_1".into(), &a), ("Q8_0".into(), &b)]);
        assert!(md.contains("| harmful: refusal | 50.0% [9.5, 90.5] (1/2) | 100.0% [34.2, 100.0] (2/2) | +50.0 |"), "{md}");
    }
}
