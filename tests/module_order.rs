//! The module order cannot drift back (issue 28).
//!
//! For each crate of [`CRATES`], every `.rs` file under its source folder is read and the
//! crate's own paths it names are collected: `use` lines, and paths in code that start with
//! `crate::`, `$crate::`, `super::`, `self::`, a module declared in scope or a name a `use`
//! brought in. Comments (doc comments too) and string literals are not code. Each path is
//! resolved, through `use` and `pub use`, to the file that defines what it names. Two rules:
//!
//! 1. **Layers.** The crate root's inner doc comment declares the order once, in a paragraph
//!    that begins with `Layers` (or `Folders`) and chains the top-level modules in backticks:
//!    `` `error` → `wire` → `process` … `` (words in parentheses after a name are a remark).
//!    Every top-level module (a file or a folder) must be in the chain, and a file may name only
//!    its own layer and the layers before it — along the whole way a path resolves (naming a
//!    later layer's re-export of something low is a back-import too). The root file is the top:
//!    it declares the layers and dispatches; no layer uses an item the root itself defines.
//! 2. **Circles.** No files import each other in a circle of more than one file. A module with
//!    modules under it (a folder's `mod.rs`, the crate root) is their common namespace: they
//!    reach its shared items with `super::`, it names them to re-export or call them. Those
//!    edges, between a module's file and the files of its own submodules, are not counted;
//!    every other pair is.
//!
//! A crate is added with one line in [`CRATES`] once its root declares its order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A checked crate: its source folder (from the repository root) and its root file there,
/// whose inner doc comment declares the layers.
struct Crate {
    dir: &'static str,
    root: &'static str,
    /// Circles known and owned by someone else's change, each as the check names its files
    /// (`a.rs, b.rs`); the test fails when one of them is gone, so that it leaves this list.
    known_circles: &'static [&'static str],
}

/// The crates whose module order is checked.
const CRATES: &[Crate] = &[
    Crate {
        dir: "src",
        root: "lib.rs",
        known_circles: &[],
    },
    Crate {
        dir: "controller/src",
        root: "main.rs",
        known_circles: &[],
    },
    Crate {
        dir: "proto/src",
        root: "lib.rs",
        known_circles: &[],
    },
    Crate {
        dir: "proof/src",
        root: "lib.rs",
        known_circles: &[],
    },
];

#[test]
fn every_crate_keeps_its_module_order() {
    let mut problems = Vec::new();
    for c in CRATES {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(c.dir);
        let files = read_sources(&dir);
        assert!(
            files.contains_key(Path::new(c.root)),
            "{}: no {}",
            c.dir,
            c.root
        );
        let mut found = check(c.dir, c.root, &files);
        for known in c.known_circles {
            let named = format!("files import each other in a circle: {known}\n");
            let before = found.len();
            found.retain(|p| !p.starts_with(&named));
            if found.len() == before {
                problems.push(format!(
                    "{}: the known circle {known} is gone: take it out of CRATES",
                    c.dir
                ));
            }
        }
        problems.extend(found);
    }
    assert!(
        problems.is_empty(),
        "the module order is broken:\n{}",
        problems.join("\n")
    );
}

/// The layers of `src/` that may hold `unsafe` (ARCHITECTURE.md: the C surface, and the
/// documented syscalls of transport and process). Every other layer says
/// `#![deny(unsafe_code)]` at its top, so the compiler holds it to the rule.
const UNSAFE_LAYERS: &[&str] = &["process", "transport", "ffi"];

