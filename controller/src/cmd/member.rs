//! `xce-controller member add|remove|list` (C17): membership changes through the library's
//! client (`xce::client::Client`), so redirects to the primary, retries and exactly-once
//! request ids are the library's. The identity (admin, for add and remove) is `status`'s: TLS
//! files and a token, from the options or `XCE_TLS_*` / `XCE_AUTH_TOKEN`.

// The library's client API (Cargo.toml: the controller's one use of the library).
use xce::client::{parse_masters, Client, ClientOption, Config, TlsFiles};

use crate::base::config::ClusterSpec;
use crate::cmd::status::{gather, StatusArgs};

/// What `member` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Add {
        id: u32,
        client: String,
        raft: String,
    },
    Remove {
        id: u32,
    },
    List,
}

/// `member` arguments: the action, then `status`'s options.
pub struct MemberArgs {
    pub action: Action,
    pub conn: StatusArgs,
}

/// Longest one call waits for its reply: `member add` returns once the new node caught up.
const REPLY_TIMEOUT_MS: u32 = 70_000;
/// Longest one command runs, retries included.
const CALL_DEADLINE_MS: u32 = 90_000;

impl MemberArgs {
    pub fn parse(args: &[String]) -> Result<MemberArgs, String> {
        let (action, rest) = match args.first().map(String::as_str) {
            Some("add") => {
                let spec = args.get(1).ok_or("member add: missing ID=CLIENT/RAFT")?;
                let parsed = ClusterSpec::parse(spec)?;
                if parsed.nodes.len() != 1 {
                    return Err(format!("member add: one ID=CLIENT/RAFT, not {spec:?}"));
                }
                let (id, n) = parsed.nodes.into_iter().next().expect("one node");
                let id = u32::try_from(id).map_err(|_| format!("member add: bad id {id}"))?;
                let (client, raft) = (n.client, n.raft);
                (Action::Add { id, client, raft }, &args[2..])
            }
            Some("remove") => {
                let v = args.get(1).ok_or("member remove: missing ID")?;
                let id = v
                    .parse::<u32>()
                    .ok()
                    .filter(|&i| i > 0)
                    .ok_or_else(|| format!("member remove: bad id {v:?}"))?;
                (Action::Remove { id }, &args[2..])
            }
            Some("list") => (Action::List, &args[1..]),
            Some(other) => return Err(format!("unknown member command {other:?}")),
            None => return Err("missing member command (add, remove or list)".into()),
        };
        Ok(MemberArgs {
            action,
            conn: StatusArgs::parse(rest)?,
        })
    }
}

/// A library client for the commands that go through the primary (member, snapshot save),
/// with `status`'s identity, named `name` in the controllers' logs.
pub(crate) fn client(a: &StatusArgs, name: &str) -> Result<Client, String> {
    let masters = parse_masters(&a.masters.join(","))
        .map_err(|e| format!("--masters: {}", xce_proto::strerror(e.code())))?;
    let config = Config {
        masters,
        tls: a.tls.as_ref().map(|(ca, identity)| TlsFiles {
            ca_file: ca.clone(),
            cert_file: identity.as_ref().map(|(c, _)| c.clone()),
            key_file: identity.as_ref().map(|(_, k)| k.clone()),
        }),
        client_name: name.into(),
        auth_token: (!a.token.is_empty()).then(|| a.token.clone()),
    };
    let c =
        Client::start(config).map_err(|e| format!("start: {}", xce_proto::strerror(e.code())))?;
    for o in [
        ClientOption::ReplyTimeoutMs(REPLY_TIMEOUT_MS),
        ClientOption::CallDeadlineMs(CALL_DEADLINE_MS),
        ClientOption::Suspicion(false),
    ] {
        c.set_option(o)
            .map_err(|e| format!("option: {}", xce_proto::strerror(e.code())))?;
    }
    Ok(c)
}

/// Runs the command: 0 on success, 1 on a failure (printed).
pub fn member(a: MemberArgs) -> i32 {
    let says = "xce-controller member";
    if a.action == Action::List {
        return crate::cmd::exit_status(says, list(&a.conn));
    }
    with_client(&a.conn, says, says, |c| match &a.action {
        Action::Add { id, client, raft } => {
            // Issue 36: the client address first, as a client would dial it; the primary then
            // asks the raft address who it is. Either refuses with its reason.
            check_client_addr(c, &a.conn, *id, client)?;
            c.member_add(*id, client, raft)
                .map(|()| println!("added node {id} ({client}/{raft}) as a voter"))
                .map_err(|e| refusal(c, &a.action, e))
        }
        Action::Remove { id } => c
            .member_remove(*id)
            .map(|()| println!("removed node {id}"))
            .map_err(|e| refusal(c, &a.action, e)),
        Action::List => Ok(()),
    })
}

/// Runs `work` with a [`client`] named `name`, then closes it: exit status 0, or 1 with the
/// failure printed as `SAYS: why`.
pub(crate) fn with_client(
    a: &StatusArgs,
    name: &str,
    says: &str,
    work: impl FnOnce(&Client) -> Result<(), String>,
) -> i32 {
    let res = client(a, name).and_then(|c| {
        let res = work(&c);
        c.close();
        res
    });
    crate::cmd::exit_status(says, res)
}

