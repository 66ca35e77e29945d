//! Rates with 95% Wilson score intervals.

use serde::{Deserialize, Serialize};

/// z for a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95% Wilson score interval for `k` successes in `n` trials; (0, 1) when `n` is 0.
pub fn wilson_95(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (nf, p) = (n as f64, k as f64 / n as f64);
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = Z95 * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// `k` of `n`, with its rate and 95% Wilson interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub k: usize,
    pub n: usize,
    pub rate: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Rate {
    pub fn new(k: usize, n: usize) -> Rate {
        let (lo, hi) = wilson_95(k, n);
        Rate {
            k,
            n,
            rate: if n == 0 { 0.0 } else { k as f64 / n as f64 },
            lo,
            hi,
        }
    }

    /// "12.5% [8.1, 18.2] (10/80)".
    pub fn display(&self) -> String {
        if self.n == 0 {
            return "n/a (0 items)".into();
        }
        format!(
            "{:.1}% [{:.1}, {:.1}] ({}/{})",
            100.0 * self.rate,
            100.0 * self.lo,
            100.0 * self.hi,
            self.k,
            self.n
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-5
    }

    #[test]
    fn wilson_matches_published_values() {
        // Values from Newcombe (1998), Table I, method 3 (Wilson score, no continuity correction).
        let (lo, hi) = wilson_95(81, 263);
        assert!(close(lo, 0.2553) && close(hi, 0.3662), "{lo} {hi}");
        let (lo, hi) = wilson_95(15, 148);
        assert!(close(lo, 0.0624) && close(hi, 0.1605), "{lo} {hi}");
        let (lo, hi) = wilson_95(0, 20);
        assert!(close(lo, 0.0) && close(hi, 0.1611), "{lo} {hi}");
        let (lo, hi) = wilson_95(1, 29);
        assert!(close(lo, 0.0061) && close(hi, 0.1718), "{lo} {hi}");
    }

    #[test]
    fn wilson_edges() {
        assert_eq!(wilson_95(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson_95(10, 10);
        assert!(close(hi, 1.0) && close(lo, 0.7225), "{lo} {hi}");
        let r = Rate::new(5, 10);
        assert_eq!(r.rate, 0.5);
        assert!(r.lo < 0.5 && r.hi > 0.5 && close(r.lo + r.hi, 1.0));
    }
}
