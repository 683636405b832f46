//! The layer rules of docs/architecture.md, checked on the source: every module lives in a
//! layer folder, a layer imports only the layers before it in [`LAYERS`], and no two modules
//! import each other, directly or round a loop.
//!
//! The check reads the `crate::` and `super::` paths of every file under `src/` (the same text
//! the compiler reads), so a new upward import or cycle fails `cargo test`. A cycle between
//! layers needs an upward import, so the order check also rules those out; the module check
//! catches loops inside one layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, first to last. A file in layer `n` may import layers `0..=n`.
const LAYERS: &[&str] = &[
    "base",
    "sys",
    "doctor",
    "wire",
    "uring",
    "metrics",
    "transport",
    "runtime",
    "session",
    "workload",
    "compat",
    "analysis",
    "report",
];

/// Upward imports that remain until a shared piece leaves the module that uses it:
/// (importing file, imported module, the split that removes it). The test also fails when
/// an entry no longer occurs, so this list only shrinks.
const KNOWN_UPWARD: &[(&str, &str, &str)] = &[];

/// Module cycles that remain, each as its sorted members joined by ` `, with the split that
/// breaks it. Stale entries fail too.
const KNOWN_CYCLES: &[(&str, &str)] = &[];

/// Files outside the layers: the crate root and this test.
const ROOT_FILES: &[&str] = &["lib.rs", "layer_rules.rs"];

/// One source file: its path under `src/` and its text.
struct Source {
    path: String,
    text: String,
}

fn module_of(path: &str) -> String {
    let p = path.trim_end_matches(".rs");
    let p = p.strip_suffix("/mod").unwrap_or(p);
    p.replace('/', "::")
}

fn layer_of(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
}

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == layer)
}

/// The text without `//` comments (doc comments cite paths that are not imports).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let cut = line.match_indices("//").find(|(i, _)| *i == 0 || line.as_bytes()[i - 1].is_ascii_whitespace());
        out.push_str(cut.map_or(line, |(i, _)| &line[..i]));
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads a path tree at `s` (after `crate::`): `a::b::C`, `a::{b, c::{D, E}}`; returns the
/// leaf paths. Stops at the first character that cannot continue a path.
fn path_tree(s: &str) -> Vec<Vec<String>> {
    fn tree(s: &[char], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut segs = prefix;
        loop {
            while *i < s.len() && s[*i].is_whitespace() {
                *i += 1;
            }
            if *i < s.len() && s[*i] == '{' {
                *i += 1;
                loop {
                    while *i < s.len() && (s[*i].is_whitespace() || s[*i] == ',') {
                        *i += 1;
                    }
                    if *i >= s.len() || s[*i] == '}' {
                        *i += 1;
                        return;
                    }
                    let before = *i;
                    tree(s, i, segs.clone(), out);
                    // skip `as alias` and anything else up to the next separator
                    while *i < s.len() && s[*i] != ',' && s[*i] != '}' {
                        *i += 1;
                    }
                    if *i == before {
                        *i += 1;
                    }
                }
            }
            let start = *i;
            while *i < s.len() && is_ident(s[*i]) {
                *i += 1;
            }
            if *i == start {
                out.push(segs);
                return;
            }
            segs.push(s[start..*i].iter().collect());
            if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
                *i += 2;
                continue;
            }
            out.push(segs);
            return;
        }
    }
    let chars: Vec<char> = s.chars().take(4000).collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, Vec::new(), &mut out);
    out
}

/// Every path a file names: (leading `super`s, or None for `crate::`; segments; in test code).
fn paths_in(text: &str) -> Vec<(Option<usize>, Vec<String>, bool)> {
    let code = code_of(text);
    let test_from = code.find("#[cfg(test)]").unwrap_or(code.len());
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && (is_ident(code[..at].chars().last().unwrap_or(' ')) || code[..at].ends_with('$')) {
            continue;
        }
        for p in path_tree(&code[at + "crate::".len()..]) {
            out.push((None, p, at >= test_from));
        }
    }
    let mut i = 0;
    while let Some(off) = code[i..].find("super::") {
        let at = i + off;
        if at > 0 && is_ident(code[..at].chars().last().unwrap_or(' ')) || code[..at].ends_with("super::") {
            i = at + 1;
            continue;
        }
        let mut n = 0;
        let mut rest = &code[at..];
        while let Some(r) = rest.strip_prefix("super::") {
            n += 1;
            rest = r;
        }
        for p in path_tree(rest) {
            out.push((Some(n), p, at >= test_from));
        }
        i = at + 1;
    }
    out
}

/// The module a path names: its longest prefix that is a module; crate-root names go through
/// the root's `pub use` lines.
fn target(segs: &[String], modules: &BTreeSet<String>, root_uses: &BTreeMap<String, String>) -> Option<String> {
    (1..=segs.len())
        .rev()
        .map(|n| segs[..n].join("::"))
        .find(|m| modules.contains(m))
        .or_else(|| segs.first().and_then(|s| root_uses.get(s).cloned()))
}

/// Names the crate root re-exports, with the module each comes from.
fn root_uses(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code_of(lib).split(';') {
        let Some(body) = stmt.trim().strip_prefix("pub use ") else { continue };
        let body = body.strip_prefix("crate::").unwrap_or(body);
        for p in path_tree(body) {
            if let (Some(m), Some(last)) = (target(&p, modules, &BTreeMap::new()), p.last()) {
                out.insert(last.clone(), m);
            }
        }
    }
    out
}

