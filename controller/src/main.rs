//! `xce-controller`: the reference HA controller of libxce (controller.md C1–C9).
//!
//! A real 3-node (1..8) controller on openraft: the Raft leader is the primary; the job store
//! is the replicated state machine.
//!
//! `xce-controller run …` runs one node, `xce-controller cluster …` a loopback cluster;
//! `xce-controller --help` and `COMMAND --help` print the options (the texts below). This file
//! only dispatches the command line; everything else is in six folders (the map:
//! ARCHITECTURE.md, "The controller").
//!
//! Folders, each importing only the ones before it (`tests/module_order.rs` checks this order,
//! and that no files import each other in a circle): `base` → `sm` (the state machine) →
//! `raft` → `node` → `ports` → `cmd`.

mod base;
mod cmd;
mod node;
mod ports;
mod raft;
mod sm;

use base::{config, logstamp};
use cmd::{cluster, leader, member, pki, run, snapshot, status};

const USAGE: &str = "\
usage: xce-controller COMMAND [OPTIONS]

The reference HA controller of libxce (docs/controller.md).

commands:
  run       run one node of a cluster
  cluster   start an N-node cluster on loopback in one directory (Ctrl-C stops it)
  pki       make a cluster's CA, node certificates, client identities and tokens
  status    the cluster at a glance and a health check: each member for itself; exit 0 healthy,
            1 degraded, 2 no quorum, 3 cannot tell (--json for scripts)
  member    add, remove or list the cluster's members online (admin)
  leader    transfer: hand leadership over to a live, caught-up voter (admin)
  snapshot  save an online backup of a cluster (admin); restore a new cluster from one
  help      this text; `xce-controller help COMMAND` or `COMMAND --help` for a command's options

exit status: 0 on a clean stop, 1 when the node or cluster fails, 2 on a usage error (status:
its own, see `status --help`),
74 when the node stopped for a storage fault (a full or failing disk, C21), 78 when it learned it
was removed from the cluster (member remove)";

const RUN_USAGE: &str = "\
usage: xce-controller run --id N --cluster ID=CLIENT/RAFT,... --data DIR [OPTIONS]
       xce-controller run --config FILE [OPTIONS]

Runs node N of the cluster described by --cluster. Its state (raft log, vote, snapshot) lives
in DIR, so a killed node restarts and rejoins. SIGTERM or SIGINT stops it.

  --config FILE          read the options from a TOML file (docs/operations.md): each key is
                         an option (heartbeat_ms = 20), a table prefixes its keys ([tls] cert),
                         [[member]] entries (id, client, raft) make --cluster; options given
                         on the command line override the file
required (on the command line or in the file):
  --id N                 this node's id (a member of --cluster)
  --cluster SPEC         every member: ID=CLIENT_ADDR/RAFT_ADDR, comma-separated (1..8 nodes),
                         e.g. 1=127.0.0.1:9991/127.0.0.1:10991,2=127.0.0.1:9992/127.0.0.1:10992;
                         an address is IP:PORT, [IPv6]:PORT or HOSTNAME:PORT. Once DIR holds
                         a membership, that one is used (members added or removed online);
                         a member's address that differs from it is refused
  --data DIR             this node's data directory (created if missing)
  --join                 a new node of a running cluster: never initialise a cluster, wait
                         uninitialised until `xce-controller member add` adds it (keep it on
                         its command line). --cluster names this node and, with --tls-peer-ca,
                         the current members (their certificates are accepted before the
                         first append)
security (docs/security.md; `xce-controller pki` makes the files):
  --tls-cert FILE        this node's certificate chain (PEM), for both ports; needs --tls-key.
                         Peers check that it names xce-node-ID (pki node does that)
  --tls-key FILE         its private key (PEM)
  --tls-client-ca FILE   clients must present a certificate this CA (bundle) signed; its name
                         says the caller's role: admin, scheduler, worker-HOST, user-NAME
  --token-key FILE       accept tokens (pki token) signed with this key from callers without
                         a certificate. With --tls-client-ca or --token-key every op checks
                         the caller's role; with neither, every caller is admin
  --tls-peer-ca FILE     mutual TLS on the raft port: peers must present a certificate this CA
                         (bundle) signed that names a member (xce-node-ID)
  --insecure             allow plaintext, or TLS without a way to check callers, on an address
                         that is not loopback (refused otherwise: judged on the address bound,
                         so a name that resolves off loopback counts as off loopback)
