//! F5: which controller to try next — the redirect hint first (once), else the next master in
//! list order, wrapping. F3: the cursor stays on the master that served until it fails.
//!
//! Pure except for name resolution, which is injected so tests need no DNS.

use std::fmt;
use std::net::SocketAddr;

/// A controller's client address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Where an attempt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A configured master, by index in the list.
    Master(usize),
    /// A host named by a redirect hint that is not in the list (only with [`HintPolicy::AnyHost`]).
    Unlisted(Endpoint),
}

/// Which redirect hints are followed (F5, an option of F15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HintPolicy {
    /// Only hints naming a configured master (compared by resolved address). The default.
    #[default]
    ConfiguredOnly,
    /// Any host the controller names.
    AnyHost,
}

/// What became of an offered hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HintVerdict {
    /// It will be the next target.
    Accepted(Target),
    /// Ignored; plain rotation stays in force (the loop logs why).
    Refused(HintRefusal),
}

/// Why a hint was not followed (F5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintRefusal {
    /// It names no configured master (and the policy is [`HintPolicy::ConfiguredOnly`]).
    NotConfigured,
    /// It names the master the context is on, which just answered "not the primary".
    NamesCurrent,
    /// It names a master that already failed since the last sleep: following it again would
    /// bounce between standbys (or back to a dead primary) and starve the untried masters.
    AlreadyTried,
}

/// Resolves a host and port to addresses (the system resolver, or a table in tests).
pub type Resolve<'a> = &'a dyn Fn(&str, u16) -> Vec<SocketAddr>;

/// The endpoint of `list` that `host:port` names: same name (any case) and port, else the
/// first that shares a resolved address with it (none when `host` does not resolve).
fn position_of(list: &[Endpoint], host: &str, port: u16, resolve: Resolve<'_>) -> Option<usize> {
    if let Some(i) = list
        .iter()
        .position(|m| m.port == port && m.host.eq_ignore_ascii_case(host))
    {
        return Some(i);
    }
    let wanted = resolve(host, port);
    if wanted.is_empty() {
        return None;
    }
    list.iter()
        .position(|m| resolve(&m.host, m.port).iter().any(|a| wanted.contains(a)))
}

/// Most masters a context learns from its primaries on top of the configured ones (F29).
///
/// Why a bound at all: a learned master joins every rotation, every connect race and every
/// "each master gets its turn" cycle (F5), so a primary that reported a runaway member list
/// (a bug, or a compromised controller) would stretch every failover; and indices of masters
/// are kept in 64-bit masks by the budget. Why 8: a Raft cluster is 3, 5 or at most 7
/// controllers; replacing every configured controller one by one needs as many learned ones as
/// the cluster has members, so 8 covers a whole 7-node cluster replaced under a daemon that was
/// given a list of other names. With the configured maximum (`N_MAX_MASTERS`, 8) the total
/// stays at 16, far inside the 64 the masks hold. Learned masters are never forgotten: the
/// list only grows, for the life of the context.
pub const MAX_LEARNED_MASTERS: usize = 8;

/// What became of a member the primary reported (F29).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    /// Already in the list (configured or learned before): nothing changes.
    Known(usize),
    /// Appended at this index.
    Added(usize),
    /// Not added: [`MAX_LEARNED_MASTERS`] are learned already.
    Full,
    /// Not added now: its name did not resolve (a failed or interrupted lookup), so it could
    /// not be told apart from a master already in the list; the next report is taken again.
    Unresolved,
}

/// The master list with its cursor and the pending hint.
#[derive(Debug, Clone)]
pub struct Rotator {
    /// The configured masters first, in their order, then the learned ones (F29).
    masters: Vec<Endpoint>,
    /// How many of `masters` were configured.
    configured: usize,
    cursor: usize,
    current: Target,
    hint: Option<Target>,
    /// F29 for redirects: the members the last master asked for them reported (any role, on
    /// the connection the context talks through): a redirect hint naming one of them is
    /// followed although it names no master in rotation. Replaced, never grown.
    vouched: Vec<Endpoint>,
}

