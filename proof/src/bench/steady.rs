//! A steady cluster for the benchmarks that do not break it (P1, P2, P8): three controllers, a
//! primary, ten jobs; library contexts of the default policy; the frames the library sends;
//! one bare attempt on the library's own transport connection, without the failover loop.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Options, XCE_RETRY_DEFAULTS};
use xce::testing::{Connection, WakeState};
use xce_proto::wire::{
    self, Hello, JobFilter, JobSpec, Limits, Op, Reply, ReplyData, Request, PROTOCOL_VERSION,
};

use super::BenchOpts;
use crate::Cluster;

/// The `client_name` every bench context sends in `hello`.
pub const CLIENT_NAME: &str = "xce-bench";
/// Jobs in the P1/P2 `joblist`.
pub const JOBLIST_JOBS: usize = 10;
/// Bound of every single socket wait in this module.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A running cluster with its primary and the jobs P1/P2 list.
pub struct Steady {
    pub cluster: Cluster,
    pub primary: SocketAddr,
}

/// Starts 3 controllers, waits for a primary, submits [`JOBLIST_JOBS`] jobs.
pub fn start_steady(opts: &BenchOpts) -> Result<Steady, String> {
    let (cluster, id) = opts.start_cluster()?;
    let primary = cluster.node(id).client;
    let c = lib_client(&cluster.masters())?;
    for i in 0..JOBLIST_JOBS {
        c.jobsubmit(JobSpec {
            name: format!("bench-{i}"),
            user: "bench".into(),
            command: "/bin/true".into(),
            ncpus: 1,
            mem_mb: 64,
            ..Default::default()
        })
        .map_err(|e| format!("jobsubmit: {e}"))?;
    }
    Ok(Steady { cluster, primary })
}

/// A context over `masters` named `name`, as an application starts one (`Client::start`: the
/// environment's overrides apply).
pub fn named_client(masters: &str, name: &str) -> Result<Client, String> {
    let mut cfg = Config::new(xce::client::parse_masters(masters).map_err(|e| e.to_string())?);
    cfg.client_name = name.into();
    Client::start(cfg).map_err(|e| format!("client {name}: {e}"))
}

/// A library context with the default policy (environment overrides ignored).
pub fn lib_client(masters: &str) -> Result<Client, String> {
    let masters = xce::client::parse_masters(masters).map_err(|e| format!("masters: {e}"))?;
    let mut cfg = Config::new(masters);
    cfg.client_name = CLIENT_NAME.into();
    Client::start_with(cfg, Options::default(), XCE_RETRY_DEFAULTS)
        .map_err(|e| format!("start client: {e}"))
}

pub fn hello_op() -> Op {
    Op::Hello(Hello {
        client_name: CLIENT_NAME.into(),
        protocol_version: PROTOCOL_VERSION,
    })
}

pub fn joblist_op() -> Op {
    Op::JobList(JobFilter::default())
}

/// The framed request the library sends for `op` (a read: request id 0).
pub(crate) fn request_frame(op: Op) -> Vec<u8> {
    crate::harness::cluster::request_frame(1, [7; 16], op)
}

/// Sends `frame` to `addr` raw and returns the reply frame as received.
pub(crate) fn reply_frame(addr: SocketAddr, frame: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(frame).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    wire::read_frame(&mut s, &Limits::default(), &mut buf).map_err(|e| e.to_string())?;
    let r = wire::decode_reply(&buf, &Limits::default()).map_err(|e| e.to_string())?;
    if r.status < 0 {
        return Err(format!("reply status {}", r.status));
    }
    Ok(buf)
}

/// One single attempt without the loop: the library's own transport connection, used directly
/// (with the descriptor check every attempt makes, F21: it is transport hygiene, not failover).
pub struct Direct {
    conn: Connection,
    wake: WakeState,
    seq: u64,
}

impl Direct {
    pub fn connect(addr: SocketAddr) -> Result<Direct, String> {
        let wake = WakeState::new();
        let conn = Connection::connect(
            &addr.ip().to_string(),
            addr.port(),
            None,
            Limits::default(),
            Instant::now() + IO_TIMEOUT,
            &wake.waker_now(),
        )
        .map_err(|e| e.to_string())?;
        Ok(Direct { conn, wake, seq: 0 })
    }

    /// send + recv of `op`; the reply must be a success.
    pub fn call(&mut self, op: Op) -> Result<Reply, String> {
        self.seq += 1;
        let req = Request {
            seq: self.seq,
            client_id: [7; 16],
            request_id: 0,
            no_reply: false,
            op,
            auth_token: String::new(),
            forward_within_ms: 0,
        };
        let until = Instant::now() + IO_TIMEOUT;
        if !self.conn.usable() {
            return Err("connection unusable".into());
        }
        let waker = self.wake.waker_now();
        self.conn
            .send(&req, until, &waker)
            .map_err(|e| e.to_string())?;
        let r = self
            .conn
            .recv(self.seq, until, &waker)
            .map_err(|e| e.to_string())?;
        if r.status < 0 {
            return Err(format!("status {}", r.status));
        }
        Ok(r)
    }
}

pub(crate) fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<Duration, String> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

pub(crate) fn lib_hello(c: &Client) -> Result<(), String> {
    c.hello().map(drop).map_err(|e| format!("hello: {e}"))
}

pub(crate) fn lib_joblist(c: &Client) -> Result<(), String> {
    match c.joblist(JobFilter::default()) {
        Ok(v) if v.len() == JOBLIST_JOBS => Ok(()),
        Ok(v) => Err(format!(
            "joblist returned {} jobs, want {JOBLIST_JOBS}",
            v.len()
        )),
        Err(e) => Err(format!("joblist: {e}")),
    }
}

pub(crate) fn direct_hello(d: &mut Direct) -> Result<(), String> {
    match d.call(hello_op())?.data {
        ReplyData::CtrlInfo(_) => Ok(()),
        _ => Err("hello: unexpected payload".into()),
    }
}

pub(crate) fn direct_joblist(d: &mut Direct) -> Result<(), String> {
    match d.call(joblist_op())?.data {
        ReplyData::Jobs(v) if v.len() == JOBLIST_JOBS => Ok(()),
        _ => Err("joblist: unexpected payload".into()),
    }
}