timing and limits:
  --heartbeat-ms N       leader heartbeat interval (default 20)
  --election-min-ms N    election timeout, lower bound (default 60; > heartbeat)
  --election-max-ms N    election timeout, upper bound and leader lease (default 120;
                         > election-min)
  --election-ceiling-ms N  on a slow or congested link the lease and the election timeout
                         stretch to fit the measured silences, up to this (default 2000)
  --early-campaign on|off  campaign when the lease lapses after the primary's connection
                         closed (a crashed primary), not a random timeout later (default on)
  --host-timeout-ms N    a worker silent this long is UNAVAIL (default 30000)
  --idle-timeout-ms N    an idle client connection is closed after this (default 600000)
  --max-connections N    concurrent authenticated client connections (default 1024); besides
                         them, at most 64 unauthenticated ones (in their TLS handshake, 3 s at
                         most, or anonymous, 10 s at most), the oldest closed for a newcomer
  --snapshot-logs N      a snapshot once this many writes were applied since the last one
                         (default 1000) and the log grew by half the last snapshot's size
  --log-keep N           log entries kept behind a snapshot at most, for lagging followers
                         (default 20000; never more than half the snapshot's size)
  --quota-bytes SIZE     C24: past this many bytes in the data directory (every file in it,
                         on disk) the NOSPACE alarm is raised and the primary refuses new work
                         (job submissions, tasks: E_XCE_NOSPACE) while reads, kills and
                         notifications go on (default: half the filesystem, at most 8G;
                         SIZE is bytes, or a number with K, M, G, T)
  --disk-floor-bytes SIZE  the alarm too when the filesystem has less free than this; a node
                         started below it exits 74 at once (default: 1% of the filesystem,
                         at least 32M, at most 256M)
  --cluster-name NAME    reported by clusterconf (default xce)
  --consistency-check-ms N  the primary compares its members' state digests this often
                         (default 2000; at least 20 times the time one digest takes; 0: only
                         when status or snapshot save asks); a member whose state differs from
                         the majority's stops voting and serving (docs/operations.md)
observability:
  --log-level LEVEL      error, warn, info (default) or debug: lines below it are not written
  --log-format FORMAT    text (default: TIME [LEVEL] node N: text) or json (one object a line:
                         ts, level, source, msg)
  --log-file PATH        append the lines to PATH instead of stderr (under systemd stderr is
                         the journal)
  --metrics ADDR         serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100)
                         and a health check at http://ADDR/health (200 or 503, JSON)
  --metrics-public       allow --metrics on an address that is not loopback: the endpoint is
                         plaintext HTTP without authentication (firewall it)
Options take their value as the next argument or as --flag=value.";

const STATUS_USAGE: &str = "\
usage: xce-controller status --masters HOST:PORT,... [--json] [--timeout-ms N]
                             [--ca F --cert F --key F] [--token T]

A health check (C18): asks every master at once, each answering for itself, then every member
LIST left out (the member set comes from the members: one node is enough), and prints one line
per member, counted once by its id whatever names reached it: role, Raft term, the leader it
follows, last log, commit and applied index, lag behind the primary (entries it has yet to
apply), last contact (a standby: since its leader's last append; the primary: since a quorum
last answered it), uptime and version. Then the primary (or NO QUORUM), anything wrong (a
member that does not answer or does not follow, a learner, two primaries, a node of another
cluster, TLS failures by name), the cluster's id, a consistency check the primary runs (C19)
and every alarm a member reports; last the verdict.

