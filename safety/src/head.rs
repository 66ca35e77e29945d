//! The guard's classification head: standardized features -> an optional hidden ReLU layer ->
//! one "unsafe" logit and one logit per hazard category (multi-label, each its own sigmoid).
//! Trained here, from labelled text, with Adam on a weighted binary cross-entropy, as one or
//! more members (seeds) merged into one head that averages their logits; stored as a
//! small binary file: a magic line, a JSON header, then f32 little-endian arrays.

use std::io::Write;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::confidence::CategoryRules;
use crate::reader::FeatureSpec;
use crate::scores::Scores;
use crate::{Category, Result, SafetyError};

const MAGIC: &[u8; 8] = b"KGUARD1\n";
/// Marks the parts head stored after a head's weights.
const PARTS_MAGIC: &[u8; 8] = b"KPARTS1\n";
/// Marks the long-reply head, stored after the parts head.
const LONG_REPLIES_MAGIC: &[u8; 8] = b"KLREPL1\n";
/// Starts the reply head's bytes, after the parts and long-reply heads when there are any.
const REPLIES_MAGIC: &[u8; 8] = b"KREPLY1\n";
/// Output 0 is "unsafe"; outputs 1.. are the categories in `Category::ALL` order.
pub const N_OUT: usize = 1 + Category::ALL.len();

/// Everything about a head except its weights.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeadInfo {
    pub spec: FeatureSpec,
    /// The guard model this head reads: its name and embedding width, checked at load.
    pub model_name: String,
    pub n_embd: usize,
    /// Width of the hidden layer; 0 for a linear head.
    pub hidden: usize,
    /// Unsafe probability at or above which a message is flagged (chosen on the dev split).
    pub threshold: f32,
    /// The same for a streaming reply, when chosen apart (on replies to the dev prompts).
    #[serde(default)]
    pub output_threshold: Option<f32>,
    /// When the head is confident enough in a category for the user to be shown it, a rule per
    /// category (picked on the dev split). A category without one, and every category of a
    /// head without any (older heads' single `category_rule` is not read), gets the neutral
    /// refusal.
    #[serde(default)]
    pub category_rules: CategoryRules,
    /// How the head was made: data, counts, dev scores. Shown by `kostant guard info`.
    pub training: serde_json::Value,
}

impl HeadInfo {
    /// Whether this head reads the model called `model_name` of width `n_embd`: a head reads
    /// only the hidden states of the model it was trained on.
    pub fn reads(&self, model_name: &str, n_embd: usize) -> bool {
        self.model_name == model_name && self.n_embd == n_embd
    }
}

