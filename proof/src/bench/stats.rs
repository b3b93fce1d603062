//! Percentiles of a sample (nearest rank on the sorted sample).

use std::time::Duration;

/// The distribution of one measured quantity, in the unit the caller chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    /// `None` for an empty sample. NaNs are dropped.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(Summary {
            n,
            min: v[0],
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
        })
    }

    /// Durations in microseconds.
    pub fn of_us(d: &[Duration]) -> Option<Summary> {
        Summary::of(&d.iter().map(|d| d.as_secs_f64() * 1e6).collect::<Vec<_>>())
    }
}

/// Nearest-rank percentile of a sorted, non-empty sample.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p99, s.max),
            (100, 1.0, 50.0, 90.0, 99.0, 100.0)
        );
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(Summary::of(&[]).is_none());
    }
}
