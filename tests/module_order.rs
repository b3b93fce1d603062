//! The module order cannot drift back (issue 28).
//!
//! For each crate of [`CRATES`], every `.rs` file under its source folder is parsed (`syn`) and
//! the crate's own paths it names are collected: `use` trees, and paths in code (macro bodies
//! too) that start with `crate::`, `$crate::`, `super::`, `self::`, a module declared in scope
//! or a name a `use` brought in; `r#name` is `name`. Comments (doc comments too) and literals
//! are not code. Each path is resolved, through `use`, `pub use` and `#[macro_export]`, to the
//! file that defines what it names. Three rules:
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
//! 3. **Methods.** A method call names no path, so an inherent `impl` of a type stays out of the
//!    layers after the type's own: there the type's layer would call later code unseen.
//!
//! A crate is added with one line in [`CRATES`] once its root declares its order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

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
    // A thread per crate: syn parses the workspace in a debug build.
    let problems: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = CRATES
            .iter()
            .map(|c| s.spawn(|| crate_problems(c)))
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    assert!(
        problems.is_empty(),
        "the module order is broken:\n{}",
        problems.join("\n")
    );
}

/// The problems of crate `c`, its known circles aside (and each of them that is gone).
fn crate_problems(c: &Crate) -> Vec<String> {
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
            found.push(format!(
                "{}: the known circle {known} is gone: take it out of CRATES",
                c.dir
            ));
        }
    }
    found
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
    let mut problems = Vec::new();
    let model = Model::new(dir, root, files, &mut problems);

    problems.extend(chain_problems(&format!("{dir}/{root}"), &order, &model));
    let chain = order.join(" → ");
    let rank = |m: &str| order.iter().position(|l| l == m);

    // Rule 1: no file names a later layer, nor an item of the root.
    let mut edges: BTreeMap<(usize, usize), (usize, String)> = BTreeMap::new();
    for r in model.references() {
        let from = &model.files[r.file];
        let shown = format!("{}:{}", from.shown(dir), r.line);
        if r.impl_of {
            // An inherent `impl` of an earlier layer's type, in a later layer, gives the earlier
            // layer methods to call that no path names.
            let of = model.files[r.target].module.first();
            if let (Some(own), Some(of)) = (from.module.first(), of) {
                if rank(of).zip(rank(own)).is_some_and(|(of, own)| of < own) {
                    problems.push(format!(
                        "{shown}: `impl {}` in layer `{own}` adds methods to a type of layer \
                         `{of}`, which comes before it ({chain}): its code calls them unseen; \
                         move the impl into `{of}`",
                        r.written
                    ));
                }
            }
            continue;
        }
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

    problems.extend(circle_problems(dir, &model, edges));
    problems
}

/// The chain names every top-level module, each once, and nothing else (`root`: where it is).
fn chain_problems(root: &str, order: &[String], model: &Model) -> Vec<String> {
    let mut problems = Vec::new();
    let top: BTreeSet<&str> = model
        .files
        .iter()
        .filter_map(|f| f.module.first().map(String::as_str))
        .collect();
    let chain = order.join(" → ");
    for m in &top {
        if !order.iter().any(|l| l == m) {
            problems.push(format!(
                "{root}: the top-level module `{m}` is not in the declared order ({chain})"
            ));
        }
    }
    for (i, l) in order.iter().enumerate() {
        if !top.contains(l.as_str()) {
            problems.push(format!(
                "{root}: the declared order names `{l}`, which is not a top-level module"
            ));
        }
        if order[..i].contains(l) {
            problems.push(format!("{root}: the declared order names `{l}` twice"));
        }
    }
    problems
}

/// Rule 2: no circle of files, a module's file and its own submodules' files aside; `edges`
/// are the imports between files (the first line and path of each).
fn circle_problems(
    dir: &str,
    model: &Model,
    mut edges: BTreeMap<(usize, usize), (usize, String)>,
) -> Vec<String> {
    let mut problems = Vec::new();
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

/// Sets of more than one node that reach each other (strongly connected), each sorted.
fn circles(n: usize, edges: impl Iterator<Item = (usize, usize)>) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); n];
    for (a, b) in edges {
        adj[a].push(b);
    }
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|v| {
            let (mut seen, mut stack) = (vec![false; n], vec![v]);
            while let Some(x) = stack.pop() {
                for &w in &adj[x] {
                    if !std::mem::replace(&mut seen[w], true) {
                        stack.push(w);
                    }
                }
            }
            seen
        })
        .collect();
    let mut out: Vec<Vec<usize>> = (0..n)
        .map(|v| {
            (0..n)
                .filter(|&w| w == v || reach[v][w] && reach[w][v])
                .collect()
        })
        .filter(|s: &Vec<usize>| s.len() > 1)
        .collect();
    out.sort();
    out.dedup();
    out
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
    /// The type of an inherent `impl` block (`impl Ctx { … }`): its methods are called as
    /// `ctx.method()`, a call no path names.
    Impl,
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
    impl_of: bool,
}

