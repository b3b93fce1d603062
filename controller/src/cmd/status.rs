//! `xce-controller status --masters LIST` (C18): the cluster at a glance. Every master is asked
//! an immediate `waitPrimary` (any node answers it, whatever its role), which carries the
//! node's role, term, the primary it knows and its progress (log, commit and applied index,
//! last contact); the table says who is primary, how far each member lags behind it, and,
//! clearly, when there is no quorum. Then the cluster's id (C20: a member of another is
//! flagged), a consistency check the primary runs for it (C19, op `consistencyCheck`) and every
//! alarm a member reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xce::wire::{self, ControllerInfo, ControllerRole, Op, ReplyData, Request};

use crate::base::tls::client_connector;

/// Default bound on asking one master (connect + answer).
pub const DEFAULT_TIMEOUT_MS: u64 = 2000;

/// `status` arguments.
#[derive(Debug, Clone)]
pub struct StatusArgs {
    pub masters: Vec<String>,
    pub timeout: Duration,
    /// C13: `(ca, cert, key)` for a cluster whose client port has TLS (from `--ca`, `--cert`,
    /// `--key`, else `XCE_TLS_CA_FILE`, `XCE_TLS_CERT_FILE`, `XCE_TLS_KEY_FILE`).
    pub tls: Option<(PathBuf, Option<(PathBuf, PathBuf)>)>,
    /// C13: a token for a caller without a certificate (`--token`, else `XCE_AUTH_TOKEN`).
    pub token: String,
}

/// Who `status` asks as: TLS and a token, or neither.
#[derive(Default)]
pub struct Caller {
    tls: Option<tokio_rustls::TlsConnector>,
    token: String,
}

impl StatusArgs {
    pub fn parse(args: &[String]) -> Result<StatusArgs, String> {
        let mut masters = None;
        let mut timeout = Duration::from_millis(DEFAULT_TIMEOUT_MS);
        let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
        let (mut ca, mut cert, mut key) = (
            env("XCE_TLS_CA_FILE"),
            env("XCE_TLS_CERT_FILE"),
            env("XCE_TLS_KEY_FILE"),
        );
        let mut token = std::env::var("XCE_AUTH_TOKEN").unwrap_or_default();
        let mut it = args.iter();
        while let Some(f) = it.next() {
            let (k, v) = match f.split_once('=').filter(|_| f.starts_with("--")) {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (
                    f.clone(),
                    it.next()
                        .ok_or_else(|| format!("{f}: missing value"))?
                        .clone(),
                ),
            };
            match k.as_str() {
                "--masters" => {
                    let list: Vec<String> = v
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    for a in &list {
                        crate::base::config::check_addr(a)
                            .map_err(|e| format!("--masters {a:?}: {e}"))?;
                    }
                    masters = Some(list);
                }
                "--timeout-ms" => {
                    timeout = Duration::from_millis(
                        v.parse()
                            .map_err(|_| format!("--timeout-ms: bad number {v:?}"))?,
                    )
                }
                "--ca" => ca = Some(v.into()),
                "--cert" => cert = Some(v.into()),
                "--key" => key = Some(v.into()),
                "--token" => token = v.trim().to_string(),
                _ => return Err(format!("unknown option {k}")),
            }
        }
        let masters = masters
            .filter(|m| !m.is_empty())
            .ok_or("--masters is required")?;
        // The CA alone (with a token as the identity), or the CA and a certificate with its key.
        let tls = match (ca, cert, key) {
            (None, None, None) => None,
            (Some(ca), None, None) => Some((ca, None)),
            (Some(ca), Some(cert), Some(key)) => Some((ca, Some((cert, key)))),
            _ => return Err("--cert and --key go together, and need --ca".into()),
        };
        Ok(StatusArgs {
            masters,
            timeout,
            tls,
            token,
        })
    }
}

/// One master's answer, or why there is none.
pub struct Row {
    pub addr: String,
    pub info: Result<ControllerInfo, String>,
}

/// Asks one master an immediate `waitPrimary`, bounded by `timeout`.
pub async fn ask(
    addr: String,
    timeout: Duration,
    caller: Arc<Caller>,
) -> Result<ControllerInfo, String> {
    let op = Op::WaitPrimary {
        timeout_ms: 0,
        exclude_host: String::new(),
        exclude_port: 0,
    };
    match request(addr, op, timeout, &caller).await? {
        ReplyData::CtrlInfo(i) => Ok(i),
        _ => Err("an answer without controller info".into()),
    }
}

/// The members the primary at `addr` knows (`clusterconf`), as client addresses.
async fn members(addr: String, timeout: Duration, caller: &Caller) -> Vec<String> {
    match request(addr, Op::ClusterConf, timeout, caller).await {
        Ok(ReplyData::ClusterConf(cc)) => cc
            .controllers
            .iter()
            .map(|c| format!("{}:{}", c.host, c.port))
            .collect(),
        _ => Vec::new(),
    }
}