#[derive(Clone, Debug)]
pub struct Head {
    pub info: HeadInfo,
    mean: Vec<f32>,
    inv_std: Vec<f32>,
    /// Layers as (out, in) row-major weights and biases.
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    /// The head that judges a message longer than one window part by part
    /// ([`crate::parts`]), trained on this head's taps; stored in the same file. Without it a
    /// long message is read in windows by this head.
    pub parts: Option<Box<Head>>,
    /// The head that judges the reply to a message the parts head judged
    /// ([`crate::train_long_replies`]), on this head's taps, at its `output_threshold`;
    /// stored after the parts head. Without it such a reply is judged by this head.
    pub long_replies: Option<Box<Head>>,
    /// The head that judges the reply to a message read whole (one window), at its own
    /// `output_threshold` and with its own category rules; stored last. A head trained on
    /// the features' replies too ([`crate::train::TrainOptions::context_replies`]) can judge
    /// replies while this head still judges messages. Without it this head judges them.
    pub replies: Option<Box<Head>>,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl Head {
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Bytes of the head's arrays (standardization and layers), its parts head's included.
    pub fn weight_bytes(&self) -> usize {
        let layers: usize = self.layers.iter().map(|(w, b)| w.len() + b.len()).sum();
        let nested: usize = [&self.parts, &self.long_replies, &self.replies]
            .into_iter()
            .flatten()
            .map(|h| h.weight_bytes())
            .sum();
        4 * (self.mean.len() + self.inv_std.len() + layers) + nested
    }

    pub fn scores(&self, features: &[f32]) -> Result<Scores> {
        if features.len() != self.dim() {
            return Err(SafetyError::Head(format!(
                "{} features given, the head reads {}",
                features.len(),
                self.dim()
            )));
        }
        let out = self.logits(&self.standardize(features));
        let mut categories = [0.0; Category::ALL.len()];
        for (c, &z) in categories.iter_mut().zip(&out[1..]) {
            *c = sigmoid(z);
        }
        Ok(Scores {
            unsafe_prob: sigmoid(out[0]),
            categories,
        })
    }

    /// Features centred and scaled by the training set's statistics, as the layers read them.
    fn standardize(&self, features: &[f32]) -> Vec<f32> {
        standardize(features, &self.mean, &self.inv_std)
    }

    /// Raw outputs for standardized features.
    fn logits(&self, x: &[f32]) -> Vec<f32> {
        let mut a = x.to_vec();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            a = dense(w, b, &a);
            if i + 1 < self.layers.len() {
                a.iter_mut().for_each(|v| *v = v.max(0.0));
            }
        }
        a
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |source| SafetyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let buf = self.to_bytes()?;
        // Write then rename, so a crash never leaves half a head where the app will look.
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&buf).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The file's bytes: magic, header, weights, then the parts head's bytes if any, then the
    /// long-reply head's (only beside a parts head), then the reply head's.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let header =
            serde_json::to_vec(&self.info).map_err(|e| SafetyError::Head(e.to_string()))?;
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
        buf.extend_from_slice(&header);
        let arrays = [&self.mean, &self.inv_std]
            .into_iter()
            .chain(self.layers.iter().flat_map(|(w, b)| [w, b]));
        for a in arrays {
            for v in a {
                buf.extend_from_slice(&v.to_le_bytes());
            }
        }
        let nested = [
            (PARTS_MAGIC, &self.parts),
            (LONG_REPLIES_MAGIC, &self.long_replies),
            (REPLIES_MAGIC, &self.replies),
        ];
        if self.long_replies.is_some() && self.parts.is_none() {
            return Err(SafetyError::Head(
                "a long-reply head needs a parts head beside it".into(),
            ));
        }
        for (magic, head) in nested {
            let Some(head) = head else { continue };
            if head.parts.is_some() || head.long_replies.is_some() || head.replies.is_some() {
                return Err(SafetyError::Head(
                    "a nested head has no heads of its own".into(),
                ));
            }
            buf.extend_from_slice(magic);
            buf.extend_from_slice(&head.to_bytes()?);
        }
        Ok(buf)
    }

    pub fn load(path: &Path) -> Result<Head> {
        let bytes = std::fs::read(path).map_err(|source| SafetyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Head::from_bytes(&bytes).map_err(|msg| SafetyError::HeadFile {
            path: path.to_path_buf(),
            msg,
        })
    }

    /// Takes `from`'s parts and long-reply heads in place of this head's own: a main head
    /// retrained on new short texts keeps the long-message heads it was measured with, which
    /// judge only messages longer than one window and their replies. Refused when `from` reads
    /// another model or other layers, or has no parts head.
    pub fn carry_long_heads(&mut self, from: &Head) -> Result<(), String> {
        self.check_carry_from(from)?;
        self.parts = from.parts.clone();
        self.long_replies = from.long_replies.clone();
        Ok(())
    }

    /// Takes `from`'s long-reply head in place of this head's own, keeping this head's parts
    /// head: a parts head retrained (`train-parts` drops the long-reply head) keeps the reply
    /// judge it is measured with. Refused as [`Head::carry_long_heads`], and when this head has
    /// no parts head or `from` no long-reply head.
    pub fn carry_long_reply_head(&mut self, from: &Head) -> Result<(), String> {
        self.check_carry_from(from)?;
        if self.parts.is_none() {
            return Err(
                "the head to carry onto has no parts head for a long-reply head to follow".into(),
            );
        }
        let Some(replies) = &from.long_replies else {
            return Err("the head to carry from has no long-reply head".into());
        };
        self.long_replies = Some(replies.clone());
        Ok(())
    }

    /// Takes `from`'s main head (its weights, reply threshold and category rules, none of its
    /// own nested heads) as the judge of replies to messages read whole, in place of this
    /// head's own reply head: this head keeps judging messages. Refused when `from` reads
    /// another model or other layers, frames the conversation another way (system prompt,
    /// window), or has no reply threshold.
    pub fn take_reply_head(&mut self, from: &Head) -> Result<(), String> {
        self.check_reads_as(from, "the head to take replies from")?;
        // A reply's features are read after the message as this head's spec frames it.
        if from.info.spec != self.info.spec {
            return Err(
                "the head to take replies from was trained under another system prompt or window"
                    .into(),
            );
        }
        if from.info.output_threshold.is_none() {
            return Err("the head to take replies from has no reply threshold".into());
        }
        let mut replies = from.clone();
        replies.parts = None;
        replies.long_replies = None;
        replies.replies = None;
        self.replies = Some(Box::new(replies));
        Ok(())
    }

    fn check_carry_from(&self, from: &Head) -> Result<(), String> {
        if from.parts.is_none() {
            return Err("the head to carry from has no parts head".into());
        }
        // A file's nested heads read its main head's layers (checked on load).
        self.check_reads_as(from, "the head to carry from")
    }

    /// `other`'s weights read this head's features: same model, same layers. `name` says
    /// which head `other` is in the error.
    fn check_reads_as(&self, other: &Head, name: &str) -> Result<(), String> {
        if !self.info.reads(&other.info.model_name, other.info.n_embd) {
            return Err(format!(
                "{name} reads {}, this one {}",
                other.info.model_name, self.info.model_name
            ));
        }
        if other.info.spec.taps != self.info.spec.taps {
            return Err(format!("{name} reads other layers than this one"));
        }
        Ok(())
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Head, String> {
        let (mut head, mut rest) = Head::parse_one(bytes)?;
        for (magic, name) in [
            (PARTS_MAGIC, "the parts head"),
            (LONG_REPLIES_MAGIC, "the long-reply head"),
            (REPLIES_MAGIC, "the reply head"),
        ] {
            let Some(nested) = rest.strip_prefix(magic.as_slice()) else {
                continue;
            };
            let (h, left) = Head::parse_one(nested).map_err(|e| format!("{name}: {e}"))?;
            if h.info.spec.taps != head.info.spec.taps || h.info.n_embd != head.info.n_embd {
                return Err(format!("{name} reads other layers than the head"));
            }
            if !head.info.reads(&h.info.model_name, h.info.n_embd) {
                return Err(format!(
                    "{name} reads another model ({}) than the head ({})",
                    h.info.model_name, head.info.model_name
                ));
            }
            // A reply is read after the message as the head's spec frames it (as
            // `take_reply_head` demands): a file whose reply head framed it otherwise is not
            // one `kostant guard` wrote.
            if magic == REPLIES_MAGIC && h.info.spec != head.info.spec {
                return Err(format!(
                    "{name} was trained under another system prompt or window than the head"
                ));
            }
            if magic != PARTS_MAGIC && h.info.output_threshold.is_none() {
                return Err(format!("{name} has no reply threshold"));
            }
            if magic == LONG_REPLIES_MAGIC {
                if head.parts.is_none() {
                    return Err(format!("{name} comes without a parts head"));
                }
                head.long_replies = Some(Box::new(h));
            } else if magic == REPLIES_MAGIC {
                head.replies = Some(Box::new(h));
            } else {
                head.parts = Some(Box::new(h));
            }
            rest = left;
        }
        if !rest.is_empty() {
            return Err(format!("{} bytes left over after the weights", rest.len()));
        }
        Ok(head)
    }

    /// One head from the start of `bytes`, and the bytes after its weights.
    fn parse_one(bytes: &[u8]) -> Result<(Head, &[u8]), String> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or("not a guard head (bad magic)")?;
        let (len, rest) = rest.split_at_checked(4).ok_or("truncated header length")?;
        // Invariant: split_at_checked(4) gave exactly 4 bytes.
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        let (header, mut data) = rest.split_at_checked(len).ok_or("truncated header")?;
        let info: HeadInfo =
            serde_json::from_slice(header).map_err(|e| format!("bad header: {e}"))?;
        let d = info.spec.dim(info.n_embd);
        if d == 0 || d > 1 << 20 || info.hidden > 1 << 14 {
            return Err(format!(
                "implausible shape: {d} features, hidden {}",
                info.hidden
            ));
        }
        if !(0.0..=1.0).contains(&info.threshold) {
            return Err(format!("threshold {} is not a probability", info.threshold));
        }
        let mut take = |n: usize| -> Result<Vec<f32>, String> {
            let (a, r) = data.split_at_checked(n * 4).ok_or("truncated weights")?;
            data = r;
            let v: Vec<f32> = a
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if v.iter().any(|x| !x.is_finite()) {
                return Err("weights hold a non-finite number".into());
            }
            Ok(v)
        };
        let mean = take(d)?;
        let inv_std = take(d)?;
        let mut layers = Vec::new();
        let widths = layer_widths(d, info.hidden);
        for w in widths.windows(2) {
            let (i, o) = (w[0], w[1]);
            layers.push((take(i * o)?, take(o)?));
        }
        Ok((
            Head {
                info,
                mean,
                inv_std,
                layers,
                parts: None,
                long_replies: None,
                replies: None,
            },
            data,
        ))
    }
}

