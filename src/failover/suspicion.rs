//! F25: suspicion before timeout, as pure decisions. The loop (`retry/probe.rs`) does the probing.
//!
//! A reply later than a threshold learned from this context's recent round trips of the same
//! op makes the loop ask another controller, while it keeps waiting for the reply, whether the
//! primary changed (`waitPrimary` excluding the current one). Only a *new* primary, named by a
//! controller that answered, abandons the late request; a slow but healthy primary just gets
//! its reply read as soon as it arrives (with forwarding on, F28, the same request also goes
//! through a controller that vouches for that primary: `retry/attempt.rs::hedge`). The reply
//! timeout stays the backstop (F8).

use std::time::Duration;

use crate::wire::Op;

/// The threshold is never below this: a large healthy reply (a 10,000-job `joblist` takes
/// tens of ms on loopback) and a loaded controller stay clear of it, while a primary that went
/// silent is suspected about as soon as its peers could have elected another (election
/// timeouts of 150–300 ms by default).
pub const SUSPICION_FLOOR: Duration = Duration::from_millis(300);

/// Weight of a new sample in the smoothed round trip, and in its deviation (RFC 6298's 1/8
/// and 1/4).
const ALPHA: f64 = 0.125;
const BETA: f64 = 0.25;

/// Deviations above the smoothed round trip before a reply is late (RFC 6298's K).
const K: f64 = 4.0;

/// The smoothed round trip of one op, and its mean deviation, in seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Smoothed {
    srtt: f64,
    rttvar: f64,
    samples: u32,
}

/// Recent round trips of one context, per op (a `hello` and a 10,000-job `joblist` differ by
/// orders of magnitude; each is judged against its own).
#[derive(Debug, Clone, Default)]
pub struct RoundTrips {
    /// By op name; a few dozen entries at most (one per op the context uses).
    per_op: Vec<(&'static str, Smoothed)>,
}

impl RoundTrips {
    fn entry(&self, op: &Op) -> Option<&Smoothed> {
        let name = op.name();
        self.per_op.iter().find(|(n, _)| *n == name).map(|(_, s)| s)
    }

    /// Records a reply that came back `rtt` after its request left.
    pub fn observe(&mut self, op: &Op, rtt: Duration) {
        let name = op.name();
        let r = rtt.as_secs_f64();
        match self.per_op.iter_mut().find(|(n, _)| *n == name) {
            Some((_, s)) => {
                s.rttvar = (1.0 - BETA) * s.rttvar + BETA * (s.srtt - r).abs();
                s.srtt = (1.0 - ALPHA) * s.srtt + ALPHA * r;
                s.samples = s.samples.saturating_add(1);
            }
            None => self.per_op.push((
                name,
                Smoothed {
                    srtt: r,
                    rttvar: r / 2.0,
                    samples: 1,
                },
            )),
        }
    }

    /// When a reply to `op` is late: the smoothed round trip plus `K` deviations, never below
    /// [`SUSPICION_FLOOR`].
    pub fn threshold(&self, op: &Op) -> Duration {
        let learned = self.entry(op).map_or(0.0, |s| s.srtt + K * s.rttvar);
        SUSPICION_FLOOR.max(Duration::from_secs_f64(learned.clamp(0.0, 86_400.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::JobFilter;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_floor_holds_until_an_op_is_known_to_be_slower() {
        let hello = Op::Nop;
        let list = Op::JobList(JobFilter::default());
        let mut rt = RoundTrips::default();
        assert_eq!(rt.threshold(&list), SUSPICION_FLOOR, "nothing learned yet");
        for _ in 0..50 {
            rt.observe(&hello, Duration::from_micros(80));
        }
        assert_eq!(
            rt.threshold(&hello),
            SUSPICION_FLOOR,
            "fast ops stay at the floor"
        );
        // A big listing that takes 400 ms every time raises its own threshold only.
        for _ in 0..20 {
            rt.observe(&list, ms(400));
        }
        let t = rt.threshold(&list);
        assert!(t >= ms(400) && t < ms(800), "{t:?}");
        assert_eq!(rt.threshold(&hello), SUSPICION_FLOOR);
    }

    #[test]
    fn a_jittery_op_gets_room_for_its_deviation() {
        let op = Op::ClusterConf;
        let mut rt = RoundTrips::default();
        for i in 0..40 {
            rt.observe(&op, ms(if i % 2 == 0 { 100 } else { 500 }));
        }
        let t = rt.threshold(&op);
        assert!(t > ms(800), "srtt ~300 ms, deviation ~200 ms: {t:?}");
    }
}
