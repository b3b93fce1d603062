//! The documentation a user reads is in the repository and agrees with the code (issue 11):
//! no reference leaves the repository, every requirement id the header or the README cites is
//! defined in docs/, every relative link resolves, and every environment variable the library
//! reads is in the table of docs/c-api.md. Reads the files as they are at test time, so new
//! references and new variables are checked as they appear.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use xce::failover::options::ENV_VARS;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every file under `dir` (recursively) with one of these extensions.
fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if exts.iter().any(|x| p.extension().is_some_and(|e| e == *x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The user-facing documents: README, CHANGELOG, docs/ and the header.
fn user_docs() -> Vec<PathBuf> {
    let r = root();
    let mut v = vec![r.join("README.md"), r.join("CHANGELOG.md")];
    v.extend(files(&r.join("docs"), &["md", "1"]));
    v.extend(files(&r.join("include"), &["h"]));
    v
}

/// Ids like `F12`, `C3`, `S10`, `P7` in `text`, with the letter in `letters`.
fn ids(text: &str, letters: &[char]) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    for (i, &c) in b.iter().enumerate() {
        let starts = letters.contains(&(c as char))
            && (i == 0 || !(b[i - 1] as char).is_ascii_alphanumeric())
            && b.get(i + 1).is_some_and(|d| d.is_ascii_digit());
        if !starts {
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j < b.len() && (b[j] as char).is_ascii_alphanumeric() {
            continue; // part of a longer word ("C11" ok, "F1x" not an id)
        }
        out.insert(text[i..j].to_string());
    }
    out
}

#[test]
fn nothing_points_outside_the_repository() {
    for f in user_docs() {
        let text = read(&f);
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains("shared/"),
                "{}:{}: points outside the repository: {line}",
                f.display(),
                n + 1
            );
        }
    }
}

#[test]
fn every_requirement_id_cited_is_defined_in_docs() {
    let r = root();
    // A definition is the bold lead of its paragraph: "**F7 — …**" / "**S3 — …**".
    let defined = |doc: &str| -> BTreeSet<String> {
        read(&r.join("docs").join(doc))
            .lines()
            .filter_map(|l| l.strip_prefix("**"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    };
    let mut known = defined("failover.md");
    known.extend(defined("controller.md"));
    known.extend(defined("acceptance.md"));
    // Benchmarks are rows of the table in acceptance.md: "| P7 | …".
    for l in read(&r.join("docs/acceptance.md")).lines() {
        if let Some(id) = l
            .strip_prefix("| P")
            .and_then(|s| s.split_whitespace().next())
        {
            known.insert(format!("P{id}"));
        }
    }
    for n in 1..=25 {
        assert!(
            known.contains(&format!("F{n}")),
            "F{n} not defined in docs/failover.md"
        );
    }
    for f in [r.join("include/xce/xce.h"), r.join("README.md")] {
        let cited = ids(&read(&f), &['F', 'C', 'S', 'P']);
        let missing: Vec<_> = cited.difference(&known).collect();
        assert!(
            missing.is_empty(),
            "{}: cites undefined {missing:?}",
            f.display()
        );
    }
}

#[test]
fn every_document_the_header_names_exists() {
    let r = root();
    let header = read(&r.join("include/xce/xce.h"));
    // Its requirement ids (F10, …) need a place to be looked up.
    assert!(
        header.contains("docs/failover.md"),
        "the header does not say where its requirement ids are defined"
    );
    for word in header.split(|c: char| c.is_whitespace() || "(),`;".contains(c)) {
        let word = word.trim_end_matches(['.', ':']);
        if let Some(stem) = word.strip_suffix(".md") {
            let p = if stem.contains('/') {
                r.join(word)
            } else {
                r.join("docs").join(word)
            };
            assert!(
                p.is_file(),
                "the header names {word}, which is not in the repository"
            );
        }
    }
}

#[test]
fn relative_links_resolve() {
    for f in user_docs()
        .into_iter()
        .filter(|p| p.extension().unwrap() == "md")
    {
        let text = read(&f);
        let dir = f.parent().unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            assert!(
                dir.join(path).exists(),
                "{}: link to {target} does not resolve",
                f.display()
            );
        }
    }
}

#[test]
fn every_environment_variable_is_in_the_table() {
    let r = root();
    // What the library reads: every "XCE_…" string literal in src/ is a variable name.
    let mut read_by_src = BTreeSet::new();
    for f in files(&r.join("src"), &["rs"]) {
        let text = read(&f);
        let mut rest = text.as_str();
        while let Some(i) = rest.find("\"XCE_") {
            rest = &rest[i + 1..];
            let end = rest.find('"').unwrap();
            read_by_src.insert(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    let listed: BTreeSet<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        read_by_src, listed,
        "options::ENV_VARS must list exactly the variables src/ reads"
    );
    let table = read(&r.join("docs/c-api.md"));
    for v in ENV_VARS {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("| `{v}` |"))),
            "{v} has no row in the table of docs/c-api.md"
        );
    }
}