/// (x - mean) * inv_std, feature by feature.
fn standardize(features: &[f32], mean: &[f32], inv_std: &[f32]) -> Vec<f32> {
    features
        .iter()
        .zip(mean)
        .zip(inv_std)
        .map(|((&f, &m), &s)| (f - m) * s)
        .collect()
}

fn layer_widths(d: usize, hidden: usize) -> Vec<usize> {
    if hidden == 0 {
        vec![d, N_OUT]
    } else {
        vec![d, hidden, N_OUT]
    }
}

/// y = W x + b, W (out, in). Each row's dot product runs on the kernels' SIMD path: the first
/// layer reads megabytes of weights at every check while a reply streams. `dot_f32` panics on
/// unequal lengths; every row is a chunk of exactly `x.len()`.
fn dense(w: &[f32], b: &[f32], x: &[f32]) -> Vec<f32> {
    b.iter()
        .zip(w.chunks_exact(x.len()))
        .map(|(&b, row)| b + kostant_kernels::dot_f32(row, x))
        .collect()
}

/// One labelled example: its features and, if unsafe, its category (None = safe).
pub struct Example {
    pub features: Vec<f32>,
    pub category: Option<Category>,
}

#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub hidden: usize,
    pub epochs: usize,
    pub learning_rate: f32,
    pub weight_decay: f32,
    pub batch: usize,
    /// Weight of safe examples in the unsafe loss, relative to unsafe ones (raise it to make
    /// over-refusal costlier).
    pub safe_weight: f32,
    pub seed: u64,
    /// Heads trained from seeds `seed..seed + members` and averaged (their logits), stored as
    /// one head `members` times as wide. Averaging evens out what one seed happens to learn
    /// from a few thousand texts.
    pub members: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            hidden: 0,
            epochs: 60,
            learning_rate: 1e-3,
            weight_decay: 1e-3,
            batch: 32,
            safe_weight: 1.0,
            seed: 7,
            members: 1,
        }
    }
}