#[test]
fn layers_without_unsafe_are_held_to_it_by_the_compiler() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&dir);
    let mut missing = Vec::new();
    for (path, text) in &files {
        let top = path.iter().count() == 1 && path != Path::new("lib.rs");
        let folder = path.iter().count() == 2 && path.ends_with("mod.rs");
        let layer = path.iter().next().unwrap().to_string_lossy();
        let layer = layer.trim_end_matches(".rs");
        if !(top || folder) || UNSAFE_LAYERS.contains(&layer) {
            continue;
        }
        let said = text.lines().any(|l| {
            let l = l.trim();
            l == "#![deny(unsafe_code)]" || l == "#![forbid(unsafe_code)]"
        });
        if !said {
            missing.push(format!("src/{}", path.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "layers outside {UNSAFE_LAYERS:?} without #![deny(unsafe_code)]: {missing:?}"
    );
}

/// Every `.rs` file under `dir`, by its path relative to `dir` — but `dir/bin/`: Cargo builds
/// each file there as a crate of its own, on top of this one.
fn read_sources(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() && p != dir.join("bin") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text =
                    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), text);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The checker: source texts in, problems out (each naming file and line).

/// The problems of the crate whose sources (relative to `dir`) are `files`, `root` its root file.
fn check(dir: &str, root: &str, files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let order = match declared_layers(&files[Path::new(root)]) {
        Ok(o) => o,
        Err(e) => return vec![format!("{dir}/{root}: {e}")],
    };
    let model = Model::new(root, files);
    let mut problems = Vec::new();

    // The chain names every top-level module, each once, and nothing else.
    let top: BTreeSet<&str> = model
        .files
        .iter()
        .filter_map(|f| f.module.first().map(String::as_str))
        .collect();
    let chain = order.join(" → ");
    for m in &top {
        if !order.iter().any(|l| l == m) {
            problems.push(format!(
                "{dir}/{root}: the top-level module `{m}` is not in the declared order ({chain})"
            ));
        }
    }
    for (i, l) in order.iter().enumerate() {
        if !top.contains(l.as_str()) {
            problems.push(format!(
                "{dir}/{root}: the declared order names `{l}`, which is not a top-level module"
            ));
        }
        if order[..i].contains(l) {
            problems.push(format!(
                "{dir}/{root}: the declared order names `{l}` twice"
            ));
        }
    }
    let rank = |m: &str| order.iter().position(|l| l == m);

    // Rule 1: no file names a later layer, nor an item of the root.
    let mut edges: BTreeMap<(usize, usize), (usize, String)> = BTreeMap::new();
    for r in model.references() {
        let from = &model.files[r.file];
        let shown = format!("{}:{}", from.shown(dir), r.line);
        edges
            .entry((r.file, r.target))
            .or_insert((r.line, r.written.clone()));
        if let Some(layer) = from.module.first() {
            let Some(own) = rank(layer) else { continue };
            for hop in &r.hops {
                match hop.first().and_then(|m| rank(m).map(|k| (m, k))) {
                    Some((m, k)) if k > own => problems.push(format!(
                        "{shown}: back-import `{}`: layer `{layer}` names `{}` in layer `{m}`, \
                         which comes after it ({chain})",
                        r.written,
                        hop.join("::"),
                    )),
                    Some(_) => {}
                    None if hop.first().is_some_and(|i| model.root_item(i)) => {
                        problems.push(format!(
                            "{shown}: back-import `{}`: `crate::{}` is defined in the crate root \
                             ({root}), the top of the order; move it into a layer",
                            r.written, hop[0],
                        ))
                    }
                    None => {}
                }
            }
        }
    }

    // Rule 2: no circle of files, a module's file and its own submodules' files aside.
    edges.retain(|&(a, b), _| {
        let (ma, mb) = (&model.files[a].module, &model.files[b].module);
        a != b && !ma.starts_with(mb) && !mb.starts_with(ma)
    });
    for scc in circles(model.files.len(), edges.keys().copied()) {
        let names: Vec<String> = scc.iter().map(|&f| model.files[f].shown(dir)).collect();
        let mut how = Vec::new();
        for (&(a, b), (line, written)) in &edges {
            if scc.contains(&a) && scc.contains(&b) {
                how.push(format!(
                    "    {}:{line} → {} (`{written}`)",
                    model.files[a].shown(dir),
                    model.files[b].shown(dir)
                ));
            }
        }
        problems.push(format!(
            "files import each other in a circle: {}\n{}",
            names.join(", "),
            how.join("\n")
        ));
    }
    problems
}

/// The layers declared in the root's inner doc comment (see the module documentation).
fn declared_layers(root: &str) -> Result<Vec<String>, String> {
    let doc: Vec<&str> = root
        .lines()
        .map_while(|l| l.trim_start().strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = doc
        .iter()
        .position(|l| l.starts_with("Layers") || l.starts_with("Folders"))
        .ok_or(
            "no layer order declared: the inner doc comment needs a paragraph beginning with \
             `Layers` that chains the top-level modules in order, `a` → `b` → `c`",
        )?;
    let para: Vec<&str> = doc[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    let para = para.join(" ");
    let parts: Vec<&str> = para.split('→').collect();
    if parts.len() < 2 {
        return Err(format!(
            "the layer paragraph has no `a` → `b` chain: {para}"
        ));
    }
    let ticked = |s: &str| -> Vec<String> {
        s.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let names = ticked(part);
        // Before the first arrow the last name counts (the intro may name things), after an
        // arrow the first one (a remark may follow it).
        let name = if i == 0 { names.last() } else { names.first() };
        match name {
            Some(n) if !n.is_empty() && n.chars().all(|c| c == '_' || c.is_alphanumeric()) => {
                out.push(n.clone())
            }
            _ => return Err(format!("not a module name in backticks: {:?}", part.trim())),
        }
    }
    Ok(out)
}

/// Strongly connected sets of more than one node (Tarjan).
fn circles(n: usize, edges: impl Iterator<Item = (usize, usize)>) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); n];
    for (a, b) in edges {
        adj[a].push(b);
    }
    struct T<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.adj[v] {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        adj: &adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

// ---------------------------------------------------------------------------------------------
// Tokens: the code of a file without comments and literals.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// The tokens of `src` that matter here: identifiers, `::` and punctuation, with their lines.
/// Comments (doc comments included), string, byte and char literals, lifetimes and numbers are
/// dropped; `$crate` reads as `crate`.
fn tokenize(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident_start = |ch: char| ch == '_' || ch.is_alphabetic();
    let ident = |ch: char| ch == '_' || ch.is_alphanumeric();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        let start = i;
        if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = string_literal(&c, i) {
            i = end;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                // '\n', '\'', '\u{..}'
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // a lifetime or a label
                i += 1;
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch == '$' && ident_start(at(i + 1)) {
            i += 1;
        } else if ident_start(ch) {
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(c[start..i].iter().collect()),
                line,
            });
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            if !ch.is_whitespace() {
                out.push(Token {
                    tok: Tok::Punct(ch),
                    line,
                });
            }
            i += 1;
        }
        line += c[start..i].iter().filter(|&&x| x == '\n').count();
    }
    out
}