/// One request on a fresh connection, bounded by `timeout`: the reply's data, or why not.
async fn request(
    addr: String,
    op: Op,
    timeout: Duration,
    caller: &Caller,
) -> Result<ReplyData, String> {
    let work = async {
        let target = crate::base::config::resolve(&addr).await?;
        let tcp = TcpStream::connect(&target[..])
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut s: Box<dyn crate::raft::frame::PeerIo> = match &caller.tls {
            None => Box::new(tcp),
            Some(c) => {
                let (host, _) = crate::base::config::split_addr(&addr).ok_or("want HOST:PORT")?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| format!("{host}: {e}"))?;
                Box::new(
                    c.connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS: {e}"))?,
                )
            }
        };
        let req = Request {
            seq: 1,
            client_id: [0; 16],
            request_id: 0,
            no_reply: false,
            auth_token: caller.token.clone(),
            forward_within_ms: 0,
            op,
        };
        let mut out = Vec::new();
        wire::encode_request(&req, &mut out);
        s.write_all(&out).await.map_err(|e| format!("send: {e}"))?;
        let limits = wire::Limits::default();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match wire::frame_len(&buf, &limits) {
                Ok(Some(n)) if n <= buf.len() => {
                    let rep = wire::decode_reply(&buf[..n], &limits)
                        .map_err(|e| format!("bad reply: {e}"))?;
                    return match rep.data {
                        ReplyData::None => Err(format!("status {}", rep.status)),
                        d => Ok(d),
                    };
                }
                Err(e) => return Err(format!("bad reply: {e}")),
                _ => {}
            }
            let k = s.read(&mut chunk).await.map_err(|e| format!("recv: {e}"))?;
            if k == 0 {
                return Err(if caller.tls.is_some() {
                    "closed without an answer".into()
                } else {
                    "closed without an answer (a TLS port? give --ca, --cert and --key)".into()
                });
            }
            buf.extend_from_slice(&chunk[..k]);
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
}