/// Most members kept as vouched for (F29): a Raft cluster has at most 7 members; the bound
/// only keeps a hostile or buggy answer from costing more than a few resolutions per hint.
pub const MAX_VOUCHED: usize = 16;

impl Rotator {
    /// A rotator positioned on the first master. `masters` must not be empty.
    pub fn new(masters: Vec<Endpoint>) -> Rotator {
        assert!(!masters.is_empty(), "a Rotator needs at least one master");
        Rotator {
            configured: masters.len(),
            masters,
            cursor: 0,
            current: Target::Master(0),
            hint: None,
            vouched: Vec::new(),
        }
    }

    /// F29 for redirects: records the members a master reported (its membership as it holds
    /// it, a standby's too), at most [`MAX_VOUCHED`]. A hint naming one of them is followed as
    /// an unlisted target (once); it joins the rotation only when it answers as the primary
    /// and names its members itself (`retry/members.rs`). The caller vouches that `members`
    /// came from a master on the connection the context talks through.
    pub fn vouch(&mut self, members: Vec<Endpoint>) {
        self.vouched = members;
        self.vouched.truncate(MAX_VOUCHED);
    }

    /// Whether a member list reported by a master names `host:port` (same name and port, or a
    /// shared resolved address).
    fn is_vouched(&self, host: &str, port: u16, resolve: Resolve<'_>) -> bool {
        position_of(&self.vouched, host, port, resolve).is_some()
    }

    /// Every master in rotation: the configured ones, then the learned ones (F29).
    pub fn masters(&self) -> &[Endpoint] {
        &self.masters
    }

    /// How many of [`Rotator::masters`] were configured (the rest were learned).
    #[cfg(test)]
    pub fn configured(&self) -> usize {
        self.configured
    }

    /// F29: adds a member reported by the primary unless it is already in the list (same name
    /// and port, or a shared resolved address) or [`MAX_LEARNED_MASTERS`] are learned already.
    /// Appends only: indices, the cursor and a pending hint stay valid, and no configured
    /// master is ever dropped. The caller vouches that `e` comes from the primary.
    pub fn learn(&mut self, e: &Endpoint, resolve: Resolve<'_>) -> Learned {
        if let Some(i) = self.find_master(&e.host, e.port, resolve) {
            return Learned::Known(i);
        }
        if self.masters.len() - self.configured >= MAX_LEARNED_MASTERS {
            return Learned::Full;
        }
        // An alias of a master already in the list is only recognised through its addresses:
        // a name that does not resolve now is not added (for good) on a guess.
        if resolve(&e.host, e.port).is_empty() {
            return Learned::Unresolved;
        }
        self.masters.push(e.clone());
        Learned::Added(self.masters.len() - 1)
    }

    /// The target in use (F3: sticky until it fails).
    pub fn current(&self) -> &Target {
        &self.current
    }

    /// The current target's configured index, if it is a configured master.
    pub fn current_master(&self) -> Option<usize> {
        match self.current {
            Target::Master(i) => Some(i),
            Target::Unlisted(_) => None,
        }
    }

    /// Puts the cursor on master `i` (F2: `start` found it reachable).
    pub fn set_current(&mut self, i: usize) {
        let i = i % self.masters.len();
        self.cursor = i;
        self.current = Target::Master(i);
    }

    /// The address of a target.
    pub fn endpoint<'a>(&'a self, t: &'a Target) -> &'a Endpoint {
        match t {
            Target::Master(i) => &self.masters[*i],
            Target::Unlisted(e) => e,
        }
    }

    /// The configured master a host names: same name and port, else a shared resolved address.
    pub fn find_master(&self, host: &str, port: u16, resolve: Resolve<'_>) -> Option<usize> {
        position_of(&self.masters, host, port, resolve)
    }

