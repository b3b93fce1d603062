//! F5: which controller to try next — the redirect hint first (once), else the next master in
//! list order, wrapping. F3: the cursor stays on the master that served until it fails.
//!
//! Pure except for name resolution, which is injected so tests need no DNS.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

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
    /// It names no configured master; ignored (the loop logs this at WARN).
    Refused,
}

/// Resolves a host and port to addresses (the system resolver, or a table in tests).
pub type Resolve<'a> = &'a dyn Fn(&str, u16) -> Vec<SocketAddr>;

/// The system resolver; an unresolvable name yields no address.
pub fn resolve_system(host: &str, port: u16) -> Vec<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default()
}

/// The master list with its cursor and the pending hint.
#[derive(Debug, Clone)]
pub struct Rotator {
    masters: Vec<Endpoint>,
    cursor: usize,
    current: Target,
    hint: Option<Target>,
}

impl Rotator {
    /// A rotator positioned on the first master. `masters` must not be empty.
    pub fn new(masters: Vec<Endpoint>) -> Rotator {
        assert!(!masters.is_empty(), "a Rotator needs at least one master");
        Rotator {
            masters,
            cursor: 0,
            current: Target::Master(0),
            hint: None,
        }
    }

    pub fn masters(&self) -> &[Endpoint] {
        &self.masters
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
        if let Some(i) = self
            .masters
            .iter()
            .position(|m| m.port == port && m.host.eq_ignore_ascii_case(host))
        {
            return Some(i);
        }
        let wanted = resolve(host, port);
        if wanted.is_empty() {
            return None;
        }
        self.masters
            .iter()
            .position(|m| resolve(&m.host, m.port).iter().any(|a| wanted.contains(a)))
    }

    /// Offers the redirect hint of the last reply (F5). An accepted hint is the next target,
    /// used once; a refused one leaves plain rotation in force.
    pub fn offer_hint(
        &mut self,
        host: &str,
        port: u16,
        policy: HintPolicy,
        resolve: Resolve<'_>,
    ) -> HintVerdict {
        let target = match (self.find_master(host, port, resolve), policy) {
            (Some(i), _) => Target::Master(i),
            (None, HintPolicy::AnyHost) => Target::Unlisted(Endpoint::new(host, port)),
            (None, HintPolicy::ConfiguredOnly) => return HintVerdict::Refused,
        };
        self.hint = Some(target.clone());
        HintVerdict::Accepted(target)
    }

    /// Whether a hint is pending.
    pub fn has_hint(&self) -> bool {
        self.hint.is_some()
    }

    /// Drops a pending hint (its target just failed, or a new call starts).
    pub fn clear_hint(&mut self) {
        self.hint = None;
    }

    /// Moves to the next target: the pending hint (consumed), else the master after the cursor.
    pub fn advance(&mut self) -> Target {
        let next = match self.hint.take() {
            Some(t) => t,
            None => Target::Master((self.cursor + 1) % self.masters.len()),
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
    fn table(host: &str, port: u16) -> Vec<SocketAddr> {
        let ip = match host {
            "a" => "10.0.0.1",
            "b" | "alias-of-b" => "10.0.0.2",
            "c" => "10.0.0.3",
            "stranger" => "10.0.0.9",
            _ => return vec![],
        };
        vec![SocketAddr::new(ip.parse().unwrap(), port)]
    }

    #[test]
    fn rotates_in_list_order_and_wraps() {
        let mut r = three();
        assert_eq!(r.current(), &Target::Master(0));
        let order: Vec<Target> = (0..5).map(|_| r.advance()).collect();
        use Target::Master as M;
        assert_eq!(order, vec![M(1), M(2), M(0), M(1), M(2)]);
        assert_eq!(r.current_master(), Some(2));
    }

    #[test]
    fn single_master_rotates_onto_itself() {
        let mut r = Rotator::new(vec![Endpoint::new("only", 9)]);
        assert_eq!(r.advance(), Target::Master(0));
        assert_eq!(r.advance(), Target::Master(0));
    }

    #[test]
    fn hint_goes_first_once_then_rotation_continues_from_it() {
        let mut r = three();
        assert_eq!(
            r.offer_hint("c", 3, HintPolicy::ConfiguredOnly, &table),
            HintVerdict::Accepted(Target::Master(2))
        );
        assert!(r.has_hint());
        assert_eq!(r.advance(), Target::Master(2), "hint first");
        assert!(!r.has_hint(), "consumed");
        assert_eq!(
            r.advance(),
            Target::Master(0),
            "rotation continues after the hinted master"
        );
    }

    #[test]
    fn hint_matches_by_resolved_address() {
        let mut r = three();
        assert_eq!(
            r.offer_hint("alias-of-b", 2, HintPolicy::ConfiguredOnly, &table),
            HintVerdict::Accepted(Target::Master(1))
        );
        assert_eq!(
            r.offer_hint("B", 2, HintPolicy::ConfiguredOnly, &|_, _| vec![]),
            HintVerdict::Accepted(Target::Master(1))
        );
        // Same address, other port: not that master.
        assert_eq!(
            r.offer_hint("alias-of-b", 7, HintPolicy::ConfiguredOnly, &table),
            HintVerdict::Refused
        );
    }

    #[test]
    fn hint_naming_no_configured_master_is_refused_unless_opted_in() {
        let mut r = three();
        assert_eq!(
            r.offer_hint("stranger", 4, HintPolicy::ConfiguredOnly, &table),
            HintVerdict::Refused
        );
        assert_eq!(
            r.offer_hint("nowhere", 4, HintPolicy::ConfiguredOnly, &table),
            HintVerdict::Refused
        );
        assert!(!r.has_hint());
        assert_eq!(r.advance(), Target::Master(1), "plain rotation");

        let stranger = Target::Unlisted(Endpoint::new("stranger", 4));
        assert_eq!(
            r.offer_hint("stranger", 4, HintPolicy::AnyHost, &table),
            HintVerdict::Accepted(stranger.clone())
        );
        assert_eq!(r.advance(), stranger);
        assert_eq!(r.current_master(), None);
        assert_eq!(r.endpoint(&stranger).to_string(), "stranger:4");
        // The cursor did not move: rotation resumes after master 1.
        assert_eq!(r.advance(), Target::Master(2));
    }

    #[test]
    fn cleared_hint_is_not_used() {
        let mut r = three();
        r.offer_hint("c", 3, HintPolicy::ConfiguredOnly, &table);
        r.clear_hint();
        assert_eq!(r.advance(), Target::Master(1));
    }

    #[test]
    fn set_current_is_sticky_start_point() {
        let mut r = three();
        r.set_current(2);
        assert_eq!(r.current(), &Target::Master(2));
        assert_eq!(r.advance(), Target::Master(0));
        assert_eq!(Endpoint::new("::1", 5).to_string(), "[::1]:5");
    }
}