/// Trains a head on `examples`. `info.threshold` is left for the caller to choose on held-out
/// data.
pub fn train(examples: &[Example], info: HeadInfo, cfg: &TrainConfig) -> Result<Head> {
    let d = info.spec.dim(info.n_embd);
    if examples.is_empty() {
        return Err(SafetyError::Head("no training examples".into()));
    }
    if let Some(bad) = examples.iter().find(|e| e.features.len() != d) {
        return Err(SafetyError::Head(format!(
            "an example has {} features, expected {d}",
            bad.features.len()
        )));
    }
    // Standardize each feature over the training set.
    let n = examples.len() as f64;
    let mut mean = vec![0.0f64; d];
    let mut sq = vec![0.0f64; d];
    for e in examples {
        for ((m, s), &f) in mean.iter_mut().zip(&mut sq).zip(&e.features) {
            *m += f as f64;
            *s += (f as f64) * (f as f64);
        }
    }
    let mean: Vec<f32> = mean.iter().map(|m| (m / n) as f32).collect();
    let inv_std: Vec<f32> = sq
        .iter()
        .zip(&mean)
        .map(|(s, &m)| {
            let var = (s / n - (m as f64) * (m as f64)).max(0.0);
            (1.0 / (var.sqrt() + 1e-6)) as f32
        })
        .collect();
    let xs: Vec<Vec<f32>> = examples
        .iter()
        .map(|e| standardize(&e.features, &mean, &inv_std))
        .collect();
    let targets: Vec<[f32; N_OUT]> = examples
        .iter()
        .map(|e| {
            let mut t = [0.0; N_OUT];
            if let Some(c) = e.category {
                t[0] = 1.0;
                t[1 + c.index()] = 1.0;
            }
            t
        })
        .collect();
    let n_unsafe = examples
        .iter()
        .filter(|e| e.category.is_some())
        .count()
        .max(1);
    let n_safe = (examples.len() - n_unsafe).max(1);
    // Balance the classes, then tilt by safe_weight.
    let w_unsafe = examples.len() as f32 / (2.0 * n_unsafe as f32);
    let w_safe = cfg.safe_weight * examples.len() as f32 / (2.0 * n_safe as f32);

    let members = cfg.members.max(1);
    // Members train side by side (each on its own thread), then become one wider head.
    let trained: Vec<Layers> = std::thread::scope(|scope| {
        let jobs: Vec<_> = (0..members as u64)
            .map(|k| {
                let (xs, targets) = (&xs, &targets);
                scope.spawn(move || {
                    fit_member(
                        xs,
                        targets,
                        (w_safe, w_unsafe),
                        d,
                        cfg,
                        cfg.seed.wrapping_add(k),
                    )
                })
            })
            .collect();
        jobs.into_iter()
            // Invariant: fit_member does not panic (pure arithmetic on checked shapes).
            .map(|j| j.join().expect("a head member's thread panicked"))
            .collect()
    });
    let params = merge(trained);
    Ok(Head {
        info: HeadInfo {
            hidden: cfg.hidden * members,
            ..info
        },
        mean,
        inv_std,
        layers: params,
        parts: None,
        long_replies: None,
        replies: None,
    })
}

/// One head's layers as (out, in) row-major weights and biases.
type Layers = Vec<(Vec<f32>, Vec<f32>)>;

/// Fits one head on standardized features from a seed of its own.
fn fit_member(
    xs: &[Vec<f32>],
    targets: &[[f32; N_OUT]],
    (w_safe, w_unsafe): (f32, f32),
    d: usize,
    cfg: &TrainConfig,
    seed: u64,
) -> Layers {
    let mut rng = SmallRng::seed_from_u64(seed);
    let widths = layer_widths(d, cfg.hidden);
    let mut params: Vec<(Vec<f32>, Vec<f32>)> = widths
        .windows(2)
        .map(|w| {
            let (i, o) = (w[0], w[1]);
            let scale = (2.0 / i as f32).sqrt() * 0.5;
            let wts = (0..i * o).map(|_| rng.gen_range(-scale..scale)).collect();
            (wts, vec![0.0; o])
        })
        .collect();
    let mut adam = Adam::new(&params);
    let mut order: Vec<usize> = (0..xs.len()).collect();
    for _epoch in 0..cfg.epochs {
        order.shuffle(&mut rng);
        for batch in order.chunks(cfg.batch.max(1)) {
            let mut grads: Vec<(Vec<f32>, Vec<f32>)> = params
                .iter()
                .map(|(w, b)| (vec![0.0; w.len()], vec![0.0; b.len()]))
                .collect();
            for &i in batch {
                let weight = if targets[i][0] > 0.0 {
                    w_unsafe
                } else {
                    w_safe
                };
                backprop(&params, &xs[i], &targets[i], weight, &mut grads);
            }
            let scale = 1.0 / batch.len() as f32;
            adam.step(
                &mut params,
                &grads,
                scale,
                cfg.learning_rate,
                cfg.weight_decay,
            );
        }
    }
    params
}