    /// Offers the redirect hint of the last reply (F5). `tried` holds one bit per configured
    /// master that failed since the last sleep (the current one included). An accepted hint is
    /// the next target, used once; a refused one leaves plain rotation in force. A host in no
    /// master's place is followed with [`HintPolicy::AnyHost`], or when a member list a master
    /// reported names it ([`Rotator::vouch`], F29).
    pub fn offer_hint(
        &mut self,
        host: &str,
        port: u16,
        policy: HintPolicy,
        tried: u64,
        resolve: Resolve<'_>,
    ) -> HintVerdict {
        let target = match (self.find_master(host, port, resolve), policy) {
            (Some(i), _) if self.current == Target::Master(i) => {
                return HintVerdict::Refused(HintRefusal::NamesCurrent)
            }
            (Some(i), _) if i < 64 && tried & (1 << i) != 0 => {
                return HintVerdict::Refused(HintRefusal::AlreadyTried)
            }
            (Some(i), _) => Target::Master(i),
            (None, p) if p == HintPolicy::AnyHost || self.is_vouched(host, port, resolve) => {
                // F29: a host a master's member list names is followed like one of any host.
                let t = Target::Unlisted(Endpoint::new(host, port));
                if self.current == t {
                    return HintVerdict::Refused(HintRefusal::NamesCurrent);
                }
                t
            }
            (None, _) => return HintVerdict::Refused(HintRefusal::NotConfigured),
        };
        self.hint = Some(target.clone());
        HintVerdict::Accepted(target)
    }

    /// Makes configured master `i` the next target (a primary that `waitPrimary` named).
    pub fn aim_at(&mut self, i: usize) {
        self.hint = Some(Target::Master(i % self.masters.len()));
    }

    /// Whether a hint is pending.
    pub fn has_hint(&self) -> bool {
        self.hint.is_some()
    }

    /// Drops a pending hint (its target just failed, or a new call starts).
    pub fn clear_hint(&mut self) {
        self.hint = None;
    }

