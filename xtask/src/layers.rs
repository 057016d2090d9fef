//! Leg and command `layers` (issue #29, "One-way layers"): the driver's
//! layer rule, checked from its sources.
//!
//! The rule (also in the crate docs, `src/lib.rs`): a module imports only
//! from its own layer or below, and no files import each other, directly or
//! around a loop. The layers, bottom up, are the numbers of [`LAYERS`].
//!
//! How the import graph is drawn (a text scanner, not the compiler):
//! * Files are found from `src/lib.rs` by following `mod x;` declarations
//!   (`src/a/b.rs` or `src/a/b/mod.rs`). Items under a `#[cfg(...)]` that
//!   names `test` (and no `not`) are skipped — `#[cfg(test)] mod tests`
//!   blocks, their `use`s and their child files — and so is any file named
//!   `tests.rs` or under a `tests/` directory: tests may reach anywhere.
//! * Comments, strings and character literals are removed first, so doc
//!   links (`[`crate::x`]`) are not imports.
//! * An edge is a `use` (groups `use crate::{a::b, c}`, `self`, `super::`,
//!   aliases, globs) or a path in code that starts with `crate::`,
//!   `super::`, `self::` or the name of a child module. The path resolves
//!   to the longest module path that exists (the item may be in the
//!   parent's file); when that module re-exports the named item
//!   (`pub use child::Item`, any `pub(..)`), the re-export is followed to
//!   the file that defines it, so a facade `mod.rs` is not charged for what
//!   it only passes on. Glob re-exports are not followed.
//! * `mod x;` itself is containment, not an import; a file's references to
//!   its own items (inline modules included) are not edges; paths into
//!   other crates (`irdma_hal`, `core`) are not edges (the hal is layer 0).
//!
//! Report: upward edges (from a lower layer to a higher one) and cycles
//! (Tarjan's strongly connected components of the file graph; a component
//! of more than one file, or a file importing itself, is a cycle). Until
//! the code is refactored, `xtask/layers-known.txt` lists today's
//! violations; the leg fails on any violation not listed and on any listed
//! one that no longer occurs, so the list can only shrink.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;

use crate::util::root;

/// Every driver file by path prefix (the longest prefix wins) and its
/// layer, bottom up; the hal (`irdma_hal`) is layer 0 and outside `src/`.
/// A new file that matches no entry fails the leg: place it here.
///
/// Files sit where today's code puts them, not where they should end up:
/// `error.rs` (the phrases; each error's `Display` lives beside the error)
/// is a plain type, and so is `flight.rs` (the event types, with the
/// `ProbeStep` and `QpState` enums they carry, re-exported above); a
/// facade `mod.rs` that only re-exports sits with the highest of its
/// children (`cqp/mod.rs`: `EncodeError` is in `cqp/encode.rs`).
/// The ring order inside `uk` is memory → SQ, RQ, CQ → QP (with the poll
/// loop, `uk/qp.rs` `poll_cq`, and the CQE decoder, `uk/poll.rs`) → link, MP.
pub const LAYERS: &[(&str, u32)] = &[
    // 1 plain types: work requests, LAN hand-off, error phrases,
    // flight-recorder events, the logging macros.
    ("src/wr.rs", 1),
    ("src/lan.rs", 1),
    ("src/error.rs", 1),
    ("src/flight.rs", 1),
    ("src/log.rs", 1),
    // 2 wire encodings: CQP commands/contexts/decoders, ice descriptors,
    // capabilities and registers, CM MADs and RDMA-CM private data.
    ("src/cqp/encode.rs", 2),
    ("src/cqp/cmd.rs", 2),
    ("src/cqp/cmd/", 2),
    ("src/cqp/ctx.rs", 2),
    ("src/cqp/decode.rs", 2),
    ("src/cqp/names.rs", 2),
    ("src/ice/desc.rs", 2),
    ("src/ice/caps.rs", 2),
    ("src/ice/regs.rs", 2),
    ("src/cm/mad.rs", 2),
    ("src/cm/rdma_cm.rs", 2),
    // 3..=6 rings (`uk`) and resources (`res`, beside ring memory).
    ("src/uk/mem.rs", 3),
    ("src/uk/sync.rs", 3),
    ("src/irq.rs", 3),
    ("src/uk/sizing.rs", 3),
    ("src/res/", 3),
    ("src/uk/sq.rs", 4),
    ("src/uk/rq.rs", 4),
    ("src/uk/cq.rs", 4),
    ("src/uk/qp.rs", 5),
    // Polling retires the WQEs of the QP a CQE names: beside the QP, which
    // reaches it only through `CqRing` methods.
    ("src/uk/poll.rs", 5),
    ("src/uk/link.rs", 6),
    ("src/uk/mp.rs", 6),
    ("src/uk/mod.rs", 6),
    // 7 engines: the CQP engine; the ice admin queue, commands,
    // scheduler, switch.
    ("src/cqp/engine.rs", 7),
    ("src/cqp/mod.rs", 7),
    ("src/ice/aq.rs", 7),
    ("src/ice/cmd.rs", 7),
    ("src/ice/sched.rs", 7),
    ("src/ice/switch.rs", 7),
    // 8 the device: probe, teardown, HMC, quarantine, AEQ, completions.
    ("src/device/", 8),
    ("src/aeq.rs", 8),
    // 9 verbs, rdma_rw, LAN bring-up (and the `ice` facade).
    ("src/verbs/", 9),
    ("src/rw/", 9),
    ("src/ice/bringup.rs", 9),
    ("src/ice/mod.rs", 9),
    // 10 the CM.
    ("src/cm/", 10),
    // 11 the crate's public face: the root and the prelude.
    ("src/lib.rs", 11),
    ("src/prelude.rs", 11),
];