/// One head whose logits are the mean of the members' logits. A linear member's weights are
/// simply averaged; hidden members stack their hidden units side by side, and the output layer
/// reads them all at 1/members weight.
fn merge(mut members: Vec<Layers>) -> Layers {
    let k = members.len();
    if k == 1 {
        // Invariant: k == 1, so pop returns the one member.
        return members.pop().unwrap();
    }
    let scale = 1.0 / k as f32;
    let last = members[0].len() - 1;
    let mut out: Layers = Vec::with_capacity(last + 1);
    if last == 1 {
        // Hidden layer: concatenate units (rows of W, entries of b).
        let w = members
            .iter()
            .flat_map(|m| m[0].0.iter().copied())
            .collect();
        let b = members
            .iter()
            .flat_map(|m| m[0].1.iter().copied())
            .collect();
        out.push((w, b));
    }
    // Output layer: each output row reads every member's hidden units (or, when linear, the
    // mean of their weights on each input).
    let n_out = members[0][last].1.len();
    let fan_in = members[0][last].0.len() / n_out;
    let mut w = Vec::with_capacity(n_out * fan_in * if last == 1 { k } else { 1 });
    for o in 0..n_out {
        let rows = o * fan_in..(o + 1) * fan_in;
        if last == 1 {
            for m in &members {
                w.extend(m[last].0[rows.clone()].iter().map(|v| v * scale));
            }
        } else {
            for i in rows {
                w.push(members.iter().map(|m| m[0].0[i]).sum::<f32>() * scale);
            }
        }
    }
    let b = (0..n_out)
        .map(|o| members.iter().map(|m| m[last].1[o]).sum::<f32>() * scale)
        .collect();
    out.push((w, b));
    out
}