    /// Moves to the next target: the pending hint (consumed), else the first master after the
    /// cursor, wrapping, whose bit is clear in `avoid` (the masters already tried: so every
    /// master gets its turn before any gets a second one, F5), else simply the next one.
    pub fn advance(&mut self, avoid: u64) -> Target {
        let n = self.masters.len();
        let next = match self.hint.take() {
            Some(t) => t,
            None => {
                let untried = (1..=n)
                    .map(|k| (self.cursor + k) % n)
                    .find(|&i| i >= 64 || avoid & (1 << i) == 0);
                Target::Master(untried.unwrap_or((self.cursor + 1) % n))
            }
        };
        if let Target::Master(i) = next {
            self.cursor = i;
        }
        self.current = next.clone();
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Rotator {
        Rotator::new(vec![
            Endpoint::new("a", 1),
            Endpoint::new("b", 2),
            Endpoint::new("c", 3),
        ])
    }

    /// A fake DNS: a, alias-of-b and b resolve; everything else does not.
    fn table_dns(host: &str, port: u16) -> Vec<SocketAddr> {
        let ip = match host {
            "a" => "10.0.0.1",
            "b" | "alias-of-b" => "10.0.0.2",
            "c" => "10.0.0.3",
            "stranger" => "10.0.0.9",
            "d" => "10.0.0.4",
            "one-too-many" => "10.0.0.99",
            n if n.starts_with('n') && n[1..].parse::<u8>().is_ok() => {
                return vec![SocketAddr::new(
                    [10, 0, 1, n[1..].parse().unwrap()].into(),
                    port,
                )]
            }
            _ => return vec![],
        };
        vec![SocketAddr::new(ip.parse().unwrap(), port)]
    }

    #[test]
    fn rotates_in_list_order_and_wraps() {
        let mut r = three();
        assert_eq!(r.current(), &Target::Master(0));
        let order: Vec<Target> = (0..5).map(|_| r.advance(0)).collect();
        use Target::Master as M;
        assert_eq!(order, vec![M(1), M(2), M(0), M(1), M(2)]);
        assert_eq!(r.current_master(), Some(2));
    }

    #[test]
    fn rotation_skips_masters_already_tried() {
        use Target::Master as M;
        // (cursor, tried bits, expected next): untried first, wrapping; all tried: the next.
        let table = [
            (0, 0b000, M(1)),
            (0, 0b011, M(2)),
            (0, 0b110, M(0)),
            (1, 0b101, M(1)), // only the current one is untried: stay there
            (2, 0b111, M(0)),
            (0, 0b111, M(1)),
        ];
        for (cursor, tried, want) in table {
            let mut r = three();
            r.set_current(cursor);
            assert_eq!(r.advance(tried), want, "cursor {cursor} tried {tried:03b}");
        }
    }

    #[test]
    fn single_master_rotates_onto_itself() {
        let mut r = Rotator::new(vec![Endpoint::new("only", 9)]);
        assert_eq!(r.advance(0), Target::Master(0));
        assert_eq!(r.advance(1), Target::Master(0));
    }

    /// F5's rules for hints, one row each: (current master, tried bits, hint, policy, verdict).
    #[test]
    fn hint_acceptance_table() {
        use HintPolicy::*;
        use HintRefusal::*;
        use HintVerdict::*;
        let far = Target::Unlisted(Endpoint::new("stranger", 4));
        type Row<'a> = (usize, u64, (&'a str, u16), HintPolicy, HintVerdict);
        let (cfg, m) = (ConfiguredOnly, Target::Master);
        let table: Vec<Row> = vec![
            (0, 0b001, ("c", 3), cfg, Accepted(m(2))),
            (0, 0b001, ("alias-of-b", 2), cfg, Accepted(m(1))),
            (0, 0b001, ("B", 2), cfg, Accepted(m(1))),
            // a standby naming itself
            (1, 0b010, ("b", 2), cfg, Refused(NamesCurrent)),
            (1, 0b010, ("alias-of-b", 2), AnyHost, Refused(NamesCurrent)),
            // two standbys naming each other: the second hint goes back to a tried one
            (1, 0b011, ("a", 1), cfg, Refused(AlreadyTried)),
            (2, 0b101, ("a", 1), AnyHost, Refused(AlreadyTried)),
            // after a sleep nothing is "tried" any more
            (1, 0b000, ("a", 1), cfg, Accepted(m(0))),
            // not configured
            (0, 0b001, ("stranger", 4), cfg, Refused(NotConfigured)),
            (0, 0b001, ("nowhere", 4), cfg, Refused(NotConfigured)),
            (0, 0b001, ("alias-of-b", 7), cfg, Refused(NotConfigured)),
            (0, 0b001, ("stranger", 4), AnyHost, Accepted(far.clone())),
        ];
        for (i, (cur, tried, (host, port), policy, want)) in table.into_iter().enumerate() {
            let mut r = three();
            r.set_current(cur);
            let got = r.offer_hint(host, port, policy, tried, &table_dns);
            assert_eq!(got, want, "row {i}: on {cur}, hint {host}:{port}");
            assert_eq!(r.has_hint(), matches!(want, Accepted(_)), "row {i}");
        }
    }

    #[test]
    fn hint_goes_first_once_then_rotation_continues_from_it() {
        let mut r = three();
        r.offer_hint("c", 3, HintPolicy::ConfiguredOnly, 0b001, &table_dns);
        assert_eq!(r.advance(0b001), Target::Master(2), "hint first");
        assert!(!r.has_hint(), "consumed");
        assert_eq!(
            r.advance(0),
            Target::Master(0),
            "rotation continues after the hinted master"
        );
    }

    #[test]
    fn a_hint_a_masters_member_list_names_is_followed_once() {
        let mut r = three();
        // Nobody vouched yet: refused, as before.
        let v = r.offer_hint("d", 4, HintPolicy::ConfiguredOnly, 0b001, &table_dns);
        assert_eq!(v, HintVerdict::Refused(HintRefusal::NotConfigured));
        // Master a (a standby) reported its members: a, b, c and d.
        r.vouch(
            ["a", "b", "c", "d"]
                .iter()
                .zip(1..)
                .map(|(h, p)| Endpoint::new(*h, p))
                .collect(),
        );
        let d = Target::Unlisted(Endpoint::new("d", 4));
        let v = r.offer_hint("d", 4, HintPolicy::ConfiguredOnly, 0b001, &table_dns);
        assert_eq!(v, HintVerdict::Accepted(d.clone()));
        assert_eq!(r.advance(0b001), d);
        // Not learned: the rotation is still the three configured masters.
        assert_eq!(r.masters().len(), 3);
        // A stranger the list does not name stays refused; so does d's port changed.
        for (h, p) in [("stranger", 4), ("d", 5)] {
            let v = r.offer_hint(h, p, HintPolicy::ConfiguredOnly, 0, &table_dns);
            assert_eq!(
                v,
                HintVerdict::Refused(HintRefusal::NotConfigured),
                "{h}:{p}"
            );
        }
        // A new report replaces the old one.
        r.vouch(vec![Endpoint::new("a", 1)]);
        let v = r.offer_hint("d", 4, HintPolicy::ConfiguredOnly, 0, &table_dns);
        assert_eq!(v, HintVerdict::Refused(HintRefusal::NotConfigured));
    }

    #[test]
    fn an_unlisted_target_leaves_the_cursor_alone() {
        let mut r = three();
        r.advance(0);
        let stranger = Target::Unlisted(Endpoint::new("stranger", 4));
        r.offer_hint("stranger", 4, HintPolicy::AnyHost, 0, &table_dns);
        assert_eq!(r.advance(0), stranger);
        assert_eq!(r.current_master(), None);
        assert_eq!(r.endpoint(&stranger).to_string(), "stranger:4");
        // Rotation resumes after master 1.
        assert_eq!(r.advance(0), Target::Master(2));
    }

    #[test]
    fn cleared_hint_is_not_used_and_aim_at_sets_one() {
        let mut r = three();
        r.offer_hint("c", 3, HintPolicy::ConfiguredOnly, 0, &table_dns);
        r.clear_hint();
        assert_eq!(r.advance(0), Target::Master(1));
        r.aim_at(0);
        assert_eq!(r.advance(0b111), Target::Master(0));
    }

    #[test]
    fn set_current_is_sticky_start_point() {
        let mut r = three();
        r.set_current(2);
        assert_eq!(r.current(), &Target::Master(2));
        assert_eq!(r.advance(0), Target::Master(0));
        assert_eq!(Endpoint::new("::1", 5).to_string(), "[::1]:5");
    }

    #[test]
    fn learns_new_members_keeps_the_configured_and_is_bounded() {
        let learn =
            |r: &mut Rotator, host: &str, port| r.learn(&Endpoint::new(host, port), &table_dns);
        let mut r = three();
        r.set_current(1);
        assert_eq!(learn(&mut r, "b", 2), Learned::Known(1));
        // Another name of a configured master is no new master.
        assert_eq!(learn(&mut r, "alias-of-b", 2), Learned::Known(1));
        // A name that does not resolve now could be an alias: not added on a guess.
        assert_eq!(learn(&mut r, "nowhere", 4), Learned::Unresolved);
        assert_eq!(learn(&mut r, "d", 4), Learned::Added(3));
        assert_eq!(learn(&mut r, "d", 4), Learned::Known(3));
        assert_eq!(r.configured(), 3);
        // The cursor did not move; rotation reaches the learned master after the configured.
        assert_eq!(r.current(), &Target::Master(1));
        use Target::Master as M;
        let order: Vec<Target> = (0..4).map(|_| r.advance(0)).collect();
        assert_eq!(order, vec![M(2), M(3), M(0), M(1)]);
        for k in 1..MAX_LEARNED_MASTERS {
            let e = Endpoint::new(format!("n{k}"), 100 + k as u16);
            assert_eq!(r.learn(&e, &table_dns), Learned::Added(3 + k));
        }
        assert_eq!(learn(&mut r, "one-too-many", 9), Learned::Full);
        assert_eq!(r.masters().len(), 3 + MAX_LEARNED_MASTERS);
        assert_eq!(&r.masters()[..3], three().masters());
        // A hint naming a learned master is a hint naming a master.
        assert_eq!(
            r.offer_hint("d", 4, HintPolicy::ConfiguredOnly, 0, &table_dns),
            HintVerdict::Accepted(M(3))
        );
    }
}
