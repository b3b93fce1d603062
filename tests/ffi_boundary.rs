//! style.md: "A test checks that no export lacks the boundary". Scans src/ffi/*.rs: every
//! `pub extern "C" fn` must be `#[no_mangle]` and its body must start with
//! `ffi_panic_boundary!`, and no `#[no_mangle]` may appear outside src/ffi/.

use std::path::Path;

mod common;

/// The text of the function body following the signature that starts at `start`.
fn body_after(src: &str, start: usize) -> &str {
    let open = start + src[start..].find('{').expect("fn without body");
    src[open + 1..].trim_start()
}

#[test]
fn every_export_starts_with_the_panic_boundary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = common::files(&root.join("src/ffi"), &["rs"]);
    let mut exports = 0;
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for (at, _) in src.match_indices("pub extern \"C\" fn ") {
            exports += 1;
            let name: String = src[at + 18..]
                .chars()
                .take_while(|c| *c == '_' || c.is_alphanumeric())
                .collect();
            let before = &src[..at];
            let attr_ok = before.trim_end().ends_with("#[no_mangle]");
            let body = body_after(&src, at);
            let expected = format!("ffi_panic_boundary! {{ \"{name}\",");
            if !attr_ok || !body.starts_with(&expected) {
                bad.push(format!("{}: {name}", f.display()));
            }
        }
        // extern "C" fns that are not `pub extern "C" fn` would escape the scan above.
        // (Callback types are `extern "C" fn(`, without a name, and are not matched.)
        let others =
            src.matches("extern \"C\" fn ").count() - src.matches("pub extern \"C\" fn ").count();
        assert_eq!(
            others,
            0,
            "{}: an extern \"C\" fn that is not a plain pub export",
            f.display()
        );
    }
    assert!(
        exports >= 50,
        "only {exports} exports found: is the scan broken?"
    );
    assert!(
        bad.is_empty(),
        "exports without #[no_mangle] + panic boundary first: {bad:#?}"
    );

    let all = common::files(&root.join("src"), &["rs"]);
    for f in all.iter().filter(|f| !f.starts_with(root.join("src/ffi"))) {
        let src = std::fs::read_to_string(f).unwrap();
        assert!(
            !src.contains("#[no_mangle]"),
            "{}: #[no_mangle] outside src/ffi",
            f.display()
        );
    }
}

#[test]
fn header_version_defines_match_cargo_toml() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let h = std::fs::read_to_string(root.join("include/xce/xce.h")).unwrap();
    for (name, want) in [
        ("XCE_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("XCE_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("XCE_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        assert!(
            h.contains(&format!("#define {name} {want}\n")),
            "{name} in xce.h is not {want}"
        );
    }
    for (code, name) in xce_proto::error::XCE_CODES {
        assert!(
            h.contains(&format!("#define {name} {code}\n")),
            "{name} missing from xce.h"
        );
    }
}