/// A refusal in one line: the primary's reason when it gave one, the status with its name,
/// and what became of the membership.
fn refusal(c: &Client, action: &Action, e: xce_proto::Error) -> String {
    let detail = c.last_error().map(|r| r.detail).filter(|d| !d.is_empty());
    let code = e.status();
    let what = match detail {
        Some(d) => format!("refused by the primary: {d}"),
        None => xce_proto::strerror(code).to_string(),
    };
    let after = match (action, code.saturating_abs()) {
        (Action::Add { id, .. }, libc::ETIMEDOUT) => {
            format!("; node {id} did not catch up: it was taken out again")
        }
        (Action::Add { .. }, _) if c.last_error().is_some_and(|r| !r.detail.is_empty()) => {
            "; nothing was changed".to_string()
        }
        _ => String::new(),
    };
    format!(
        "{what}{after} (status {code} {})",
        xce_proto::error::status_name(code)
    )
}

/// How long the client address of a node to add may refuse connections (a node started a
/// moment ago) before the refusal is the answer.
const CLIENT_ADDR_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Issue 36: `member add` dials the new node's client address itself, with the caller's
/// identity, as the cluster's clients will: it must answer, as node `id`, of no other cluster
/// than the one `c` reaches. Before, a typo in the client port was accepted, and a transfer
/// to that node left no client able to reach the primary.
fn check_client_addr(c: &Client, a: &StatusArgs, id: u32, addr: &str) -> Result<(), String> {
    let cluster = c.hello().map(|i| i.cluster_id).unwrap_or([0; 16]);
    let caller = std::sync::Arc::new(crate::cmd::status::Caller::of(a)?);
    let t0 = std::time::Instant::now();
    let answer = crate::cmd::block_on(async {
        loop {
            let r = crate::cmd::status::ask(addr.to_string(), a.timeout, caller.clone()).await;
            let refused = r.as_ref().is_err_and(|e| e.contains("connection refused"));
            if !refused || t0.elapsed() >= CLIENT_ADDR_WAIT {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })?;
    judge_client_addr(id, addr, cluster, answer)
}

/// Whether the answer at a new node's client address is node `id`'s, of `cluster` or of none
/// yet: `Err` names what is wrong. Pure: a table test below (`tests`).
fn judge_client_addr(
    id: u32,
    addr: &str,
    cluster: [u8; 16],
    answer: Result<xce_proto::wire::ControllerInfo, String>,
) -> Result<(), String> {
    let refuse = |why: String| {
        Err(format!(
            "refused: node {id}'s client address {addr}: {why}; nothing was changed"
        ))
    };
    match answer {
        Err(e) => refuse(e),
        Ok(i) if i.id != id => refuse(format!(
            "it answers as node {}, not node {id} (a typo in the address?)",
            i.id
        )),
        Ok(i) if i.cluster_id != [0; 16] && cluster != [0; 16] && i.cluster_id != cluster => {
            refuse("it belongs to another cluster: start it blank, with --join".to_string())
        }
        Ok(_) => Ok(()),
    }
}

/// Issue 26: `member list` as `status` asks — every node answers for itself and names the
/// members it holds — so a standby alone answers at once (through the library it waited for a
/// primary it could not reach). One line per member: id, client address, role (primary,
/// voter, learner), reachable or not, and its lag behind the primary.
fn list(a: &StatusArgs) -> Result<(), String> {
    let caller = crate::cmd::status::Caller::of(a).map(std::sync::Arc::new)?;
    let (view, _) = crate::cmd::block_on(gather(a, caller, false))?;
    let members: Vec<_> = view.nodes.iter().filter(|n| n.member).collect();
    if members.is_empty() {
        return Err(format!("no member answered: {}", view.notes.join("; ")));
    }
    for n in members {
        let role = match (&n.info, view.primary) {
            (_, Some((p, _))) if p == n.id => "primary",
            _ if !n.voter => "learner",
            _ => "voter",
        };
        let (reach, lag) = match &n.info {
            Some(i) => ("reachable".to_string(), view.lag(i)),
            None => (
                format!("unreachable ({})", n.error.as_deref().unwrap_or("-")),
                "-".to_string(),
            ),
        };
        println!("{} {} {role} {reach} lag {lag}", n.id, n.addrs[0]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::judge_client_addr;
    use xce_proto::wire::ControllerInfo;

    #[test]
    fn a_new_nodes_client_address_is_judged_by_its_answer() {
        let (ours, theirs, none) = ([1; 16], [2; 16], [0; 16]);
        let node = |id, cluster_id| {
            Ok(ControllerInfo {
                id,
                cluster_id,
                ..Default::default()
            })
        };
        // (answer, the cluster we belong to, refused because of)
        type Answer = Result<ControllerInfo, String>;
        let rows: [(Answer, [u8; 16], Option<&str>); 7] = [
            (node(4, ours), ours, None),
            (node(4, none), ours, None),   // blank: it joins
            (node(4, theirs), none, None), // we do not know ours (an older controller)
            (node(4, theirs), ours, Some("belongs to another cluster")),
            (node(5, ours), ours, Some("answers as node 5, not node 4")),
            (
                Err("connection refused".into()),
                ours,
                Some("connection refused"),
            ),
            (node(5, none), none, Some("answers as node 5")),
        ];
        for (answer, cluster, refused) in rows {
            let got = judge_client_addr(4, "h:1", cluster, answer.clone());
            match refused {
                None => assert_eq!(got, Ok(()), "{answer:?}"),
                Some(why) => {
                    let e = got.expect_err(why);
                    assert!(
                        e.starts_with("refused: node 4's client address h:1: "),
                        "{e}"
                    );
                    assert!(
                        e.contains(why) && e.ends_with("; nothing was changed"),
                        "{e}"
                    );
                }
            }
        }
    }
}
