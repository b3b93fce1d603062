//! The documentation a user reads is in the repository and agrees with the code (issue 11):
//! no reference leaves the repository, every requirement id the header or the README cites is
//! defined in docs/, every relative link resolves, and every environment variable the library
//! reads is in the table of docs/c-api.md. Reads the files as they are at test time, so new
//! references and new variables are checked as they appear.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use xce::testing::ENV_VARS;

mod common;
use common::files;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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

// ---------------------------------------------------------------------------------------------
// ARCHITECTURE.md's paths (issue 28): every backticked thing that looks like a repository path
// (it has a `/`, or ends in .rs .md .c .h .sh .go .toml .capnp; no spaces, not a URL or a Go
// import path) names something that exists, read the way the document writes them:
//
// - A table row, or a paragraph or list item, is read in order; parentheses nest, and a `;`
//   ends the lists of its level (a cell's text is one level inside its row).
// - A path with no folder of its own (`frame.rs`) continues the list of the folder named just
//   before it, at its parenthesis level or an outer one (`src/wire/codec.rs`, `frame.rs`;
//   `controller/src/`: `node.rs`, …; a room of the rooms table is the folder of its
//   description), and must be in that folder itself. With no such folder it is the one file of
//   that name in the row's code — `src/` in the library's rooms and F rows, `controller/src/`
//   in C rows — or else in the tests (`tests/`, `ctests/`, `proof/tests/`,
//   `controller/tests/`).
// - A path with a folder of its own is read from that folder named before it, else from the
//   root (`proof/tests/scenarios.rs`), else as the tail of exactly one file of the row's code or
//   tests (`retry/call.rs`, `transport/conn.rs`).
// - `{a,b}` groups are expanded; `file.rs::item::name` also needs each name in the file.
//
// So a file moved, renamed or split (the controller's, when they move into folders) fails here
// until the document says where it went.

/// The folders whose files a short path may name: the tests of every crate.
const TEST_TREES: &[&str] = &["tests", "ctests", "proof/tests", "controller/tests"];

#[derive(Clone, Copy)]
enum Resolved {
    /// Read from a folder named before it or from the root: a folder for the names after it.
    Named,
    /// The one file of its name in the row's code or tests.
    Found,
}

struct PathReader<'a> {
    root: &'a Path,
    /// The row's code: `src`, `controller/src`, or none.
    code: Option<&'a str>,
    /// Folders named so far, with the parenthesis level each was named at.
    bases: Vec<(usize, PathBuf)>,
    /// Every file under a tree, relative to it (cached).
    trees: BTreeMap<&'a str, Vec<PathBuf>>,
}

impl<'a> PathReader<'a> {
    /// The files of `tree` whose path ends with `written` (as whole components).
    fn tails(&mut self, tree: &'a str, written: &Path) -> Vec<PathBuf> {
        let root = self.root;
        let all = self.trees.entry(tree).or_insert_with(|| {
            let dir = root.join(tree);
            if !dir.is_dir() {
                return vec![];
            }
            files(&dir, &["rs", "md", "c", "h", "sh", "go", "toml", "capnp"])
                .into_iter()
                .map(|p| p.strip_prefix(&dir).unwrap().to_path_buf())
                .collect()
        });
        all.iter()
            .filter(|p| p.ends_with(written))
            .map(|p| Path::new(tree).join(p))
            .collect()
    }

    /// Resolves one path (no braces, no `::item`).
    fn resolve(&mut self, written: &str) -> Result<(PathBuf, Resolved), String> {
        let bare = !written.trim_end_matches('/').contains('/');
        let exists = |p: &Path| {
            if written.ends_with('/') {
                p.is_dir()
            } else {
                p.exists()
            }
        };
        if let Some((_, base)) = self.bases.last() {
            let p = base.join(written);
            if exists(&self.root.join(&p)) {
                return Ok((p, Resolved::Named));
            }
            if bare {
                return Err(format!(
                    "{} does not exist (read in {}/, the folder named just before it)",
                    p.display(),
                    base.display()
                ));
            }
        }
        if exists(&self.root.join(written)) {
            return Ok((PathBuf::from(written), Resolved::Named));
        }
        let groups: Vec<Vec<&'a str>> = self
            .code
            .map(|c| vec![c])
            .into_iter()
            .chain([TEST_TREES.to_vec()])
            .collect();
        for group in groups {
            let found: Vec<PathBuf> = group
                .iter()
                .flat_map(|t| self.tails(t, Path::new(written)))
                .collect();
            match found.len() {
                0 => continue,
                1 => return Ok((found[0].clone(), Resolved::Found)),
                _ => return Err(format!("names more than one file: {found:?}")),
            }
        }
        Err(match self.code {
            Some(c) => format!("not a path from the root, nor a file of {c}/ or the tests"),
            None => "not a path from the root, nor a file of the tests".to_string(),
        })
    }

