//! Seeded random numbers (the nemesis's schedules, the checkers' random histories):
//! SplitMix64 (Steele, Lea, Flood 2014), written out here so
//! that a seed names the same schedule in every build and every version of this crate — a
//! library generator (`rand`'s `StdRng`) may change its algorithm between releases, which
//! would silently break `--seed N` replays.

use std::time::Duration;

/// A seeded stream of numbers: the same seed, the same stream.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A stream of its own for `label` (a client thread, an episode's runtime choices), the
    /// same for the same seed and label, independent of how many numbers others drew.
    pub fn fork(seed: u64, label: u64) -> Rng {
        let mut r = Rng(seed ^ label.wrapping_mul(0xA24B_AED4_963E_E407));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is below 2^-40 for the small `n` used).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        self.next_u64() % n
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration in `lo..=hi` milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// One of `items`, each as likely as its weight (a weight of 0: never; the total > 0).
    pub fn weighted<T: Copy>(&mut self, items: &[(T, u64)]) -> T {
        let total: u64 = items.iter().map(|&(_, w)| w).sum();
        let mut pick = self.below(total);
        for &(item, w) in items {
            if pick < w {
                return item;
            }
            pick -= w;
        }
        unreachable!("pick < total")
    }

    /// `0..n` in a random order.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // The first outputs for seed 1234567 (the algorithm's published reference test).
        let mut r = Rng::new(1_234_567);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
    }

    #[test]
    fn same_seed_same_stream_and_forks_are_independent() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 2).next_u64());
        assert_eq!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 1).next_u64());
    }

    #[test]
    fn ranges_and_choices_stay_in_bounds() {
        let mut r = Rng::new(42);
        for _ in 0..1000 {
            let d = r.ms(200, 300);
            assert!(d >= Duration::from_millis(200) && d <= Duration::from_millis(300));
            assert!(r.below(3) < 3);
            assert_ne!(r.weighted(&[('a', 0), ('b', 1)]), 'a');
        }
        let mut p = r.permutation(5);
        p.sort_unstable();
        assert_eq!(p, [0, 1, 2, 3, 4]);
    }
}