/// The end of the string literal (`"…"`, `b"…"`, `c"…"`, `r#"…"#`, `br"…"`) starting at `i`.
fn string_literal(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(c.get(j), Some('b' | 'c')) {
        j += 1;
    }
    let raw = c.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let mut hashes = 0;
    while raw && c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() {
        if !raw && c[j] == '\\' {
            j += 2;
        } else if c[j] == '"' && (j + 1..j + 1 + hashes).all(|k| c.get(k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        } else {
            j += 1;
        }
    }
    Some(c.len())
}

// ---------------------------------------------------------------------------------------------
// The crate's modules, what each defines and imports, and what each file names.

struct File {
    path: PathBuf,
    /// Its module path (`[]` for the root, `["failover", "retry"]` for `failover/retry/mod.rs`).
    module: Vec<String>,
}

impl File {
    fn shown(&self, dir: &str) -> String {
        format!("{dir}/{}", self.path.display())
    }
}

/// A path as written, in the module it was written in.
struct Written {
    file: usize,
    scope: Vec<String>,
    segs: Vec<String>,
    line: usize,
    kind: Kind,
}

enum Kind {
    /// A path in code.
    Path,
    /// A `use` bringing in this name.
    Use(String),
    /// A glob `use` (`…::*`).
    Glob,
}

/// A path resolved.
struct Reference {
    file: usize,
    line: usize,
    written: String,
    /// The absolute paths it goes through, as written and after each `use` it follows.
    hops: Vec<Vec<String>>,
    /// The file that defines what it names.
    target: usize,
}

#[derive(Default)]
struct Model {
    files: Vec<File>,
    /// Every module (a file's, or inline) → the file it is in.
    modules: BTreeMap<Vec<String>, usize>,
    /// Names each module defines (items at its top level).
    items: BTreeMap<Vec<String>, BTreeSet<String>>,
    /// Names each module's `use`s bring in → the absolute path they stand for.
    imports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    /// Each module's glob imports (`use x::*`) → the absolute paths of `x`.
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    written: Vec<Written>,
}

impl Model {
    fn new(root: &str, files: &BTreeMap<PathBuf, String>) -> Model {
        let mut m = Model::default();
        for path in files.keys() {
            let mut module: Vec<String> = path
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let last = module.pop().unwrap();
            if path != Path::new(root) && last != "mod.rs" {
                module.push(last.trim_end_matches(".rs").to_string());
            }
            m.modules.insert(module.clone(), m.files.len());
            m.files.push(File {
                path: path.clone(),
                module,
            });
        }
        let parsed: Vec<Vec<Token>> = files.values().map(|t| tokenize(t)).collect();
        for (f, toks) in parsed.iter().enumerate() {
            m.scan(f, toks);
        }
        // `use`s name each other (`use super::client; … use client::Event;`): resolve in order.
        for k in 0..m.written.len() {
            let w = &m.written[k];
            let Some(abs) = m.absolute(&w.scope, &w.segs) else {
                continue;
            };
            let scope = w.scope.clone();
            match &w.kind {
                Kind::Path => {}
                Kind::Use(name) => {
                    let name = name.clone();
                    m.imports.entry(scope).or_default().insert(name, abs);
                }
                Kind::Glob => m.globs.entry(scope).or_default().push(abs),
            }
        }
        m
    }

    /// Collects the modules, items, `use`s and paths of file `f`.
    fn scan(&mut self, f: usize, toks: &[Token]) {
        let ident = |k: usize| match toks.get(k).map(|t| &t.tok) {
            Some(Tok::Ident(s)) => Some(s.as_str()),
            _ => None,
        };
        let punct = |k: usize, p: char| toks.get(k).is_some_and(|t| t.tok == Tok::Punct(p));
        let sep = |k: usize| toks.get(k).is_some_and(|t| t.tok == Tok::Sep);
        // (module, the brace depth of its body)
        let mut scopes = vec![(self.files[f].module.clone(), 0usize)];
        let mut depth = 0;
        let mut k = 0;
        while k < toks.len() {
            let (scope, body) = scopes.last().cloned().unwrap();
            match &toks[k].tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth < body {
                        scopes.pop();
                    }
                }
                Tok::Ident(w) if w == "use" && !punct(k + 1, '<') => {
                    k = self.use_tree(f, &scope, toks, k + 1, Vec::new());
                    continue;
                }
                Tok::Ident(w) if depth == body => {
                    let item = match w.as_str() {
                        "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const"
                        | "static" | "mod" => ident(k + 1),
                        "macro_rules" if punct(k + 1, '!') => ident(k + 2),
                        _ => None,
                    };
                    if let Some(name) = item {
                        self.items
                            .entry(scope.clone())
                            .or_default()
                            .insert(name.to_string());
                        if w == "mod" && punct(k + 2, '{') {
                            let mut inner = scope.clone();
                            inner.push(name.to_string());
                            self.modules.insert(inner.clone(), f);
                            scopes.push((inner, depth + 1));
                        }
                    }
                }
                _ => {}
            }
            // A path in code: `first::second…`, not the tail of a longer one or a field.
            if ident(k).is_some() && sep(k + 1) && ident(k + 2).is_some() {
                let mid = k > 0 && (sep(k - 1) || punct(k - 1, '.'));
                if !mid {
                    let line = toks[k].line;
                    let mut segs = vec![ident(k).unwrap().to_string()];
                    while sep(k + 1) && ident(k + 2).is_some() {
                        segs.push(ident(k + 2).unwrap().to_string());
                        k += 2;
                    }
                    self.written.push(Written {
                        file: f,
                        scope,
                        segs,
                        line,
                        kind: Kind::Path,
                    });
                }
            }
            k += 1;
        }
    }

    /// Parses the use tree at `k` under `prefix`; returns the index after it.
    fn use_tree(
        &mut self,
        f: usize,
        scope: &[String],
        toks: &[Token],
        mut k: usize,
        mut prefix: Vec<String>,
    ) -> usize {
        while k < toks.len() {
            let line = toks[k].line;
            match &toks[k].tok {
                Tok::Sep => k += 1,
                Tok::Ident(s) => {
                    prefix.push(s.clone());
                    k += 1;
                    if toks.get(k).is_some_and(|t| t.tok == Tok::Sep) {
                        continue;
                    }
                    let mut name = prefix.last().unwrap().clone();
                    if toks
                        .get(k)
                        .is_some_and(|t| t.tok == Tok::Ident("as".into()))
                    {
                        if let Some(Tok::Ident(a)) = toks.get(k + 1).map(|t| &t.tok) {
                            name = a.clone();
                        }
                        k += 2;
                    }
                    if prefix.last().is_some_and(|s| s == "self") {
                        prefix.pop();
                        if name == "self" {
                            name = prefix.last().cloned().unwrap_or_default();
                        }
                    }
                    self.written.push(Written {
                        file: f,
                        scope: scope.to_vec(),
                        segs: prefix,
                        line,
                        kind: Kind::Use(name),
                    });
                    return skip_semicolon(toks, k);
                }
                Tok::Punct('*') => {
                    self.written.push(Written {
                        file: f,
                        scope: scope.to_vec(),
                        segs: prefix,
                        line,
                        kind: Kind::Glob,
                    });
                    return skip_semicolon(toks, k + 1);
                }
                Tok::Punct('{') => {
                    k += 1;
                    while k < toks.len() && toks[k].tok != Tok::Punct('}') {
                        k = self.use_tree(f, scope, toks, k, prefix.clone());
                        if toks.get(k).is_some_and(|t| t.tok == Tok::Punct(',')) {
                            k += 1;
                        }
                    }
                    return skip_semicolon(toks, k + 1);
                }
                _ => return k,
            }
        }
        k
    }

    /// The absolute module path `segs`, written in module `scope`, stands for; `None` when it
    /// starts outside the crate (`std::…`, another crate, a local name).
    fn absolute(&self, scope: &[String], segs: &[String]) -> Option<Vec<String>> {
        let (first, rest) = segs.split_first()?;
        let mut base = scope.to_vec();
        let mut rest = rest;
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            name => {
                let imported = self.imports.get(scope).and_then(|i| i.get(name));
                if let Some(abs) = imported {
                    base = abs.clone();
                } else if self.defined_in(scope, name) {
                    base.push(name.to_string());
                } else {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Whether module `scope` defines `name` (an item or a module).
    fn defined_in(&self, scope: &[String], name: &str) -> bool {
        self.items.get(scope).is_some_and(|s| s.contains(name)) || {
            let mut m = scope.to_vec();
            m.push(name.to_string());
            self.modules.contains_key(&m)
        }
    }

    /// Whether the root file itself defines the item `name` (not a module, not an import).
    fn root_item(&self, name: &str) -> bool {
        self.items.get(&[][..]).is_some_and(|s| s.contains(name))
            && !self.modules.contains_key(&[name.to_string()][..])
    }

    /// The longest prefix of `path` that is a module, as its length.
    fn module_prefix(&self, path: &[String]) -> usize {
        (0..=path.len())
            .rev()
            .find(|&n| self.modules.contains_key(&path[..n]))
            .unwrap_or(0)
    }

    /// Follows `path` through the `use`s it meets, to the module that defines what it names.
    fn follow(&self, path: Vec<String>) -> (Vec<Vec<String>>, usize) {
        let mut hops = vec![path];
        for _ in 0..32 {
            let path = hops.last().unwrap();
            let n = self.module_prefix(path);
            let (module, rest) = path.split_at(n);
            let Some(name) = rest.first() else { break };
            if self.items.get(module).is_some_and(|s| s.contains(name)) {
                break;
            }
            let via = self.imports.get(module).and_then(|i| i.get(name)).cloned();
            let via = via.or_else(|| {
                self.globs.get(module)?.iter().find_map(|g| {
                    let has = self.defined_in(g, name)
                        || self.imports.get(g).is_some_and(|i| i.contains_key(name));
                    has.then(|| {
                        let mut p = g.clone();
                        p.push(name.clone());
                        p
                    })
                })
            });
            let Some(mut next) = via else { break };
            next.extend(rest[1..].iter().cloned());
            if hops.contains(&next) {
                break;
            }
            hops.push(next);
        }
        let last = hops.last().unwrap();
        let file = self.modules[&last[..self.module_prefix(last)]];
        (hops, file)
    }

    /// Every path of the crate that names something of the crate, resolved.
    fn references(&self) -> Vec<Reference> {
        let mut out = Vec::new();
        for w in &self.written {
            let Some(abs) = self.absolute(&w.scope, &w.segs) else {
                continue;
            };
            let (hops, file) = self.follow(abs);
            let mut written = w.segs.join("::");
            if let Kind::Glob = w.kind {
                written.push_str("::*");
            }
            out.push(Reference {
                file: w.file,
                line: w.line,
                written,
                hops,
                target: file,
            });
        }
        out
    }
}

fn skip_semicolon(toks: &[Token], k: usize) -> usize {
    if toks.get(k).is_some_and(|t| t.tok == Tok::Punct(';')) {
        k + 1
    } else {
        k
    }
}

// ---------------------------------------------------------------------------------------------
// The checker itself, on small made-up crates: each rule fails when it should, naming file,
// line and path, and passes what the rules allow.

/// The problems of a made-up crate rooted at `lib.rs`, under `src`.
fn problems_of(files: &[(&str, &str)]) -> Vec<String> {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    check("src", "lib.rs", &files)
}

const ROOT: &str = "//! A crate.\n//!\n//! Layers, each importing only the ones before it:\n\
                    //! `low` → `mid` (a remark, `with` ticks) → `top`.\n\
                    pub mod low;\npub mod mid;\npub mod top;\n";

/// Asserts `problems` is one problem containing every piece of `expected`.
fn assert_one(problems: &[String], expected: &[&str]) {
    assert_eq!(problems.len(), 1, "{problems:#?}");
    for e in expected {
        assert!(problems[0].contains(e), "{e:?} not in {problems:#?}");
    }
}

#[test]
fn the_order_is_read_from_the_root_doc() {
    assert_eq!(declared_layers(ROOT).unwrap(), ["low", "mid", "top"]);
    let multi = "//! Text.\n//!\n//! Folders, each importing only those before it: `a` →\n\
                 //! `b` (remark) → `c`.\n//! More of the paragraph, `x`.\n//!\n//! `d` → `e`\n";
    assert_eq!(declared_layers(multi).unwrap(), ["a", "b", "c"]);
    assert!(declared_layers("//! No order here.\nmod a;\n").is_err());
    assert!(declared_layers("//! Layers: `a` → b → `c`\n").is_err());
}

#[test]
fn a_clean_crate_passes() {
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", "pub fn f() {}\n"),
        (
            "mid/mod.rs",
            "mod a;\nmod b;\npub use a::A;\npub(crate) fn shared() {}\npub fn run() { b::go() }\n",
        ),
        // Files reach their folder's shared items, and the folder calls them: no circle.
        (
            "mid/a.rs",
            "pub struct A;\nfn g() { super::shared(); crate::low::f() }\n",
        ),
        (
            "mid/b.rs",
            "use super::a::A;\npub fn go() { let _ = A; super::shared() }\n",
        ),
        (
            "top.rs",
            "use crate::mid::{self, A};\nfn h() { mid::run(); let _ = A; }\n",
        ),
    ]);
    assert!(p.is_empty(), "{p:#?}");
}

