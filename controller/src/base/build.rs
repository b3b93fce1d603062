//! What this binary is (issue 26, C18 amended): its version, the commit it was built from
//! (`controller/build.rs`: git if available, else "unknown"), and how long this process has
//! run — in `status` (`ControllerInfo.version`, `uptimeMs`), `xce_build_info` and `/health`.

use std::sync::OnceLock;
use std::time::Instant;

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit built ("unknown" outside a git checkout).
pub const COMMIT: &str = env!("XCE_BUILD_COMMIT");

static STARTED: OnceLock<Instant> = OnceLock::new();

/// Marks the process start (called first thing by `main`); later calls change nothing.
pub fn mark_start() {
    STARTED.get_or_init(Instant::now);
}

/// Milliseconds since [`mark_start`].
pub fn uptime_ms() -> u64 {
    STARTED.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The version as `status` shows it: `VERSION+COMMIT` (semver build metadata).
pub fn version() -> String {
    format!("{VERSION}+{COMMIT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_carries_the_commit() {
        assert!(version().starts_with(VERSION));
        assert!(version().ends_with(COMMIT));
        assert!(!COMMIT.is_empty());
        mark_start();
        let a = uptime_ms();
        assert!(uptime_ms() >= a);
    }
}
