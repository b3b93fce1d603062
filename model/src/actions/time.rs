//! The clock: one tick on every node and every message in flight, ages saturated at the
//! largest one that still means anything (so the clock needs no bound).

use super::Raft;
use crate::state::{Msg, Role, State};

impl Raft {
    pub(super) fn tick(&self, s: &mut State) {
        let (utime, boot, send) = (self.o.utime_cap(), self.o.boot_cap(), self.o.send_cap());
        let older = |a: &mut u8, cap: u8| *a = (*a + 1).min(cap);
        for node in &mut s.nodes {
            older(&mut node.utime, utime);
            older(&mut node.boot, boot);
            if let Role::Leader(l) = &mut node.role {
                l.acks.iter_mut().for_each(|a| older(a, send));
            }
        }
        s.net = std::mem::take(&mut s.net)
            .into_iter()
            .map(|mut m| {
                if let Msg::Append { age, .. } = &mut m {
                    older(age, send);
                }
                m
            })
            .collect();
    }
}