fn role(r: ControllerRole) -> &'static str {
    match r {
        ControllerRole::Primary => "primary",
        ControllerRole::Standby => "standby",
        ControllerRole::Candidate => "candidate",
        ControllerRole::Initializing => "initializing",
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// C20, C19: the cluster's id, members of another, the consistency check's result (`check`:
/// the primary's answer to `consistencyCheck`), and the alarms every member reports.
fn render_health(
    rows: &[Row],
    primary: Option<&ControllerInfo>,
    check: Option<&Result<ControllerInfo, String>>,
    out: &mut String,
) {
    let answered: Vec<&ControllerInfo> = rows.iter().filter_map(|r| r.info.as_ref().ok()).collect();
    let none = [0u8; 16];
    // The cluster: the primary's, else the one most members report.
    let cluster = primary.map(|p| p.cluster_id).or_else(|| {
        let mut ids: Vec<[u8; 16]> = answered.iter().map(|i| i.cluster_id).collect();
        ids.sort_unstable();
        ids.iter()
            .max_by_key(|id| ids.iter().filter(|x| x == id).count())
            .copied()
    });
    match cluster {
        Some(c) if c != none => out.push_str(&format!(
            "cluster: {}
",
            hex(&c)
        )),
        Some(_) => out.push_str(
            "cluster: no id recorded yet
",
        ),
        None => {}
    }
    for r in rows {
        if let (Ok(i), Some(c)) = (&r.info, cluster) {
            if i.cluster_id != c && i.cluster_id != none && c != none {
                out.push_str(&format!(
                    "warning: node {} ({}) belongs to cluster {}, not this one: its data is \
                     another cluster's or another restore's; the members refuse it (C20)
",
                    i.id,
                    r.addr,
                    hex(&i.cluster_id)
                ));
            }
        }
    }
    let mut alarms: Vec<String> = Vec::new();
    let mut note = |who: &ControllerInfo, a: &str| {
        let line = format!("  node {}: {a}", who.id);
        if !alarms.contains(&line) {
            alarms.push(line);
        }
    };
    match check {
        Some(Ok(c)) => {
            if c.checked_index > 0 {
                out.push_str(&format!(
                    "consistency: every member that answered had the same state at index {}
",
                    c.checked_index
                ));
            } else {
                out.push_str(
                    "consistency: no agreement found yet (see the alarms)
",
                );
            }
            for a in &c.alarms {
                note(c, a);
            }
        }
        Some(Err(e)) => out.push_str(&format!(
            "consistency: not checked: {e}
"
        )),
        None => {}
    }
    for i in &answered {
        for a in &i.alarms {
            note(i, a);
        }
    }
    if !alarms.is_empty() {
        out.push_str(
            "ALARMS:
",
        );
        for a in alarms {
            out.push_str(&a);
            out.push('\n');
        }
    }
}

/// The table and the verdict; `Ok` when a primary serves with a quorum, `Err` otherwise.
/// `check`: the primary's answer to a consistency check, if one was asked.
pub fn render(rows: &[Row], check: Option<&Result<ControllerInfo, String>>) -> (String, bool) {
    let mut out = String::new();
    let answered: Vec<&ControllerInfo> = rows.iter().filter_map(|r| r.info.as_ref().ok()).collect();
    // The primary: a node that says it is, in the highest term any node reports.
    let top_term = answered.iter().map(|i| i.term).max().unwrap_or(0);
    let primary = answered
        .iter()
        .filter(|i| i.role == ControllerRole::Primary && i.term == top_term)
        .max_by_key(|i| i.term)
        .copied();
    let head_index = primary.map(|p| p.last_log_index);
    out.push_str(&format!(
        "{:<24} {:>3} {:<12} {:>6} {:>10} {:>10} {:>10} {:>8} {:>12}\n",
        "MASTER", "ID", "ROLE", "TERM", "LOG", "COMMIT", "APPLIED", "LAG", "LAST-CONTACT"
    ));
    for r in rows {
        match &r.info {
            Ok(i) => {
                let lag = head_index.map_or("-".to_string(), |h| {
                    h.saturating_sub(i.applied_index).to_string()
                });
                let contact = match i.last_contact_ms {
                    ms if ms < 0 => "-".to_string(),
                    ms => format!("{ms} ms"),
                };
                out.push_str(&format!(
                    "{:<24} {:>3} {:<12} {:>6} {:>10} {:>10} {:>10} {:>8} {:>12}\n",
                    r.addr,
                    i.id,
                    role(i.role),
                    i.term,
                    i.last_log_index,
                    i.committed_index,
                    i.applied_index,
                    lag,
                    contact
                ));
            }
            Err(e) => out.push_str(&format!("{:<24} unreachable: {e}\n", r.addr)),
        }
    }
    let n = rows.len();
    let majority = n / 2 + 1;
    let ok = match primary {
        Some(p) => {
            out.push_str(&format!(
                "primary: node {} ({}:{}), term {}; {} of {n} members answer\n",
                p.id,
                p.primary_host,
                p.primary_port,
                p.term,
                answered.len()
            ));
            if answered.len() < majority {
                out.push_str(&format!(
                    "warning: only {} of {n} answer here; a majority ({majority}) is needed\n",
                    answered.len()
                ));
            }
            true
        }
        None => {
            out.push_str(&format!(
                "NO QUORUM: no primary ({} of {n} members answer, a majority of {majority} is \
                 needed to elect one); writes and reads fail until it is back\n",
                answered.len()
            ));
            false
        }
    };
    render_health(rows, primary, check, &mut out);
    (out, ok)
}

/// Runs the command: prints the table; exit status 0 with a primary, 1 without.
pub fn status(args: StatusArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("status: runtime: {e}");
            return 1;
        }
    };
    let caller = Arc::new(Caller {
        tls: match &args.tls {
            None => None,
            Some((ca, identity)) => match client_connector(ca, identity.as_ref()) {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("status: TLS files: {e}");
                    return 2;
                }
            },
        },
        token: args.token.clone(),
    });
    let (rows, check) = rt.block_on(async {
        let asks = args
            .masters
            .iter()
            .map(|a| ask(a.clone(), args.timeout, caller.clone()));
        let answers = futures_join(asks.collect()).await;
        let mut rows = args
            .masters
            .iter()
            .zip(answers)
            .map(|(a, info)| Row {
                addr: a.clone(),
                info,
            })
            .collect::<Vec<_>>();
        // Members the primary knows that the list left out are shown (and counted) too.
        let primary = rows.iter().find(|r| {
            r.info
                .as_ref()
                .is_ok_and(|i| i.role == ControllerRole::Primary)
        });
        let mut check = None;
        if let Some(p) = primary {
            // C19: the primary compares its members' state digests now.
            check = Some(
                match request(p.addr.clone(), Op::ConsistencyCheck, args.timeout, &caller).await {
                    Ok(ReplyData::CtrlInfo(i)) => Ok(i),
                    Ok(_) => Err("an answer without controller info".to_string()),
                    Err(e) => Err(e),
                },
            );
            let known: Vec<String> = rows.iter().map(|r| r.addr.clone()).collect();
            let missing: Vec<String> = members(p.addr.clone(), args.timeout, &caller)
                .await
                .into_iter()
                .filter(|m| !known.contains(m))
                .collect();
            let answers = futures_join(
                missing
                    .iter()
                    .map(|a| ask(a.clone(), args.timeout, caller.clone()))
                    .collect(),
            )
            .await;
            rows.extend(
                missing
                    .into_iter()
                    .zip(answers)
                    .map(|(addr, info)| Row { addr, info }),
            );
        }
        (rows, check)
    });
    let (text, ok) = render(&rows, check.as_ref());
    print!("{text}");
    if ok {
        0
    } else {
        1
    }
}

/// Awaits all `futs` concurrently (each is bounded by its own timeout).
async fn futures_join<F: std::future::Future + Send + 'static>(futs: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("status task"));
    }
    out
}
