//! The commands: `run` (one node), `cluster`, `pki`, `member`, `leader`, `status`, `snapshot`,
//! and what the tools share: a runtime on their thread, their exit status.

pub mod cluster;
pub mod leader;
pub mod member;
pub mod pki;
pub mod run;
pub mod snapshot;
pub mod status;

/// A tool's exit status: 0, or 1 with the failure printed as `SAYS: why`.
pub(crate) fn exit_status(says: &str, res: Result<(), String>) -> i32 {
    res.map_or_else(
        |why| {
            eprintln!("{says}: {why}");
            1
        },
        |()| 0,
    )
}

/// Runs `work` to its end on a runtime of this thread (the tools' one way into async code).
pub(crate) fn block_on<F: std::future::Future>(work: F) -> Result<F::Output, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    Ok(rt.block_on(work))
}
