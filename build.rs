//! The shared library's soname. (The wire schema is compiled by `proto/build.rs`.)

fn main() {
    // C programs link against libxce.so.0 and keep working across compatible (0.x) rebuilds;
    // scripts/install.sh creates the symlinks.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libxce.so.0");
    }
}