exit status (the verdict; a monitor can use it):
  0  healthy: a primary serves, every member answers and follows it, no alarm
  1  degraded: a primary serves with a quorum, but a member is down, behind or not following,
     a learner is left, an alarm is raised, or an old primary still says it leads
  2  no quorum: no primary; writes and reads fail until a majority is back
  3  cannot tell: nothing answered (down, network, TLS), the list reaches two clusters, or a
     usage error

  --masters LIST         client addresses of any members, comma-separated (one is enough)
  --json                 print one JSON object instead (fields: docs/operations.md, \"status\")
  --timeout-ms N         bound on asking one master (default 2000)
  --ca FILE, --cert FILE, --key FILE
                         TLS on the client port (docs/security.md): the CA bundle and an
                         identity (any role may ask); default XCE_TLS_CA_FILE,
                         XCE_TLS_CERT_FILE, XCE_TLS_KEY_FILE
  --token TOKEN          a token instead of a certificate (with --ca alone); default
                         XCE_AUTH_TOKEN";

const LEADER_USAGE: &str = "\
usage: xce-controller leader transfer [--to N] --masters LIST [--ca F --cert F --key F] [--token T]

Hands leadership over now (C14's SIGTERM handover on demand: a rolling restart, moving the
primary off a machine) through the primary, found from LIST like any client; admin identity.
The primary refuses at once a target that is not a member, not a voter, has not answered it
recently (stopped, down, cut off) or is not caught up (a second to catch up); then it commits a
handover entry naming it, the target campaigns, and clients follow the new primary (writes in
flight are answered by it). Without --to the primary picks the most caught-up voter among those
that answered it recently. Exit status 0 when node N (without --to: another voter) is primary
afterwards, 1 when refused or not confirmed within 5 s (the reason printed), 2 on a usage error.

  --to N                 the voter to hand over to
  --masters LIST         client addresses of any members, comma-separated
  --ca FILE, --cert FILE, --key FILE, --token TOKEN
                         as for status (default XCE_TLS_CA_FILE, XCE_TLS_CERT_FILE,
                         XCE_TLS_KEY_FILE, XCE_AUTH_TOKEN)";

const MEMBER_USAGE: &str = "\
usage: xce-controller member add ID=CLIENT/RAFT --masters LIST [--ca F --cert F --key F] [--token T]
       xce-controller member remove ID --masters LIST [...]
       xce-controller member list --masters LIST [...]

Changes the cluster's membership online (docs/operations.md, \"Replace a dead machine\"),
through the primary (found from LIST like any client). add and remove need the admin
identity; list any identity.

  add ID=CLIENT/RAFT     add node ID at these addresses. Start it first with
                         `xce-controller run --id ID --cluster ... --data DIR --join`: the
                         primary asks it who it is and refuses at once (within 5 s, nothing
                         changed) unless it is node ID, blank, of no other cluster; then it is
                         a learner until it has caught up with the log, then a voter (returns
                         then); a learner that does not catch up is taken out again
  remove ID              remove node ID (alive or dead); the primary removing itself hands
                         leadership over first. The last voter cannot be removed; a removed
                         node that runs again exits with status 78
  list                   one line per member: id, client address, primary / voter / learner,
                         reachable or unreachable (why), lag behind the primary. Any member
                         answers (a standby too)

  --masters LIST         the controllers' client addresses, comma-separated
  --ca FILE, --cert FILE, --key FILE
                         TLS on the client port (docs/security.md): the CA bundle and an
                         identity; default XCE_TLS_CA_FILE, XCE_TLS_CERT_FILE, XCE_TLS_KEY_FILE
  --token TOKEN          a token instead of a certificate (with --ca alone); default
                         XCE_AUTH_TOKEN
exit status: 0 on success, 1 on a failure (printed with its status), 2 on a usage error";

const CLUSTER_USAGE: &str = "\
usage: xce-controller cluster --data DIR [--nodes N] [--base-port P] [--tls CERTDIR] [node options]

Starts N nodes (1..8, default 3) on 127.0.0.1: node i listens for clients on P+i-1, for
raft on P+i-1+1000 and serves its metrics on http://127.0.0.1:P+i-1+2000/metrics (default
P 9991), each with its data in DIR/node-i. Prints `node I client=ADDR pid=PID` and
`metrics I URL` for each node, `primary I term T` at every change, and when the quorum is lost; Ctrl-C (or SIGTERM) stops them all. Node log lines
(stderr) carry the UTC time and the node's label.
Node options are those of `xce-controller run --help` except --id, --cluster, --config,
--metrics, --token-key and the --tls-* options.
With --tls CERTDIR every link runs with mutual TLS and callers are checked: the CA, a
certificate per node and the identities admin, scheduler, worker-host1, user-alice and user-bob
(CERTDIR/NAME.pem + .key) and a token key are made there first (kept if present).";

