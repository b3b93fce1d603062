//! C19: a state's digest — SHA-256 of its canonical bytes ([`State::canonical`]). Every
//! replica computes it at the same log entries (the store takes a clone of its state when it
//! applies a checkpoint entry, `raft/digests.rs`) and the primary compares them
//! (`node/check.rs`).

use crate::sm::state::State;

/// A state's SHA-256.
pub type Digest = [u8; 32];

/// The digest of `state` (reads every job: run it off the apply path, on a clone).
pub fn of(state: &State) -> Digest {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    state.canonical(&mut |b| ctx.update(b));
    let d = ctx.finish();
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The first 6 bytes in hex: enough to tell digests apart in a log line.
pub fn short(d: &Digest) -> String {
    hex(&d[..6])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::state::{Cmd, JobAction, Proposal, QueueAction, Role, SubmitSpec};

    fn p(client: u8, req: u64, now_ms: i64, cmd: Cmd) -> Proposal {
        Proposal {
            client_id: [client; 16],
            request_id: req,
            now_ms,
            cmd,
        }
    }

    fn submit(id: u64, user: &str) -> Cmd {
        Cmd::JobSubmit(SubmitSpec {
            job_id: id,
            name: format!("job {id}"),
            user: user.into(),
            queue: String::new(),
            command: "sleep 1".into(),
            ncpus: 1,
            mem_mb: 10,
        })
    }

    /// A log of every kind of write.
    fn log() -> Vec<Proposal> {
        let mut v = vec![p(
            1,
            1,
            1000,
            Cmd::Join {
                role: Role::Worker,
                host: "h1".into(),
                ncpus: 8,
                mem_mb: 1024,
                attrs: vec![("arch".into(), "x86_64".into())],
            },
        )];
        for i in 1..=300u64 {
            v.push(p(
                (i % 5) as u8,
                100 + i,
                2000 + i as i64,
                submit(i, &format!("u{}", i % 7)),
            ));
        }
        let admin = [
            Cmd::JobDispatch {
                job_id: 7,
                host: "h1".into(),
            },
            Cmd::JobCtrl {
                job_id: 8,
                action: JobAction::Kill,
            },
            Cmd::QueueCtrl {
                queue: "normal".into(),
                action: QueueAction::Inactivate,
            },
            Cmd::RunTask {
                host: "h1".into(),
                command: "uptime".into(),
            },
            Cmd::UpdateResvals {
                host: "h1".into(),
                resvals: vec![("load".into(), "0.5".into())],
            },
        ];
        for (t, cmd) in (3000..).zip(admin) {
            v.push(p(9, 0, t, cmd));
        }
        v.push(p(
            0,
            0,
            3005,
            Cmd::ClusterId {
                id: [7; 16],
                epoch: 0,
            },
        ));
        v
    }

    fn applied(log: &[Proposal]) -> State {
        let mut s = State::default();
        for x in log {
            s.apply(x);
        }
        s
    }

    /// Two replicas that applied the same log have the same digest, whatever happened to
    /// their caches: one read back from a snapshot (its texts interned anew, its
    /// exactly-once table rebuilt in another order) and one clone.
    #[test]
    fn the_same_log_gives_the_same_digest() {
        let a = applied(&log());
        let b = applied(&log());
        assert_eq!(of(&a), of(&b));
        assert_eq!(of(&a), of(&a.clone()));
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("s.tmp");
        crate::sm::snapshot::View::of(Default::default(), &a)
            .write(&tmp)
            .unwrap();
        let (_, back) = crate::sm::snapshot::read(&tmp).unwrap();
        assert_eq!(of(&back), of(&a), "read back from a snapshot");
    }

    /// Anything a client can read, or that decides what a later entry does, changes the
    /// digest: one write more or less, the same writes with another leader time, another
    /// order, another client, another cluster id.
    #[test]
    fn every_difference_changes_the_digest() {
        let base = of(&applied(&log()));
        let mut variants: Vec<(&str, Vec<Proposal>)> = Vec::new();
        let mut l = log();
        l.pop();
        variants.push(("no cluster id", l));
        let mut l = log();
        l.remove(150);
        variants.push(("one job less", l));
        let mut l = log();
        l[10].now_ms += 1;
        variants.push(("a submit time", l));
        let mut l = log();
        l.swap(301, 303);
        variants.push(("a dispatch after the queue was made inactive", l));
        let mut l = log();
        l[20].client_id = [42; 16];
        variants.push(("another client (the exactly-once table)", l));
        let mut l = log();
        if let Cmd::ClusterId { id, .. } = &mut l.last_mut().unwrap().cmd {
            id[0] = 8;
        }
        variants.push(("another cluster id", l));
        let mut l = log();
        l.push(p(9, 0, 4000, Cmd::Heartbeat { host: "h1".into() }));
        variants.push(("a heartbeat", l));
        for (what, l) in variants {
            assert_ne!(of(&applied(&l)), base, "{what}");
        }
        // A second cluster id changes nothing: the first one stays.
        let mut l = log();
        l.push(p(
            0,
            0,
            4001,
            Cmd::ClusterId {
                id: [9; 16],
                epoch: 0,
            },
        ));
        let s = applied(&l);
        assert_eq!(s.cluster().map(|c| c.id), Some([7; 16]));
    }

    /// The canonical bytes never change between builds: members of a cluster being upgraded
    /// compare digests (C19), so a node of the next build must hash a state as this one does.
    /// Pinned for the log above.
    #[test]
    fn the_canonical_bytes_are_those_of_earlier_builds() {
        assert_eq!(hex(&of(&applied(&log()))), PINNED_DIGEST);
    }

    /// The digest of [`log`]'s state, as builds since C19 compute it.
    const PINNED_DIGEST: &str = "a745680318898d34d0ad01f204b63c4251af9689bef323f087c6a97a91d4a4c8";

    #[test]
    fn hex_is_lowercase_and_whole() {
        assert_eq!(hex(&[0, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(short(&[0xab; 32]), "abababababab");
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::sm::state::{Cmd, Proposal, SubmitSpec};

    /// What a digest costs (C19, proof/BENCH.md): the state clone a checkpoint takes and the
    /// hash, for 10^4, 10^5 and 10^6 typical jobs. `cargo test --release -p xce-controller --bin
    /// xce-controller digest_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: run it in release, see proof/BENCH.md"]
    fn digest_speed() {
        let mut s = State::default();
        let mut done = 0u64;
        for n in [10_000u64, 100_000, 1_000_000] {
            while done < n {
                done += 1;
                s.apply(&Proposal {
                    client_id: [(done % 64) as u8; 16],
                    request_id: done,
                    now_ms: 1_700_000_000_000 + done as i64,
                    cmd: Cmd::JobSubmit(SubmitSpec {
                        job_id: done,
                        name: format!("sim-{done}"),
                        user: format!("user{}", done % 50),
                        queue: String::new(),
                        command: format!("/usr/bin/simulate --case {done} --steps 1000"),
                        ncpus: 4,
                        mem_mb: 8192,
                    }),
                });
            }
            let t0 = std::time::Instant::now();
            let c = s.without_caches();
            let cloned = t0.elapsed();
            let t1 = std::time::Instant::now();
            let d = of(&c);
            let hashed = t1.elapsed();
            eprintln!(
                "{n} jobs: clone {:.3} ms, digest {:.1} ms ({})",
                cloned.as_secs_f64() * 1e3,
                hashed.as_secs_f64() * 1e3,
                short(&d)
            );
        }
    }
}
