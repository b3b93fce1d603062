//! The commit this controller is built from, for `xce_build_info` and `status` (issue 26):
//! `git rev-parse` when the source is a git checkout and git is installed, else "unknown".
//! Never the network.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    let commit = std::env::var("XCE_BUILD_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=XCE_BUILD_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=XCE_BUILD_COMMIT");
    // Rebuilt when HEAD moves (a checkout, a commit): HEAD itself and the ref it names.
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