#[derive(Default)]
struct Model {
    files: Vec<File>,
    /// Every module (a file's, or inline) → the file it is in.
    modules: BTreeMap<Vec<String>, usize>,
    /// Names each module defines (items at its top level).
    items: BTreeMap<Vec<String>, BTreeSet<String>>,
    /// `#[macro_export]` macros, named `crate::name` wherever they are defined → that module.
    exported: BTreeMap<String, Vec<String>>,
    /// Names each module's `use`s bring in → the absolute path they stand for.
    imports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    /// Each module's glob imports (`use x::*`) → the absolute paths of `x`.
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    written: Vec<Written>,
}

/// An identifier as a name: `r#type` is `type`.
fn name(i: &syn::Ident) -> String {
    syn::ext::IdentExt::unraw(i).to_string()
}

fn line(s: proc_macro2::Span) -> usize {
    s.start().line
}

impl Model {
    /// The model of the crate; a file that does not parse is a problem.
    fn new(
        dir: &str,
        root: &str,
        files: &BTreeMap<PathBuf, String>,
        problems: &mut Vec<String>,
    ) -> Model {
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
        for (f, (path, text)) in files.iter().enumerate() {
            match syn::parse_file(text) {
                Ok(ast) => syn::visit::visit_file(
                    &mut Scan {
                        scope: m.files[f].module.clone(),
                        m: &mut m,
                        file: f,
                        blocks: 0,
                    },
                    &ast,
                ),
                Err(e) => problems.push(format!(
                    "{dir}/{}:{}: not Rust: {e}",
                    path.display(),
                    line(e.span())
                )),
            }
        }
        // `use`s name each other (`use super::client; … use client::Event;`): resolve in order.
        for k in 0..m.written.len() {
            let w = &m.written[k];
            let Some(abs) = m.absolute(&w.scope, &w.segs) else {
                continue;
            };
            let scope = w.scope.clone();
            match &w.kind {
                Kind::Path | Kind::Impl => {}
                Kind::Use(name) => {
                    let name = name.clone();
                    m.imports.entry(scope).or_default().insert(name, abs);
                }
                Kind::Glob => m.globs.entry(scope).or_default().push(abs),
            }
        }
        m
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
            let exported = module.is_empty().then(|| self.exported.get(name)).flatten();
            let via = via.or_else(|| Some([exported?.clone(), vec![name.clone()]].concat()));
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
                impl_of: matches!(w.kind, Kind::Impl),
            });
        }
        out
    }
}

/// Collects the modules, items, `use`s and paths of one file. Comments are not in the syntax
/// tree, doc comments and literals hold no paths, and macro bodies are scanned token by token.
struct Scan<'m> {
    m: &'m mut Model,
    file: usize,
    /// The module being read.
    scope: Vec<String>,
    /// How many blocks deep: items in a function body are not the module's.
    blocks: usize,
}