fn main() {
    base::build::mark_start();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wants_help = |rest: &[String]| rest.iter().any(|a| a == "-h" || a == "--help");
    let code = match args.first().map(String::as_str) {
        Some("run") if wants_help(&args[1..]) => help(RUN_USAGE),
        Some("cluster") if wants_help(&args[1..]) => help(CLUSTER_USAGE),
        Some("pki") if wants_help(&args[1..]) => help(pki::USAGE),
        Some("pki") => pki::main(&args[1..]),
        Some("run") => match config::RunArgs::parse(&args[1..]) {
            Ok(a) => {
                let stamper =
                    logstamp::install_with(&format!("node {}:", a.id), a.opts.log.clone());
                // C21 (issue 39): a panic on any thread ends the node (exit 70).
                base::crash::install();
                let code = run::run(a);
                if let Some(s) = stamper {
                    s.finish();
                }
                code
            }
            // Issue 26: an error in a config file names its key and line, without the usage.
            Err(e)
                if args
                    .iter()
                    .any(|a| a == "--config" || a.starts_with("--config=")) =>
            {
                eprintln!("xce-controller run: {e} (see `xce-controller run --help`)");
                2
            }
            Err(e) => usage_error(&e, RUN_USAGE),
        },
        Some("status") if wants_help(&args[1..]) => help(STATUS_USAGE),
        Some("status") => match status::StatusArgs::parse(&args[1..]) {
            Ok(a) => status::status(a),
            // The verdict's codes are 0-2: a usage error is "cannot tell".
            Err(e) => usage_error(&e, STATUS_USAGE).max(status::Health::CannotTell as i32),
        },
        Some("snapshot") if wants_help(&args[1..]) => help(snapshot::USAGE),
        Some("snapshot") => match snapshot::SnapshotArgs::parse(&args[1..]) {
            Ok(a) => snapshot::snapshot(a),
            Err(e) => usage_error(&e, snapshot::USAGE),
        },
        Some("leader") if wants_help(&args[1..]) => help(LEADER_USAGE),
        Some("leader") => match leader::LeaderArgs::parse(&args[1..]) {
            Ok(a) => leader::leader(a),
            Err(e) => usage_error(&e, LEADER_USAGE),
        },
        Some("member") if wants_help(&args[1..]) => help(MEMBER_USAGE),
        Some("member") => match member::MemberArgs::parse(&args[1..]) {
            Ok(a) => member::member(a),
            Err(e) => usage_error(&e, MEMBER_USAGE),
        },
        Some("cluster") => match config::ClusterArgs::parse(&args[1..]) {
            Ok(a) => cluster::cluster(a),
            Err(e) => usage_error(&e, CLUSTER_USAGE),
        },
        Some("-h" | "--help" | "help") => match args.get(1).map(String::as_str) {
            None => help(USAGE),
            Some("run") => help(RUN_USAGE),
            Some("cluster") => help(CLUSTER_USAGE),
            Some("pki") => help(pki::USAGE),
            Some("status") => help(STATUS_USAGE),
            Some("member") => help(MEMBER_USAGE),
            Some("leader") => help(LEADER_USAGE),
            Some("snapshot") => help(snapshot::USAGE),
            Some(other) => usage_error(&format!("no command {other:?}"), USAGE),
        },
        Some("-V" | "--version" | "version") => {
            println!("xce-controller {}", base::build::version());
            0
        }
        Some(other) => usage_error(&format!("unknown command {other:?}"), USAGE),
        None => usage_error("missing command", USAGE),
    };
    std::process::exit(code);
}

fn help(text: &str) -> i32 {
    println!("{text}");
    0
}

fn usage_error(e: &str, usage: &str) -> i32 {
    eprintln!("xce-controller: {e}\n{usage}");
    2
}