    /// Checks one backticked path written at parenthesis `level`; updates the folders named.
    fn check(&mut self, token: &str, level: usize) -> Vec<String> {
        let (path, items) = match token.find("::") {
            Some(i) => (&token[..i], token[i + 2..].split("::").collect::<Vec<_>>()),
            None => (token, vec![]),
        };
        let mut problems = Vec::new();
        for written in expand_braces(path) {
            match self.resolve(&written) {
                Ok((p, how)) => {
                    // Folders named at this level or deeper end here; a path read from a
                    // folder or the root is the folder of what follows it.
                    self.bases.retain(|(l, _)| *l < level);
                    if let Resolved::Named = how {
                        let folder = if self.root.join(&p).is_dir() {
                            p.components().collect()
                        } else {
                            p.parent().unwrap().to_path_buf()
                        };
                        self.bases.push((level, folder));
                    }
                    let text = std::fs::read_to_string(self.root.join(&p)).unwrap_or_default();
                    for item in &items {
                        let name = item.trim_end_matches("()");
                        let word = |i: usize| {
                            text[i..].starts_with(name)
                                && !text[..i].ends_with(|c: char| c == '_' || c.is_alphanumeric())
                                && !text[i + name.len()..]
                                    .starts_with(|c: char| c == '_' || c.is_alphanumeric())
                        };
                        if !text.match_indices(name).any(|(i, _)| word(i)) {
                            problems.push(format!("`{token}`: {} has no `{name}`", p.display()));
                        }
                    }
                }
                Err(e) => problems.push(format!("`{token}`: {e}")),
            }
        }
        problems
    }

    /// The lists deeper than `level` end (parentheses closed), or those at `level` too (a `;`).
    fn close(&mut self, level: usize, inclusive: bool) {
        self.bases
            .retain(|(l, _)| *l < level || (*l == level && !inclusive));
    }
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs`.
fn expand_braces(p: &str) -> Vec<String> {
    let (Some(i), Some(j)) = (p.find('{'), p.find('}')) else {
        return vec![p.to_string()];
    };
    p[i + 1..j]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{}{}", &p[..i], alt.trim(), &p[j + 1..])))
        .collect()
}

/// Whether a backticked text looks like a repository path.
fn looks_like_path(t: &str) -> bool {
    let path = t.split("::").next().unwrap();
    if t.is_empty() || t.contains(char::is_whitespace) || t.contains("://") {
        return false;
    }
    if path.contains('/') {
        // a Go import path or a host (`github.com/…`) is not a file of the repository
        return !path.split('/').next().unwrap().contains('.');
    }
    [".rs", ".md", ".c", ".h", ".sh", ".go", ".toml", ".capnp"]
        .iter()
        .any(|e| path.ends_with(e))
}

/// The document cut where a reading starts afresh: each table row, each list item, each
/// paragraph (fenced code left out), with the line each starts on.
fn blocks(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut fenced = false;
    let mut open = false;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if fenced || t.is_empty() || t.starts_with('#') {
            open = false;
            continue;
        }
        let starts = t.starts_with('|') || t.starts_with("- ") || !open;
        if starts {
            out.push((n + 1, String::new()));
        } else {
            out.last_mut().unwrap().1.push(' ');
        }
        out.last_mut().unwrap().1.push_str(t);
        open = !t.starts_with('|');
    }
    out
}

/// The code a table row's short paths name: the library's rooms and F rows `src/`, C rows
/// `controller/src/`.
fn code_of(block: &str) -> Option<&'static str> {
    let first = block.trim_start_matches('|').trim_start();
    let id = |c: char| first.starts_with(c) && first[1..].starts_with(|d: char| d.is_ascii_digit());
    if !block.starts_with('|') {
        None
    } else if first.starts_with("`src/") || id('F') {
        Some("src")
    } else if first.starts_with("`controller/src") || id('C') {
        Some("controller/src")
    } else {
        None
    }
}

