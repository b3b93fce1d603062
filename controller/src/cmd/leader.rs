//! `xce-controller leader transfer [--to N] --masters LIST` (C14 on demand, issue 26): asks
//! the primary to hand leadership over to voter N (or to the voter of its choice among those
//! that answered it recently) through the library's client, then confirms the new primary.
//! Exit 0 when node N (without `--to`: another voter) is primary afterwards, 1 when refused or
//! not confirmed (the reason printed), 2 on a usage error.

use std::time::{Duration, Instant};

use xce_proto::wire::Op;

use crate::cmd::status::StatusArgs;

/// How long the new primary has to show after the primary answered.
const CONFIRM: Duration = Duration::from_secs(5);

/// `leader transfer` arguments: the target (None: the primary's choice), then `status`'s
/// connection options.
pub struct LeaderArgs {
    pub to: Option<u32>,
    pub conn: StatusArgs,
}

impl LeaderArgs {
    pub fn parse(args: &[String]) -> Result<LeaderArgs, String> {
        match args.first().map(String::as_str) {
            Some("transfer") => {}
            Some(other) => return Err(format!("unknown leader command {other:?}")),
            None => return Err("missing leader command (transfer)".into()),
        }
        let (rest, taken) = crate::base::config::take_flags(&args[1..], &["--to"])?;
        let mut to = None;
        for (_, v) in taken {
            let id = v.parse::<u32>().ok().filter(|&n| n > 0);
            to = Some(id.ok_or_else(|| format!("--to: bad node id {v:?}"))?);
        }
        let conn = StatusArgs::parse(&rest)?;
        if conn.json {
            return Err("--json: not an option of leader transfer".into());
        }
        Ok(LeaderArgs { to, conn })
    }
}

/// Why the primary refused, in words.
fn reason(status: i32, to: Option<u32>) -> String {
    let who = to.map_or("no voter".to_string(), |n| format!("node {n}"));
    match status.saturating_abs() {
        libc::ENOENT => format!("{who} is not a member"),
        libc::EINVAL => format!("{who} is a learner, not a voter"),
        libc::EHOSTDOWN => match to {
            Some(n) => {
                format!("node {n} has not answered the primary recently (stopped, down or cut off)")
            }
            None => "no other voter answered the primary recently".into(),
        },
        libc::EAGAIN => format!("{who} is not caught up with the primary's log yet"),
        libc::ETIMEDOUT => format!("{who} did not take over within 2 s: the primary serves on"),
        _ => xce_proto::strerror(status).to_string(),
    }
}

/// Runs the command.
pub fn leader(a: LeaderArgs) -> i32 {
    let work = |c: &xce::client::Client| transfer(c, a.to).map(|line| println!("{line}"));
    let says = "xce-controller leader transfer";
    crate::cmd::member::with_client(&a.conn, "xce-controller leader", says, work)
}

fn transfer(c: &xce::client::Client, to: Option<u32>) -> Result<String, String> {
    let before = c
        .hello()
        .map_err(|e| format!("no primary: {}", xce_proto::error::status_text(e.status())))?;
    let from = before.id;
    if to == Some(from) {
        return Ok(format!("node {from} is the primary already"));
    }
    // Issue 36: the primary's reason when it gave one, every status with its name.
    let refused = |status: i32, detail: String| {
        let named = format!("status {status} {}", xce_proto::error::status_name(status));
        if detail.is_empty() {
            format!("{} ({named})", reason(status, to))
        } else {
            format!("{}: {detail} ({named})", reason(status, to))
        }
    };
    match c.call(Op::LeaderTransfer {
        to: to.unwrap_or(0),
        from,
    }) {
        Ok(r) if r.status >= 0 => {}
        Ok(r) => return Err(refused(r.status, r.detail)),
        Err(e) => {
            let detail = c.last_error().map(|r| r.detail).unwrap_or_default();
            return Err(refused(e.status(), detail));
        }
    }
    // Confirmed by the primary the library finds now.
    let deadline = Instant::now() + CONFIRM;
    loop {
        if let Ok(i) = c.hello() {
            let done = match to {
                Some(n) => i.id == n,
                None => i.id != from,
            };
            if done {
                return Ok(format!(
                    "node {} is the primary now (was node {from}), term {}",
                    i.id, i.term
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the primary answered, but no new primary showed within {} s",
                CONFIRM.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