#[test]
fn a_back_import_is_named_with_its_file_and_line() {
    let p = problems_of(&[
        ("lib.rs", ROOT),
        (
            "low.rs",
            "pub fn f() {}\n\nfn g() {\n    crate::top::h();\n}\n",
        ),
        ("mid.rs", ""),
        ("top.rs", "pub fn h() {}\n"),
    ]);
    assert_one(
        &p,
        &[
            "src/low.rs:4:",
            "back-import `crate::top::h`",
            "layer `low` names `top::h` in layer `top`",
            "low → mid → top",
        ],
    );
    // In a `use` group, through `super::`, and in a nested module alike.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        (
            "low.rs",
            "mod inner {\n    use super::super::{mid::X, low};\n}\n",
        ),
        ("mid.rs", "pub struct X;\n"),
        ("top.rs", ""),
    ]);
    assert_one(
        &p,
        &["src/low.rs:2:", "`super::super::mid::X`", "layer `mid`"],
    );
}

#[test]
fn a_back_import_through_a_re_export_is_named() {
    // `top` re-exports something of `low`: naming it through `top` is still a back-import.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", "pub struct L;\n"),
        ("mid.rs", "use crate::top::L;\n"),
        ("top.rs", "pub use crate::low::L;\n"),
    ]);
    assert_one(&p, &["src/mid.rs:1:", "`crate::top::L`", "layer `top`"]);
    // …and the other way round: a low-looking name for a later layer's item.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", "pub use crate::top::T;\n"),
        ("mid.rs", "fn f() { let _ = crate::low::T; }\n"),
        ("top.rs", "pub struct T;\n"),
    ]);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].contains("src/low.rs:1:") && p[1].contains("src/mid.rs:1:"),
        "{p:#?}"
    );
}