/// Adds the gradient of one example's weighted loss to `grads`. Loss: binary cross-entropy on
/// every output; the category outputs of a safe example all aim at 0.
fn backprop(
    params: &[(Vec<f32>, Vec<f32>)],
    x: &[f32],
    target: &[f32; N_OUT],
    weight: f32,
    grads: &mut [(Vec<f32>, Vec<f32>)],
) {
    // Forward, keeping each layer's input.
    let mut inputs = vec![x.to_vec()];
    for (i, (w, b)) in params.iter().enumerate() {
        let mut a = dense(w, b, &inputs[i]);
        if i + 1 < params.len() {
            a.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        inputs.push(a);
    }
    // d loss / d logits for sigmoid + BCE is p - t; the unsafe output carries the class weight.
    let out = &inputs[params.len()];
    let mut delta: Vec<f32> = out
        .iter()
        .zip(target)
        .enumerate()
        .map(|(k, (&z, &t))| {
            let w = if k == 0 { weight } else { 0.5 };
            w * (sigmoid(z) - t)
        })
        .collect();
    for l in (0..params.len()).rev() {
        let (w, _) = &params[l];
        let input = &inputs[l];
        let (gw, gb) = &mut grads[l];
        for (o, &dz) in delta.iter().enumerate() {
            gb[o] += dz;
            for (g, &a) in gw[o * input.len()..(o + 1) * input.len()]
                .iter_mut()
                .zip(input)
            {
                *g += dz * a;
            }
        }
        if l > 0 {
            let mut prev = vec![0.0f32; input.len()];
            for (o, &dz) in delta.iter().enumerate() {
                for (p, &wv) in prev
                    .iter_mut()
                    .zip(&w[o * input.len()..(o + 1) * input.len()])
                {
                    *p += dz * wv;
                }
            }
            // Through the ReLU: no gradient where the unit was off.
            for (p, &a) in prev.iter_mut().zip(input) {
                if a <= 0.0 {
                    *p = 0.0;
                }
            }
            delta = prev;
        }
    }
}

/// Adam (Kingma & Ba 2015) with decoupled weight decay on the weights (AdamW).
struct Adam {
    m: Vec<(Vec<f32>, Vec<f32>)>,
    v: Vec<(Vec<f32>, Vec<f32>)>,
    t: i32,
}

impl Adam {
    fn new(params: &[(Vec<f32>, Vec<f32>)]) -> Adam {
        let zeros = || {
            params
                .iter()
                .map(|(w, b)| (vec![0.0; w.len()], vec![0.0; b.len()]))
                .collect()
        };
        Adam {
            m: zeros(),
            v: zeros(),
            t: 0,
        }
    }

    fn step(
        &mut self,
        params: &mut [(Vec<f32>, Vec<f32>)],
        grads: &[(Vec<f32>, Vec<f32>)],
        scale: f32,
        lr: f32,
        decay: f32,
    ) {
        const B1: f32 = 0.9;
        const B2: f32 = 0.999;
        self.t += 1;
        let c1 = 1.0 - B1.powi(self.t);
        let c2 = 1.0 - B2.powi(self.t);
        for (l, (w, b)) in params.iter_mut().enumerate() {
            for (is_w, (p, g)) in [(true, (w, &grads[l].0)), (false, (b, &grads[l].1))] {
                let (m, v) = if is_w {
                    (&mut self.m[l].0, &mut self.v[l].0)
                } else {
                    (&mut self.m[l].1, &mut self.v[l].1)
                };
                for i in 0..p.len() {
                    let g = g[i] * scale;
                    m[i] = B1 * m[i] + (1.0 - B1) * g;
                    v[i] = B2 * v[i] + (1.0 - B2) * g * g;
                    let update = (m[i] / c1) / ((v[i] / c2).sqrt() + 1e-8);
                    if is_w {
                        p[i] -= lr * decay * p[i];
                    }
                    p[i] -= lr * update;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FeatureSpec {
        FeatureSpec {
            taps: vec![1],
            system_prompt: String::new(),
            window: 64,
        }
    }

    fn info(n_embd: usize) -> HeadInfo {
        HeadInfo {
            spec: spec(),
            model_name: "tiny".into(),
            n_embd,
            hidden: 0,
            threshold: 0.5,
            output_threshold: None,
            category_rules: CategoryRules::default(),
            training: serde_json::Value::Null,
        }
    }

    /// Two noisy clusters: unsafe texts (category by the sign of feature 1) sit along +f0.
    fn data(n: usize, seed: u64) -> Vec<Example> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let unsafe_ = i % 2 == 0;
                let mut f: Vec<f32> = (0..8).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let category = if unsafe_ {
                    f[0] += 2.0;
                    if f[1] > 0.0 {
                        Some(Category::Hate)
                    } else {
                        Some(Category::Privacy)
                    }
                } else {
                    None
                };
                Example {
                    features: f,
                    category,
                }
            })
            .collect()
    }

    #[test]
    fn learns_a_separable_problem_linear_and_hidden() {
        for hidden in [0, 8] {
            let cfg = TrainConfig {
                hidden,
                epochs: 30,
                learning_rate: 1e-2,
                ..Default::default()
            };
            let head = train(&data(400, 1), info(4), &cfg).unwrap();
            let test = data(200, 2);
            let mut right = 0;
            let mut cat_right = 0;
            for e in &test {
                let s = head.scores(&e.features).unwrap();
                if (s.unsafe_prob >= 0.5) == e.category.is_some() {
                    right += 1;
                }
                if let Some(c) = e.category {
                    if s.top_category() == c {
                        cat_right += 1;
                    }
                }
            }
            assert!(right >= 190, "hidden {hidden}: {right}/200 right");
            assert!(
                cat_right >= 90,
                "hidden {hidden}: {cat_right}/100 categories right"
            );
        }
    }

    #[test]
    fn merged_members_score_the_mean_of_their_logits() {
        let examples = data(60, 5);
        for hidden in [0, 4] {
            let cfg = TrainConfig {
                hidden,
                epochs: 2,
                ..Default::default()
            };
            let one = |seed| {
                train(
                    &examples,
                    info(4),
                    &TrainConfig {
                        seed,
                        ..cfg.clone()
                    },
                )
                .unwrap()
            };
            let (a, b) = (one(7), one(8));
            let both = train(
                &examples,
                info(4),
                &TrainConfig {
                    members: 2,
                    ..cfg.clone()
                },
            )
            .unwrap();
            assert_eq!(both.info.hidden, 2 * hidden);
            for e in data(10, 6) {
                let x = a.standardize(&e.features);
                let (la, lb, l2) = (a.logits(&x), b.logits(&x), both.logits(&x));
                for k in 0..N_OUT {
                    let mean = (la[k] + lb[k]) / 2.0;
                    assert!(
                        (l2[k] - mean).abs() <= 1e-5 * (1.0 + mean.abs()),
                        "hidden {hidden}, output {k}: {} vs {mean}",
                        l2[k]
                    );
                }
            }
        }
    }

    #[test]
    fn a_parts_head_travels_in_the_same_file_and_is_checked() {
        let cfg = TrainConfig {
            epochs: 1,
            ..Default::default()
        };
        let mut head = train(&data(20, 3), info(4), &cfg).unwrap();
        let alone = head.to_bytes().unwrap();
        let mut parts = train(&data(20, 4), info(4), &cfg).unwrap();
        parts.info.threshold = 0.25;
        head.parts = Some(Box::new(parts.clone()));
        let bytes = head.to_bytes().unwrap();
        let back = Head::from_bytes(&bytes).unwrap();
        let got = back.parts.as_deref().expect("the parts head is read back");
        assert_eq!(got.info.threshold, 0.25);
        let f = &data(1, 9)[0].features;
        assert_eq!(got.scores(f).unwrap(), parts.scores(f).unwrap());
        assert_eq!(back.scores(f).unwrap(), head.scores(f).unwrap());
        // Without one, the file is what it always was.
        assert!(Head::from_bytes(&alone).unwrap().parts.is_none());

        // Cut short, followed by junk, or reading other layers: refused with a reason.
        let e = Head::from_bytes(&bytes[..bytes.len() - 3]).err().unwrap();
        assert!(e.contains("parts head"), "{e}");
        let mut junk = alone.clone();
        junk.extend_from_slice(b"junk");
        let e = Head::from_bytes(&junk).err().unwrap();
        assert!(e.contains("left over"), "{e}");
        parts.info.spec.taps = vec![2];
        head.parts = Some(Box::new(parts));
        let e = Head::from_bytes(&head.to_bytes().unwrap()).err().unwrap();
        assert!(e.contains("other layers"), "{e}");
    }

    #[test]
    fn a_long_reply_head_travels_after_the_parts_head_and_is_checked() {
        let cfg = TrainConfig {
            epochs: 1,
            ..Default::default()
        };
        let mut head = train(&data(20, 3), info(4), &cfg).unwrap();
        let parts = train(&data(20, 4), info(4), &cfg).unwrap();
        let mut replies = train(&data(20, 5), info(4), &cfg).unwrap();
        replies.info.output_threshold = Some(0.75);
        // Not without a parts head.
        head.long_replies = Some(Box::new(replies.clone()));
        assert!(head.to_bytes().is_err());
        head.parts = Some(Box::new(parts));
        let bytes = head.to_bytes().unwrap();
        let back = Head::from_bytes(&bytes).unwrap();
        let got = back.long_replies.as_deref().expect("read back");
        assert_eq!(got.info.output_threshold, Some(0.75));
        let f = &data(1, 9)[0].features;
        assert_eq!(got.scores(f).unwrap(), replies.scores(f).unwrap());
        assert!(back.parts.is_some());
        assert_eq!(back.weight_bytes(), head.weight_bytes());

        // Cut short, or without its threshold: refused with a reason.
        let e = Head::from_bytes(&bytes[..bytes.len() - 3]).err().unwrap();
        assert!(e.contains("long-reply head"), "{e}");
        replies.info.output_threshold = None;
        head.long_replies = Some(Box::new(replies));
        let e = Head::from_bytes(&head.to_bytes().unwrap()).err().unwrap();
        assert!(e.contains("no reply threshold"), "{e}");
    }

    #[test]
    fn long_heads_carry_over_to_a_retrained_head_of_the_same_layers_only() {
        let cfg = TrainConfig {
            epochs: 1,
            ..Default::default()
        };
        let mut old = train(&data(20, 3), info(4), &cfg).unwrap();
        let mut fresh = train(&data(20, 7), info(4), &cfg).unwrap();
        // Nothing to carry yet.
        let e = fresh.carry_long_heads(&old).err().unwrap();
        assert!(e.contains("no parts head"), "{e}");
        let parts = train(&data(20, 4), info(4), &cfg).unwrap();
        let mut replies = train(&data(20, 5), info(4), &cfg).unwrap();
        replies.info.output_threshold = Some(0.75);
        old.parts = Some(Box::new(parts.clone()));
        old.long_replies = Some(Box::new(replies.clone()));
        fresh.carry_long_heads(&old).unwrap();
        let back = Head::from_bytes(&fresh.to_bytes().unwrap()).unwrap();
        let f = &data(1, 9)[0].features;
        assert_eq!(back.scores(f).unwrap(), fresh.scores(f).unwrap());
        let got = back.parts.as_deref().unwrap();
        assert_eq!(got.scores(f).unwrap(), parts.scores(f).unwrap());
        let got = back.long_replies.as_deref().unwrap();
        assert_eq!(got.scores(f).unwrap(), replies.scores(f).unwrap());

        // Not onto a head of other layers or another model.
        let mut other = train(&data(20, 8), info(4), &cfg).unwrap();
        other.info.spec.taps = vec![2];
        let e = other.carry_long_heads(&old).err().unwrap();
        assert!(e.contains("other layers"), "{e}");
        let mut other = train(&data(20, 8), info(4), &cfg).unwrap();
        other.info.model_name = "another model".into();
        let e = other.carry_long_heads(&old).err().unwrap();
        assert!(e.contains("reads"), "{e}");

        // The long-reply head alone, behind a parts head of this head's own.
        let mut own = train(&data(20, 10), info(4), &cfg).unwrap();
        let e = own.carry_long_reply_head(&old).err().unwrap();
        assert!(e.contains("no parts head"), "{e}");
        let own_parts = train(&data(20, 11), info(4), &cfg).unwrap();
        own.parts = Some(Box::new(own_parts.clone()));
        own.carry_long_reply_head(&old).unwrap();
        let back = Head::from_bytes(&own.to_bytes().unwrap()).unwrap();
        let got = back.parts.as_deref().unwrap();
        assert_eq!(got.scores(f).unwrap(), own_parts.scores(f).unwrap());
        let got = back.long_replies.as_deref().unwrap();
        assert_eq!(got.scores(f).unwrap(), replies.scores(f).unwrap());
    }

    #[test]
    fn a_reply_head_is_taken_whole_from_another_head_and_travels_last() {
        let cfg = TrainConfig {
            epochs: 1,
            ..Default::default()
        };
        let mut head = train(&data(20, 3), info(4), &cfg).unwrap();
        let mut from = train(&data(20, 12), info(4), &cfg).unwrap();
        // No reply threshold: nothing to judge replies at.
        let e = head.take_reply_head(&from).err().unwrap();
        assert!(e.contains("no reply threshold"), "{e}");
        from.info.output_threshold = Some(0.9);
        // Its own nested heads stay behind.
        from.parts = Some(Box::new(train(&data(20, 4), info(4), &cfg).unwrap()));
        head.parts = Some(Box::new(train(&data(20, 5), info(4), &cfg).unwrap()));
        head.take_reply_head(&from).unwrap();
        let bytes = head.to_bytes().unwrap();
        let back = Head::from_bytes(&bytes).unwrap();
        let got = back.replies.as_deref().expect("read back");
        assert!(got.parts.is_none());
        assert_eq!(got.info.output_threshold, Some(0.9));
        let f = &data(1, 9)[0].features;
        assert_eq!(got.scores(f).unwrap(), from.scores(f).unwrap());
        // The loaded head still judges messages with its own weights and parts head.
        assert_eq!(back.scores(f).unwrap(), head.scores(f).unwrap());
        let parts = back.parts.as_deref().unwrap();
        assert_eq!(
            parts.scores(f).unwrap(),
            head.parts.as_deref().unwrap().scores(f).unwrap()
        );
        assert_eq!(back.weight_bytes(), head.weight_bytes());
        // The reply head's weights count in what the guard holds.
        let mut without = back.clone();
        without.replies = None;
        assert!(back.weight_bytes() > without.weight_bytes());

        // Cut short: refused, naming the reply head.
        let e = Head::from_bytes(&bytes[..bytes.len() - 3]).err().unwrap();
        assert!(e.contains("reply head"), "{e}");
        // A file whose reply head reads another model, or framed what it read another way
        // (not one `take_reply_head` would write), is refused on load too.
        for change in [0, 1, 2] {
            let mut odd = head.clone();
            let replies = odd.replies.as_deref_mut().unwrap();
            match change {
                0 => replies.info.model_name = "another model".into(),
                1 => replies.info.spec.system_prompt.push_str(" Be brief."),
                _ => replies.info.spec.window /= 2,
            }
            let e = Head::from_bytes(&odd.to_bytes().unwrap()).err().unwrap();
            let want = ["reads another model", "system prompt or window"][change.min(1)];
            assert!(e.contains("the reply head") && e.contains(want), "{e}");
        }
        // Not from a head of other layers or another model.
        let mut other = from.clone();
        other.info.spec.taps = vec![2];
        let e = head.take_reply_head(&other).err().unwrap();
        assert!(e.contains("other layers"), "{e}");
        let mut other = from.clone();
        other.info.model_name = "another model".into();
        let e = head.take_reply_head(&other).err().unwrap();
        assert!(e.contains("reads"), "{e}");
        // Nor from one that framed what it read another way.
        for change in [0, 1] {
            let mut other = from.clone();
            match change {
                0 => other.info.spec.system_prompt.push_str(" Be brief."),
                _ => other.info.spec.window /= 2,
            }
            let e = head.take_reply_head(&other).err().unwrap();
            assert!(e.contains("system prompt or window"), "{e}");
        }
    }

    #[test]
    fn a_header_from_before_category_rules_loads_without_any() {
        let mut json = serde_json::to_value(info(4)).unwrap();
        let obj = json.as_object_mut().unwrap();
        obj.remove("category_rules");
        // The single rule older heads carried: not read, so such a head names nothing.
        obj.insert(
            "category_rule".into(),
            serde_json::json!({"min_prob": 0.1, "min_margin": 0.0}),
        );
        let back: HeadInfo = serde_json::from_value(json).unwrap();
        assert!(back.category_rules.is_empty());
    }

    #[test]
    fn save_load_round_trip_and_damage_is_refused() {
        let cfg = TrainConfig {
            hidden: 4,
            epochs: 2,
            ..Default::default()
        };
        let head = train(&data(40, 3), info(4), &cfg).unwrap();
        let dir = std::env::temp_dir().join(format!("kostant-head-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("head.bin");
        head.save(&path).unwrap();
        let back = Head::load(&path).unwrap();
        let x = &data(1, 4)[0].features;
        assert_eq!(head.scores(x).unwrap(), back.scores(x).unwrap());
        assert_eq!(back.info.hidden, 4);

        let bytes = std::fs::read(&path).unwrap();
        for cut in [0, 5, 12, bytes.len() / 2, bytes.len() - 1] {
            assert!(Head::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Head::from_bytes(&extra).is_err());
        let mut nan = bytes.clone();
        let n = nan.len();
        nan[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(Head::from_bytes(&nan).unwrap_err().contains("non-finite"));
        assert!(Head::load(&dir.join("missing.bin")).is_err());
        // Wrong feature count is an error, not a panic.
        assert!(head.scores(&[0.0; 3]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
