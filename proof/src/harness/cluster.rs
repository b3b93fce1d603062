//! A local cluster of real `xce-controller` processes on loopback, for scenarios, benchmarks
//! and the demo: the test kit's runner (`testkit/src/cluster.rs`, shared with the
//! controller's tests) and its raw wire questions (`testkit/src/wire.rs`), and the build of
//! the controller the commands run.

use std::process::Command;

pub use xce_testkit::cluster::{
    cluster_spec, controller_bin, kill_nodes_with_this_process, master_list, settle, Cluster,
    ClusterOpts, Node, PAUSE_TAKES_EFFECT,
};
pub use xce_testkit::wire::{immediate_wait_primary, probe, probe_info, raw_call, request_frame};

/// Builds the controller in this crate's profile (unless `XCE_CONTROLLER` names one), so that
/// a command of this crate never measures a stale one. With failpoints (the controller's
/// feature `failpoints`, docs/controller.md): the scenarios and the nemesis inject faults
/// through them, and the binary is then the one the controller's own tests run (their
/// dev-dependency turns the feature on), so neither build replaces the other's with a
/// different one. A release build of the workspace (`cargo build --release`) has none.
///
/// For the commands (`xce-bench`, `xce-nemesis`, …), never from a test: a `cargo build` during
/// `cargo test` resolves features for `-p xce-controller` alone and rewrites
/// `target/debug/deps/libxce.rlib` — the library is also a cdylib, so its rlib has no hash in
/// its name — and the outer run's doctests then link crates built against the other one
/// (rustdoc: E0463 "can't find crate for xce_testkit"; reproduced by a test that only calls
/// this, followed by the doctests).
pub fn build_controller() -> Result<(), String> {
    if std::env::var_os("XCE_CONTROLLER").is_some() {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "build",
            "--quiet",
            "-p",
            "xce-controller",
            "--features",
            "xce-controller/failpoints",
        ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    match cmd.status() {
        Ok(st) if st.success() => Ok(()),
        Ok(st) => Err(format!("cargo build -p xce-controller: {st}")),
        Err(e) => Err(format!("cargo build -p xce-controller: {e}")),
    }
}