#[test]
fn an_item_of_the_root_is_the_top() {
    let root = format!("{ROOT}pub fn now_ms() -> i64 {{ 0 }}\npub use low::f;\n");
    let p = problems_of(&[
        ("lib.rs", &root),
        ("low.rs", "pub fn f() { crate::now_ms(); }\n"),
        // A re-export in the root leads to its layer: fine.
        ("mid.rs", "use crate::f;\n"),
        ("top.rs", ""),
    ]);
    assert_one(
        &p,
        &[
            "src/low.rs:1:",
            "`crate::now_ms`",
            "defined in the crate root",
        ],
    );
}

#[test]
fn a_circle_of_files_is_named_with_each_import() {
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", ""),
        ("mid/mod.rs", "mod a;\nmod b;\nmod c;\n"),
        ("mid/a.rs", "use super::b::B;\npub struct A;\n"),
        ("mid/b.rs", "pub struct B;\nfn f() { super::c::g() }\n"),
        (
            "mid/c.rs",
            "pub fn g() {}\n\nfn h() { let _ = super::a::A; }\n",
        ),
        ("top.rs", ""),
    ]);
    assert_one(
        &p,
        &[
            "circle: src/mid/a.rs, src/mid/b.rs, src/mid/c.rs",
            "src/mid/a.rs:1 → src/mid/b.rs (`super::b::B`)",
            "src/mid/b.rs:2 → src/mid/c.rs (`super::c::g`)",
            "src/mid/c.rs:3 → src/mid/a.rs (`super::a::A`)",
        ],
    );
    // Between folders too, and through a name a `use` brought in.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low/mod.rs", "pub mod x;\npub mod y;\n"),
        ("low/x.rs", "use crate::low::y;\npub fn f() { y::g() }\n"),
        (
            "low/y/mod.rs",
            "pub fn g() {}\nfn k() { crate::low::x::f() }\n",
        ),
        ("mid.rs", ""),
        ("top.rs", ""),
    ]);
    assert_one(
        &p,
        &[
            "src/low/x.rs:1 → src/low/y/mod.rs (`crate::low::y`)",
            "src/low/y/mod.rs:2 → src/low/x.rs (`crate::low::x::f`)",
        ],
    );
}