/// The problems of `text` (ARCHITECTURE.md) against the files under `root`.
fn architecture_path_problems(root: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, block) in blocks(text) {
        let mut reader = PathReader {
            root,
            code: code_of(&block),
            bases: Vec::new(),
            trees: BTreeMap::new(),
        };
        let mut level: usize = 0;
        let mut rest = block.as_str();
        while let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
            match c {
                '(' => level += 1,
                ')' => {
                    level = level.saturating_sub(1);
                    reader.close(level, false);
                }
                ';' => reader.close(level, true),
                '|' => {
                    // A cell's text is one level inside its row: the folders of earlier cells
                    // (a room's own path) stay for the cells after, whatever a `;` ends.
                    level = 1;
                    reader.close(1, false);
                    for b in &mut reader.bases {
                        b.0 = 0;
                    }
                }
                '`' => {
                    let end = rest.find('`').unwrap_or(rest.len());
                    let token = &rest[..end];
                    rest = rest.get(end + 1..).unwrap_or("");
                    if looks_like_path(token) {
                        for p in reader.check(token, level) {
                            problems.push(format!("ARCHITECTURE.md:{line}: {p}"));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    problems
}

#[test]
fn every_path_architecture_md_names_exists() {
    let r = root();
    let problems = architecture_path_problems(&r, &read(&r.join("ARCHITECTURE.md")));
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md names paths that are not there (see tests/docs_refs.rs for how a \
         path is read):\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_wrong_path_in_architecture_md_is_named() {
    let r = root();
    let of = |text: &str| architecture_path_problems(&r, text);
    // A list continues its folder; a name not in it fails there.
    let p = of("intro\n\n| `proto/src/wire/codec.rs`, `frame.rs`, `msg.rs::Op`, `gone.rs` | x |\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("ARCHITECTURE.md:3: `gone.rs`: proto/src/wire/gone.rs"),
        "{p:?}"
    );
    // A controller file moved out of the folder its row names.
    let p =
        of("| C1 | `controller/src/raft/`: `elect.rs`, `store.rs` (`x`; y), `moved.rs` | t |\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("controller/src/raft/moved.rs does not exist"),
        "{p:?}"
    );
    // A short name is the one file of its name in the row's code (`src/` for F rows)…
    assert!(of(
        "| F1 | `rotate.rs`, `retry/call.rs`, `process/{fork,waits}.rs` | `loop_edges.rs` |"
    )
    .is_empty());
    // …not one of the controller's, nor an ambiguous one, nor one that is not there.
    let p = of("| F1 | `elect.rs`, `mod.rs`, `process/{fork,nofork}.rs` | |\n");
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].contains("`elect.rs`: not a path from the root, nor a file of src/"));
    assert!(p[1].contains("`mod.rs`: names more than one file"), "{p:?}");
    assert!(p[2].contains("`process/{fork,nofork}.rs`"), "{p:?}");
    // An item named after the file must be in it.
    let p = of("| F1 | `retry/probe.rs::no_such_fn` | |\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("has no `no_such_fn`"), "{p:?}");
    // Parentheses and `;` end a list: the names after them are read afresh.
    assert!(
        of("- `proof/` (`tests/`), `src/harness/cluster.rs`; `fuzz/`, `docs/c-api.md`\n")
            .is_empty()
    );
    // A room's path is the folder of its description, across a `;` there.
    assert!(of("| `src/ffi/` | `panic.rs`; `cast.rs` (`log.rs`) |\n").is_empty());
    // Not paths: a Go import path, a command with spaces.
    assert!(of("- `github.com/x/y` and `member add/remove`\n").is_empty());
}