/// The allowlist of today's violations, relative to the workspace root.
pub const KNOWN: &str = "xtask/layers-known.txt";

// ---------------------------------------------------------------- lexer

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(char),
    /// `::`
    Sep,
    /// A string, character or number literal (contents dropped).
    Lit,
}

fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let n = c.len();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < n && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            i = block_comment_end(&c, i);
        } else if ch == '"' {
            i = quoted_end(&c, i, '"');
            out.push(Tok::Lit);
        } else if ch == '\'' {
            if at(i + 1) == '\\' || (at(i + 2) == '\'' && at(i + 1) != '\'') {
                i = quoted_end(&c, i, '\'');
                out.push(Tok::Lit);
            } else {
                // a lifetime or label: drop it
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            out.push(Tok::Lit);
        } else if ch.is_alphabetic() || ch == '_' {
            i = word(&c, i, &mut out);
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Tok::Sep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// Lexes the word at `i` (an identifier, or the prefix of a string, byte
/// or raw literal, or `r#` of a raw identifier); returns where it ends.
fn word(c: &[char], mut i: usize, out: &mut Vec<Tok>) -> usize {
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let s = i;
    while at(i).is_alphanumeric() || at(i) == '_' {
        i += 1;
    }
    let id: String = c[s..i].iter().collect();
    let prefix = matches!(id.as_str(), "r" | "b" | "br" | "c" | "cr");
    if prefix && at(i) == '"' {
        i = if id.contains('r') { raw_end(c, i) } else { quoted_end(c, i, '"') };
        out.push(Tok::Lit);
    } else if prefix && id.contains('r') && at(i) == '#' && matches!(at(i + 1), '#' | '"') {
        i = raw_end(c, i);
        out.push(Tok::Lit);
    } else if id == "b" && at(i) == '\'' {
        i = quoted_end(c, i, '\'');
        out.push(Tok::Lit);
    } else if id == "r" && at(i) == '#' {
        i += 1; // raw identifier: the identifier follows
    } else {
        out.push(Tok::Ident(id));
    }
    i
}

/// Skips a (non-raw) quoted literal whose opening quote is at `i`.
fn quoted_end(c: &[char], mut i: usize, q: char) -> usize {
    let n = c.len();
    i += 1;
    while i < n && c[i] != q {
        i += if c[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// Skips a raw string whose `#`s or opening quote are at `i`.
fn raw_end(c: &[char], mut i: usize) -> usize {
    let n = c.len();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    // at `#`* `"`
    let mut hashes = 0;
    while at(i) == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1;
    while i < n {
        if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
            return i + 1 + hashes;
        }
        i += 1;
    }
    n
}

/// Skips a (nested) block comment that opens at `i`.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let n = c.len();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut depth = 0;
    while i < n {
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
    i
}

// -------------------------------------------------------------- scanner

/// A path one file names, in the module `ctx` it was written in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    pub ctx: Vec<String>,
    pub path: Vec<String>,
}

/// What one file declares and names.
#[derive(Debug, Default)]
pub struct Scanned {
    /// Out-of-line child modules (`mod x;`), as absolute module paths.
    pub children: Vec<Vec<String>>,
    /// Inline modules (`mod x { … }`), as absolute module paths.
    pub inline: Vec<Vec<String>>,
    /// Every path the file names (`use` trees expanded; globs as their prefix).
    pub refs: Vec<Ref>,
    /// `pub use` re-exports: (the path, the name it is exported as).
    pub reexports: Vec<(Ref, String)>,
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Index just past the group that opens at `i` (`(`, `[` or `{`).
fn skip_group(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth <= 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    t.len()
}

/// Index just past the item that starts at `i`: its `;` or its body's `}`.
fn skip_item(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth <= 0 {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth <= 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    t.len()
}

/// Expands the use tree at `i` under `prefix` into (path, name) pairs.
fn use_tree(t: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix.to_vec();
    loop {
        match t.get(*i) {
            Some(Tok::Sep) => {
                // a leading `::`: another crate
                if path.is_empty() {
                    path.push("::".into());
                }
                *i += 1;
            }
            Some(Tok::Ident(s)) => {
                *i += 1;
                if t.get(*i) == Some(&Tok::Sep) {
                    path.push(s.clone());
                    *i += 1;
                    continue;
                }
                let mut name = s.clone();
                if s == "self" && !path.is_empty() {
                    name = path.last().cloned().unwrap_or_default();
                } else {
                    path.push(s.clone());
                }
                if ident(t.get(*i)) == Some("as")
                    && let Some(a) = ident(t.get(*i + 1))
                {
                    name = a.to_string();
                    *i += 2;
                }
                out.push((path, name));
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, "*".into()));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match t.get(*i) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        _ => {
                            let before = *i;
                            use_tree(t, i, &path, out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
            }
            _ => return,
        }
    }
}

/// Whether the attribute tokens `#[ … ]` make the next item test-only.
fn is_test_cfg(attr: &[Tok]) -> bool {
    let has = |w: &str| attr.iter().any(|t| matches!(t, Tok::Ident(s) if s == w));
    ident(attr.get(2)) == Some("cfg") && has("test") && !has("not")
}

/// Scans one file whose module path is `module`.
pub fn scan(src: &str, module: &[String]) -> Scanned {
    let t = lex(src);
    let mut out = Scanned::default();
    // (module path, brace depth inside it) of the inline modules we are in
    let mut stack: Vec<(Vec<String>, i32)> = vec![(module.to_vec(), 0)];
    let mut depth = 0i32;
    let mut pending_inline: Option<Vec<String>> = None;
    let mut vis = false;
    let mut i = 0;
    while i < t.len() {
        let ctx = stack.last().map(|s| s.0.clone()).unwrap_or_default();
        let was_vis = std::mem::take(&mut vis);
        match &t[i] {
            Tok::Punct('#') if t.get(i + 1) == Some(&Tok::Punct('!')) => {
                i = skip_group(&t, i + 2);
            }
            Tok::Punct('#') if t.get(i + 1) == Some(&Tok::Punct('[')) => i = skip_attr(&t, i),
            Tok::Punct('{') => {
                depth += 1;
                if let Some(p) = pending_inline.take() {
                    stack.push((p, depth));
                }
                i += 1;
            }
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().map(|s| s.1) == Some(depth) {
                    stack.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Ident(k) if k == "pub" => {
                vis = true;
                i += 1;
                if t.get(i) == Some(&Tok::Punct('(')) {
                    i = skip_group(&t, i);
                }
            }
            Tok::Ident(k) if k == "mod" && ident(t.get(i + 1)).is_some() => {
                let mut p = ctx.clone();
                p.push(ident(t.get(i + 1)).unwrap_or_default().to_string());
                match t.get(i + 2) {
                    Some(Tok::Punct(';')) => out.children.push(p),
                    Some(Tok::Punct('{')) => {
                        out.inline.push(p.clone());
                        pending_inline = Some(p);
                    }
                    _ => {}
                }
                i += 2;
            }
            Tok::Ident(k) if k == "use" => {
                i += 1;
                scan_use(&t, &mut i, &ctx, was_vis, &mut out);
            }
            Tok::Ident(first) if t.get(i + 1) == Some(&Tok::Sep) => {
                i = scan_path(&t, i, first, ctx, &mut out);
            }
            _ => i += 1,
        }
    }
    out
}

/// Skips the attribute `#[ … ]` at `i`, and the item after it when the
/// attribute makes it test-only.
fn skip_attr(t: &[Tok], i: usize) -> usize {
    let end = skip_group(t, i + 1);
    if is_test_cfg(&t[i..end]) {
        // further attributes, then the item itself
        let mut j = end;
        while t.get(j) == Some(&Tok::Punct('#')) {
            j = skip_group(t, j + 1);
        }
        skip_item(t, j)
    } else {
        end
    }
}

/// The paths of the `use` item whose tree starts at `*i` (a `pub use` also
/// re-exports them).
fn scan_use(t: &[Tok], i: &mut usize, ctx: &[String], was_vis: bool, out: &mut Scanned) {
    let mut trees = Vec::new();
    use_tree(t, i, &[], &mut trees);
    for (path, name) in trees {
        if path.is_empty() {
            continue;
        }
        let r = Ref { ctx: ctx.to_vec(), path };
        if was_vis && name != "*" {
            out.reexports.push((r.clone(), name));
        }
        out.refs.push(r);
    }
}

/// The path `first::…` at `i` (not one continuing an earlier path or a
/// method call); returns where it ends.
fn scan_path(t: &[Tok], mut i: usize, first: &str, ctx: Vec<String>, out: &mut Scanned) -> usize {
    let after_sep = i > 0 && matches!(t[i - 1], Tok::Sep | Tok::Punct('.'));
    let mut path = vec![first.to_string()];
    i += 1;
    while t.get(i) == Some(&Tok::Sep)
        && let Some(s) = ident(t.get(i + 1))
    {
        path.push(s.to_string());
        i += 2;
    }
    if !after_sep {
        out.refs.push(Ref { ctx, path });
    }
    i
}

// ---------------------------------------------------------------- graph

/// The file-level import graph of a crate.
#[derive(Debug, Default)]
pub struct Graph {
    /// Files (relative to the crate root), in discovery order.
    pub files: Vec<String>,
    /// Import edges between different files.
    pub edges: BTreeSet<(String, String)>,
}

/// Whether a file is a test file by its path (skipped even if declared).
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.contains("/tests/")
}

/// Builds the graph from a crate's files, given as `read(rel_path)`
/// (`src/lib.rs`, `src/a.rs`, `src/a/mod.rs`, …).
pub fn build(read: &dyn Fn(&str) -> Option<String>) -> Result<Graph, String> {
    let (modules, scanned) = crate_files(read)?;
    let resolve = |r: &Ref| resolve(&modules, r);
    // module -> exported name -> absolute target (None: another crate)
    let mut reexports: HashMap<Vec<String>, HashMap<String, Option<Vec<String>>>> = HashMap::new();
    for (_, s) in &scanned {
        for (r, name) in &s.reexports {
            reexports.entry(r.ctx.clone()).or_default().insert(name.clone(), resolve(r));
        }
    }
    let longest = |abs: &[String]| -> (usize, Option<&String>) {
        (0..=abs.len())
            .rev()
            .find_map(|k| modules.get(&abs[..k]).map(|f| (k, Some(f))))
            .unwrap_or((0, None))
    };
    let target = |abs: Vec<String>| -> Option<String> {
        let mut abs = abs;
        for _ in 0..16 {
            let (k, file) = longest(&abs);
            let file = file?;
            let next = abs.get(k).and_then(|name| reexports.get(&abs[..k])?.get(name));
            match next {
                Some(Some(t)) if *t != abs => abs = t.clone(),
                Some(None) => return None,
                _ => return Some(file.clone()),
            }
        }
        None
    };
    let mut g = Graph { files: scanned.iter().map(|s| s.0.clone()).collect(), ..Graph::default() };
    for (rel, s) in &scanned {
        for r in &s.refs {
            if let Some(to) = resolve(r).and_then(target)
                && to != *rel
            {
                g.edges.insert((rel.clone(), to));
            }
        }
    }
    Ok(g)
}

/// The crate's files from `src/lib.rs` down, scanned and sorted by path,
/// and the file of each module path (out-of-line and inline modules alike).
fn crate_files(
    read: &dyn Fn(&str) -> Option<String>,
) -> Result<(Modules, Vec<(String, Scanned)>), String> {
    // module path -> file, for out-of-line and inline modules alike
    let mut modules: Modules = HashMap::new();
    let mut scanned: Vec<(String, Scanned)> = Vec::new();
    let mut queue: Vec<(Vec<String>, String)> = vec![(Vec::new(), "src/lib.rs".into())];
    while let Some((m, rel)) = queue.pop() {
        let src = read(&rel).ok_or_else(|| format!("{rel}: cannot read"))?;
        let s = scan(&src, &m);
        modules.insert(m.clone(), rel.clone());
        for p in &s.inline {
            modules.insert(p.clone(), rel.clone());
        }
        for child in &s.children {
            let base = format!("src/{}", child.join("/"));
            let (a, b) = (format!("{base}.rs"), format!("{base}/mod.rs"));
            let file = if read(&a).is_some() { a } else { b };
            if !is_test_file(&file) {
                queue.push((child.clone(), file));
            }
        }
        scanned.push((rel, s));
    }
    scanned.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((modules, scanned))
}

/// Module path -> the file that holds it.
type Modules = HashMap<Vec<String>, String>;

/// The absolute module path `r` names, if it is in this crate (`modules`).
fn resolve(modules: &Modules, r: &Ref) -> Option<Vec<String>> {
    let first = r.path.first()?;
    let mut abs = match first.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => r.ctx.clone(),
        _ => {
            let mut c = r.ctx.clone();
            c.push(first.clone());
            if !modules.contains_key(&c) {
                return None; // another crate, or a local item
            }
            r.ctx.clone()
        }
    };
    let mut rest = &r.path[..];
    if matches!(first.as_str(), "crate" | "self") {
        rest = &rest[1..];
    }
    while rest.first().map(String::as_str) == Some("super") {
        abs.pop()?;
        rest = &rest[1..];
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

/// Tarjan's strongly connected components; returns those that are cycles
/// (more than one node, or a node with an edge to itself), each sorted.
pub fn cycles(nodes: &[String], edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    struct T<'a> {
        adj: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
        _p: std::marker::PhantomData<&'a ()>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for w in t.adj[v].clone() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            t.out.push(scc);
        }
    }
    let id: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let n = nodes.len();
    let mut t = T {
        adj: vec![Vec::new(); n],
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
        _p: std::marker::PhantomData,
    };
    for (a, b) in edges {
        if let (Some(&a), Some(&b)) = (id.get(a.as_str()), id.get(b.as_str())) {
            t.adj[a].push(b);
        }
    }
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    let mut res: Vec<Vec<String>> = t
        .out
        .iter()
        .filter(|s| s.len() > 1 || edges.contains(&(nodes[s[0]].clone(), nodes[s[0]].clone())))
        .map(|s| {
            let mut v: Vec<String> = s.iter().map(|&i| nodes[i].clone()).collect();
            v.sort();
            v
        })
        .collect();
    res.sort();
    res
}

/// The layer of a file: the longest matching prefix of `table`.
pub fn layer_of(table: &[(&str, u32)], file: &str) -> Option<u32> {
    table.iter().filter(|(p, _)| file.starts_with(p)).max_by_key(|(p, _)| p.len()).map(|e| e.1)
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    pub files: usize,
    pub edges: usize,
    pub upward: Vec<(String, String)>,
    pub cycles: Vec<Vec<String>>,
    /// Every violation as an allowlist line.
    pub lines: BTreeSet<String>,
    /// Every edge (for `--edges`).
    pub edges_list: Vec<(String, String)>,
}

/// Upward edges and cycles of `g` under `table`; a file with no layer is an error.
pub fn analyse(g: &Graph, table: &[(&str, u32)]) -> Result<Report, String> {
    let mut layer = HashMap::new();
    for f in &g.files {
        let l = layer_of(table, f)
            .ok_or_else(|| format!("{f} has no layer: add it to LAYERS in xtask/src/layers.rs"))?;
        layer.insert(f.as_str(), l);
    }
    let upward: Vec<(String, String)> = g
        .edges
        .iter()
        .filter(|(a, b)| layer.get(a.as_str()) < layer.get(b.as_str()))
        .cloned()
        .collect();
    let cycles = cycles(&g.files, &g.edges);
    let mut lines: BTreeSet<String> =
        upward.iter().map(|(a, b)| format!("up {a} -> {b}")).collect();
    lines.extend(cycles.iter().map(|c| format!("cycle {}", c.join(" "))));
    Ok(Report {
        files: g.files.len(),
        edges: g.edges.len(),
        upward,
        cycles,
        lines,
        edges_list: g.edges.iter().cloned().collect(),
    })
}

/// Compares a report with the allowlist text: (new violations, stale entries).
pub fn compare(r: &Report, known: &str) -> (Vec<String>, Vec<String>) {
    let allowed: BTreeSet<String> = known
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let new = r.lines.difference(&allowed).cloned().collect();
    let stale = allowed.difference(&r.lines).cloned().collect();
    (new, stale)
}

impl Report {
    fn counts(&self) -> String {
        format!(
            "files={} edges={} upward={} cycles={} largest-cycle={}",
            self.files,
            self.edges,
            self.upward.len(),
            self.cycles.len(),
            self.cycles.iter().map(Vec::len).max().unwrap_or(0)
        )
    }
}

/// Runs the check on the workspace's driver crate.
fn check() -> Result<(Report, String), String> {
    let root = root();
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
    let g = build(&read)?;
    let r = analyse(&g, LAYERS)?;
    let known = std::fs::read_to_string(root.join(KNOWN)).unwrap_or_default();
    Ok((r, known))
}

/// The leg: fails on a violation not in the allowlist, or a stale entry.
pub fn leg() -> Result<String, String> {
    let (r, known) = check()?;
    verdict(&r, &known)
}

/// The leg's verdict on a report and the allowlist text.
pub fn verdict(r: &Report, known: &str) -> Result<String, String> {
    let (new, stale) = compare(r, known);
    let mut msg = String::new();
    for l in &new {
        msg +=
            &format!("\n  new violation (fix the import, see the layer rule in src/lib.rs): {l}");
    }
    for l in &stale {
        msg += &format!("\n  stale entry, remove it from {KNOWN}: {l}");
    }
    let counts = format!("{} allowlisted={}", r.counts(), r.lines.len() - new.len());
    if msg.is_empty() { Ok(counts) } else { Err(format!("{counts}{msg}")) }
}

/// `cargo xtask layers [--print-known | --edges]`: the leg's check, with
/// every violation listed; `--print-known` prints them in allowlist form,
/// `--edges` prints the whole file graph.
pub fn main(args: &[String]) -> ExitCode {
    let (r, known) = match check() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("layers: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.iter().any(|a| a == "--edges") {
        for (a, b) in &r.edges_list {
            println!("{a} -> {b}");
        }
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--print-known") {
        for l in &r.lines {
            println!("{l}");
        }
        return ExitCode::SUCCESS;
    }
    for l in &r.lines {
        println!("{l}");
    }
    println!("{}", r.counts());
    match verdict(&r, &known) {
        Ok(m) => {
            println!("ok: {m}");
            ExitCode::SUCCESS
        }
        Err(m) => {
            println!("FAILED: {m}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(s: &Scanned) -> Vec<String> {
        s.refs.iter().map(|r| r.path.join("::")).collect()
    }

    /// A crate given as (path, text) pairs.
    fn krate(files: &[(&str, &str)]) -> Graph {
        let map: HashMap<String, String> =
            files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
        build(&|p: &str| map.get(p).cloned()).unwrap()
    }

    fn edges(g: &Graph) -> Vec<String> {
        g.edges.iter().map(|(a, b)| format!("{a} -> {b}")).collect()
    }

    #[test]
    fn comments_strings_chars_and_lifetimes_are_not_paths() {
        let src = r####"
            //! see [`crate::a`]
            /// [`crate::b::X`]
            /* crate::c /* nested crate::d */ crate::e */
            fn f<'a>(x: &'a str) -> char {
                let _ = "crate::f \" crate::g";
                let _ = r#"crate::h "# ;
                let _ = br##"crate::i"##;
                let _ = b'"';
                let _ = '\'';
                'label: loop { break 'label; }
                '"'
            }
            fn g() { crate::real::Y::new(); }
        "####;
        assert_eq!(paths(&scan(src, &[])), ["crate::real::Y::new"]);
    }

    #[test]
    fn use_groups_self_aliases_globs_and_super() {
        let src = "use crate::{a::b, c::{self, D}, e as f};\n\
                   pub(crate) use super::super::g::*;\n\
                   use core::fmt;\n\
                   pub use child::Item as Renamed;";
        let m: Vec<String> = vec!["x".into(), "y".into()];
        let s = scan(src, &m);
        assert_eq!(
            paths(&s),
            [
                "crate::a::b",
                "crate::c",
                "crate::c::D",
                "crate::e",
                "super::super::g",
                "core::fmt",
                "child::Item"
            ]
        );
        // the glob is not a re-export by name; the alias is
        let names: Vec<&str> = s.reexports.iter().map(|r| r.1.as_str()).collect();
        assert_eq!(names, ["Renamed"]);
    }

    #[test]
    fn test_code_is_skipped_but_not_cfg_not_test() {
        let src = "#[cfg(test)]\nmod tests { use crate::t::A; }\n\
                   #[cfg(all(test, loom))]\n#[allow(unused)]\nuse crate::loom_only::B;\n\
                   #[cfg(test)]\nmod more;\n\
                   #[cfg(not(test))]\nuse crate::kept::C;\n\
                   fn f() -> [u8; 2] { crate::body::D }";
        let s = scan(src, &[]);
        assert_eq!(paths(&s), ["crate::kept::C", "crate::body::D"]);
        assert!(s.children.is_empty());
    }

    #[test]
    fn paths_resolve_to_files_through_longest_module_and_reexports() {
        let g = krate(&[
            ("src/lib.rs", "mod a; pub mod m; mod user; #[cfg(test)] mod t; mod tests;"),
            ("src/a.rs", "pub struct A; pub mod inline { pub use super::A as B; }"),
            ("src/m/mod.rs", "mod inner; pub use inner::Thing; pub struct Other;"),
            ("src/m/inner.rs", "pub struct Thing; fn f() { super::Other; }"),
            (
                "src/user.rs",
                "use crate::m::{Thing, Other};\n\
                 fn f() { let _ = crate::a::inline::B; }",
            ),
            ("src/t.rs", "use crate::user::X;"),
            ("src/tests.rs", "use crate::user::X;"),
        ]);
        assert_eq!(
            g.files,
            ["src/a.rs", "src/lib.rs", "src/m/inner.rs", "src/m/mod.rs", "src/user.rs"]
        );
        assert_eq!(
            edges(&g),
            [
                // `mod` declarations are containment, not edges
                "src/m/inner.rs -> src/m/mod.rs",
                "src/m/mod.rs -> src/m/inner.rs",
                "src/user.rs -> src/a.rs",
                "src/user.rs -> src/m/inner.rs",
                "src/user.rs -> src/m/mod.rs",
            ]
        );
    }

    #[test]
    fn tarjan_finds_loops_and_self_imports_only() {
        let n: Vec<String> = ["a", "b", "c", "d", "e"].iter().map(|s| s.to_string()).collect();
        let e: BTreeSet<(String, String)> =
            [("a", "b"), ("b", "c"), ("c", "a"), ("d", "d"), ("e", "a")]
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
        assert_eq!(cycles(&n, &e), vec![vec!["a", "b", "c"], vec!["d"]]);
        let dag: BTreeSet<(String, String)> =
            [("e", "a"), ("a", "b")].iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert!(cycles(&n, &dag).is_empty());
    }

    const TABLE: &[(&str, u32)] = &[("src/low/", 1), ("src/low/mod.rs", 2), ("src/", 3)];

    #[test]
    fn layers_by_longest_prefix() {
        assert_eq!(layer_of(TABLE, "src/low/x.rs"), Some(1));
        assert_eq!(layer_of(TABLE, "src/low/mod.rs"), Some(2));
        assert_eq!(layer_of(TABLE, "src/lib.rs"), Some(3));
        assert_eq!(layer_of(TABLE, "hal/x.rs"), None);
    }

    #[test]
    fn an_upward_import_fails_unless_listed_and_a_stale_entry_fails() {
        let g = krate(&[
            ("src/lib.rs", "mod low; mod high;"),
            ("src/low/mod.rs", "mod x;"),
            ("src/low/x.rs", "use crate::high::H;"),
            ("src/high.rs", "pub struct H; use crate::low::x::X;"),
        ]);
        let r = analyse(&g, TABLE).unwrap();
        assert_eq!(r.upward, [("src/low/x.rs".to_string(), "src/high.rs".to_string())]);
        assert_eq!(r.cycles, [vec!["src/high.rs", "src/low/x.rs"]]);
        let err = verdict(&r, "").unwrap_err();
        assert!(
            err.contains("new violation") && err.contains("up src/low/x.rs -> src/high.rs"),
            "{err}"
        );
        assert!(err.contains("cycle src/high.rs src/low/x.rs"), "{err}");
        let known = "# comment\nup src/low/x.rs -> src/high.rs\ncycle src/high.rs  src/low/x.rs\n";
        assert!(verdict(&r, known).is_ok());
        let err = verdict(&r, &format!("{known}up src/high.rs -> src/lib.rs\n")).unwrap_err();
        assert!(err.contains("stale entry") && !err.contains("new violation"), "{err}");
    }

    #[test]
    fn a_file_without_a_layer_fails() {
        let g = krate(&[("src/lib.rs", "mod x;"), ("src/x.rs", "")]);
        assert!(analyse(&g, &[("src/lib.rs", 1)]).unwrap_err().contains("src/x.rs has no layer"));
    }

    #[test]
    fn every_driver_file_has_a_layer() {
        let root = root();
        let g = build(&|rel: &str| std::fs::read_to_string(root.join(rel)).ok()).unwrap();
        assert!(g.files.len() > 40);
        analyse(&g, LAYERS).unwrap();
    }
}