#[test]
fn comments_and_strings_are_not_imports() {
    let p = problems_of(&[
        ("lib.rs", ROOT),
        (
            "low.rs",
            "//! See [`crate::top::T`].\n/// Uses `crate::top::T`.\n// crate::top::T\n\
             /* crate::top::T /* nested */ crate::top::T */\n\
             const S: &str = \"crate::top::T\";\nconst R: &str = r#\"crate::top::T \"x\"\"#;\n\
             const C: char = '\"';\nfn f<'a>(x: &'a str) -> &'a str { x }\n",
        ),
        ("mid.rs", ""),
        ("top.rs", "pub struct T;\n"),
    ]);
    assert!(p.is_empty(), "{p:#?}");
}

#[test]
fn every_top_level_module_is_in_the_order() {
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", ""),
        ("mid.rs", ""),
        ("top.rs", ""),
        ("extra/mod.rs", ""),
    ]);
    assert_one(&p, &["src/lib.rs:", "`extra` is not in the declared order"]);
    let p = problems_of(&[("lib.rs", ROOT), ("low.rs", ""), ("top.rs", "")]);
    assert_one(&p, &["names `mid`, which is not a top-level module"]);
    let p = problems_of(&[("lib.rs", "//! No order.\n"), ("low.rs", "")]);
    assert_one(&p, &["src/lib.rs: no layer order declared"]);
}