/// Tarjan's strongly connected components with more than one member.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let l = t.low[w.as_str()].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w.as_str()) {
                let l = t.index[w.as_str()].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_string());
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
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every breach of the rules, one line each.
fn check(sources: &[Source], known_up: &[(&str, &str, &str)], known_cycles: &[(&str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    let modules: BTreeSet<String> =
        sources.iter().filter(|s| !ROOT_FILES.contains(&s.path.as_str())).map(|s| module_of(&s.path)).collect();
    let lib = sources.iter().find(|s| s.path == "lib.rs").map_or("", |s| s.text.as_str());
    let roots = root_uses(lib, &modules);
    let lib_code = code_of(lib);
    let declared: BTreeSet<&str> =
        lib_code.lines().filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';')).collect();
    if declared != LAYERS.iter().copied().collect() {
        problems.push(format!("lib.rs declares the modules {declared:?}, the layers are {LAYERS:?}"));
    }
    let mut seen_up = BTreeSet::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        if ROOT_FILES.contains(&s.path.as_str()) {
            continue;
        }
        let me = module_of(&s.path);
        let Some(my_rank) = rank(layer_of(&me)).filter(|_| s.path.contains('/')) else {
            problems.push(format!("{}: outside the layer folders {LAYERS:?}", s.path));
            continue;
        };
        for (supers, segs, in_tests) in paths_in(&s.text) {
            let absolute = match supers {
                None => segs,
                Some(n) => {
                    // `super` from a mod.rs names its parent folder's module the same way
                    let mut base: Vec<String> = me.split("::").map(str::to_string).collect();
                    if base.len() < n {
                        continue;
                    }
                    base.truncate(base.len() - n);
                    base.extend(segs);
                    base
                }
            };
            let Some(to) = target(&absolute, &modules, &roots) else { continue };
            if to == me {
                continue;
            }
            let to_rank = rank(layer_of(&to)).unwrap_or(0);
            if to_rank > my_rank {
                if known_up.iter().any(|(f, m, _)| *f == s.path && *m == to) {
                    seen_up.insert((s.path.clone(), to.clone()));
                } else {
                    let line = format!("{}: imports {to} from the later layer `{}`", s.path, layer_of(&to));
                    if !problems.contains(&line) {
                        problems.push(line);
                    }
                }
            }
            if !in_tests {
                graph.entry(me.clone()).or_default().insert(to);
            }
        }
    }
    for (f, m, why) in known_up {
        if !seen_up.contains(&(f.to_string(), m.to_string())) {
            problems.push(format!("KNOWN_UPWARD entry ({f}, {m}) no longer occurs ({why}): delete it"));
        }
    }
    let found: Vec<String> = cycles(&graph).into_iter().map(|c| c.join(" ")).collect();
    for c in &found {
        if !known_cycles.iter().any(|(k, _)| k == c) {
            problems.push(format!("import cycle between modules: {c}"));
        }
    }
    for (k, why) in known_cycles {
        if !found.contains(&k.to_string()) {
            problems.push(format!("KNOWN_CYCLES entry `{k}` no longer occurs ({why}): delete it"));
        }
    }
    problems
}

fn read_tree(dir: &Path, root: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("reading src/").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            read_tree(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let path = p.strip_prefix(root).expect("under src/").to_string_lossy().replace('\\', "/");
            out.push(Source { path, text: std::fs::read_to_string(&p).expect("reading a source file") });
        }
    }
}

#[test]
fn the_engine_keeps_its_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_tree(&root, &root, &mut sources);
    assert!(sources.len() > 40, "read {} files under {}", sources.len(), root.display());
    let problems = check(&sources, KNOWN_UPWARD, KNOWN_CYCLES);
    assert!(
        problems.is_empty(),
        "layer rules broken (docs/architecture.md; the layers, first to last: {LAYERS:?}):\n  {}",
        problems.join("\n  ")
    );
}

#[cfg(test)]
mod checker {
    use super::*;

    fn src(path: &str, text: &str) -> Source {
        Source { path: path.into(), text: text.into() }
    }

    fn lib() -> Source {
        let mods: String = LAYERS.iter().map(|l| format!("pub mod {l};\n")).collect();
        src("lib.rs", &format!("{mods}pub use base::error::{{Error, Result}};\n"))
    }

    #[test]
    fn an_upward_import_is_named() {
        let files = [
            lib(),
            src("base/error.rs", "pub struct Error;"),
            src("base/units.rs", "use crate::{Error, report::text::Table};\n"),
            src("report/text.rs", "use crate::base::error::Error;\n/// crate::transport is only a comment\n"),
        ];
        let p = check(&files, &[], &[]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("base/units.rs: imports report::text"), "{p:?}");
    }

    #[test]
    fn a_cycle_inside_a_layer_is_named_and_known_entries_must_still_occur() {
        let files = [
            lib(),
            src("workload/a.rs", "use super::b::X;\n"),
            src(
                "workload/b.rs",
                "pub fn f() { crate::workload::a::g(); }\n#[cfg(test)]\nmod tests { use crate::report::x; }\n",
            ),
            src("report/x.rs", ""),
        ];
        let p = check(&files, &[("workload/b.rs", "report::x", "test fixture")], &[]);
        assert_eq!(p, vec!["import cycle between modules: workload::a workload::b".to_string()]);
        let p = check(&files, &[("workload/b.rs", "report::x", "fixture")], &[("workload::a workload::b", "known")]);
        assert!(p.is_empty(), "{p:?}");
        let p = check(&files[..2], &[], &[("workload::a workload::b", "known")]);
        assert!(p.iter().any(|l| l.contains("no longer occurs")), "{p:?}");
    }

    #[test]
    fn files_outside_the_layers_and_a_changed_layer_list_are_named() {
        let files = [src("lib.rs", "pub mod base;\n"), src("stray.rs", "")];
        let p = check(&files, &[], &[]);
        assert!(p.iter().any(|l| l.starts_with("lib.rs declares the modules")), "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("stray.rs: outside")), "{p:?}");
    }
}