impl Scan<'_> {
    fn push(&mut self, segs: Vec<String>, line: usize, kind: Kind) {
        self.m.written.push(Written {
            file: self.file,
            scope: self.scope.clone(),
            segs,
            line,
            kind,
        });
    }

    fn use_tree(&mut self, tree: &syn::UseTree, mut prefix: Vec<String>) {
        let (ident, rename) = match tree {
            syn::UseTree::Path(p) => {
                prefix.push(name(&p.ident));
                return self.use_tree(&p.tree, prefix);
            }
            syn::UseTree::Group(g) => {
                return g
                    .items
                    .iter()
                    .for_each(|t| self.use_tree(t, prefix.clone()));
            }
            syn::UseTree::Glob(g) => return self.push(prefix, line(g.star_token.span), Kind::Glob),
            syn::UseTree::Name(n) => (&n.ident, None),
            syn::UseTree::Rename(r) => (&r.ident, Some(name(&r.rename))),
        };
        // `use a::b::{self}` brings in `b`.
        if ident != "self" {
            prefix.push(name(ident));
        }
        let brought = rename
            .or_else(|| prefix.last().cloned())
            .unwrap_or_default();
        self.push(prefix, line(ident.span()), Kind::Use(brought));
    }

    /// The paths `first::second…` in the tokens of a macro (`$crate` reads as `crate`).
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        use proc_macro2::{Spacing, TokenTree as T};
        let toks: Vec<T> = ts.into_iter().collect();
        let sep = |k: usize| match (toks.get(k), toks.get(k + 1)) {
            (Some(T::Punct(a)), Some(T::Punct(b))) => {
                a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
            }
            _ => false,
        };
        let ident = |k: usize| match toks.get(k) {
            Some(T::Ident(i)) => Some(i),
            _ => None,
        };
        let mut k = 0;
        while k < toks.len() {
            if let T::Group(g) = &toks[k] {
                self.tokens(g.stream());
            }
            let after_sep = k >= 2 && sep(k - 2);
            let dot = k > 0 && matches!(&toks[k - 1], T::Punct(p) if p.as_char() == '.');
            if let (Some(first), false, false) = (ident(k), after_sep, dot) {
                let mut segs = vec![name(first)];
                while sep(k + 1) && ident(k + 3).is_some() {
                    segs.push(name(ident(k + 3).unwrap()));
                    k += 3;
                }
                if segs.len() > 1 {
                    self.push(segs, line(first.span()), Kind::Path);
                }
            }
            k += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Scan<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let ident = match i {
            syn::Item::Fn(x) => Some(&x.sig.ident),
            syn::Item::Struct(x) => Some(&x.ident),
            syn::Item::Enum(x) => Some(&x.ident),
            syn::Item::Union(x) => Some(&x.ident),
            syn::Item::Trait(x) => Some(&x.ident),
            syn::Item::TraitAlias(x) => Some(&x.ident),
            syn::Item::Type(x) => Some(&x.ident),
            syn::Item::Const(x) => Some(&x.ident),
            syn::Item::Static(x) => Some(&x.ident),
            syn::Item::Mod(x) => Some(&x.ident),
            syn::Item::Macro(x) => x.ident.as_ref(),
            _ => None,
        };
        if let (Some(ident), 0) = (ident, self.blocks) {
            let scope = self.scope.clone();
            if let syn::Item::Macro(x) = i {
                if x.attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                    self.m.exported.insert(name(ident), scope.clone());
                }
            }
            self.m.items.entry(scope).or_default().insert(name(ident));
        }
        match i {
            syn::Item::Mod(x) if x.content.is_some() && self.blocks == 0 => {
                self.scope.push(name(&x.ident));
                self.m.modules.insert(self.scope.clone(), self.file);
                syn::visit::visit_item(self, i);
                self.scope.pop();
            }
            syn::Item::Use(u) if u.leading_colon.is_none() => self.use_tree(&u.tree, Vec::new()),
            syn::Item::Impl(x) if x.trait_.is_none() => {
                if let syn::Type::Path(t) = &*x.self_ty {
                    let segs = t.path.segments.iter().map(|s| name(&s.ident)).collect();
                    self.push(segs, line(x.impl_token.span), Kind::Impl);
                }
                syn::visit::visit_item(self, i);
            }
            _ => syn::visit::visit_item(self, i),
        }
    }

    fn visit_block(&mut self, b: &'ast syn::Block) {
        self.blocks += 1;
        syn::visit::visit_block(self, b);
        self.blocks -= 1;
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            let segs = p.segments.iter().map(|s| name(&s.ident)).collect();
            self.push(segs, line(p.segments[0].ident.span()), Kind::Path);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        syn::visit::visit_macro(self, m);
        self.tokens(m.tokens.clone());
    }

    fn visit_meta_list(&mut self, m: &'ast syn::MetaList) {
        syn::visit::visit_meta_list(self, m);
        self.tokens(m.tokens.clone());
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
fn macros_raw_identifiers_and_methods_are_seen() {
    // A path in a macro's body, and an exported macro named through the root.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        (
            "low.rs",
            "fn f() {\n    assert!(crate::top::h());\n    crate::m!();\n}\n",
        ),
        ("mid.rs", ""),
        (
            "top.rs",
            "pub fn h() -> bool { true }\n#[macro_export]\nmacro_rules! m { () => {} }\n",
        ),
    ]);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].contains("src/low.rs:2:") && p[0].contains("`crate::top::h`"),
        "{p:#?}"
    );
    assert!(
        p[1].contains("src/low.rs:3:") && p[1].contains("names `top::m` in layer `top`"),
        "{p:#?}"
    );
    // A raw identifier names the module it spells.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", "use crate::r#top::T;\n"),
        ("mid.rs", ""),
        ("top.rs", "pub struct T;\n"),
    ]);
    assert_one(&p, &["src/low.rs:1:", "`crate::top::T`", "layer `top`"]);
    // Methods added to an earlier layer's type: `low` could call `top` without a path.
    let p = problems_of(&[
        ("lib.rs", ROOT),
        ("low.rs", "pub struct Ctx;\n"),
        (
            "mid.rs",
            "impl crate::low::Ctx {\n    pub fn m(&self) {}\n}\n",
        ),
        (
            "top.rs",
            "use crate::low::Ctx;\n\nimpl Ctx {}\nimpl Clone for Ctx {}\n",
        ),
    ]);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].contains("src/mid.rs:1: `impl crate::low::Ctx` in layer `mid`"),
        "{p:#?}"
    );
    assert!(
        p[1].contains("src/top.rs:3:") && p[1].contains("move the impl into `low`"),
        "{p:#?}"
    );
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
