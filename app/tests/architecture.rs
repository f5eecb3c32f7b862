//! The studio's layering, checked on its sources: the graph view knows nothing of the
//! studio, features never reach for the `Studio` type, and no two studio modules import
//! each other (directly or around a circle), so the dependencies point one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The studio itself: its state, the frame and the files that apply commands to it. They
/// may use every feature; features may not use them.
const ROOT: &[&str] = &[
    "mod",
    "app",
    "canvas",
    "command_handling",
    "menus",
    "opening",
    "shortcuts",
    "view",
];

fn studio_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/studio")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("the studio's sources") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `quantize/panel.rs` → ("quantize", "panel"); `quantize/mod.rs` → ("quantize", "mod").
fn module_of(file: &Path) -> (String, String) {
    let rel = file.strip_prefix(studio_dir()).expect("under studio/");
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    match parts.as_slice() {
        [file] => (file.clone(), String::new()),
        [dir, file, ..] => (dir.clone(), file.clone()),
        [] => unreachable!(),
    }
}

/// The studio-level modules a file names: `super::x` (from a top-level file),
/// `super::super::x` (from a folder's file), `crate::studio::x`; `Studio` for the type.
fn references(file: &Path, text: &str) -> BTreeSet<String> {
    let in_folder = file.parent() != Some(studio_dir().as_path());
    let prefixes: &[&str] = if in_folder {
        &["super::super::", "crate::studio::"]
    } else {
        &["super::", "crate::studio::"]
    };
    let mut out = BTreeSet::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
        for prefix in prefixes {
            let mut rest = line;
            while let Some(i) = rest.find(prefix) {
                rest = &rest[i + prefix.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '{')
                    .collect();
                if name.starts_with('{') {
                    // `super::{a, b}`: the names up to the closing brace.
                    let end = rest.find('}').unwrap_or(rest.len());
                    out.extend(
                        rest[1..end]
                            .split(',')
                            .map(|s| s.trim().split("::").next().unwrap_or("").to_owned())
                            .filter(|s| !s.is_empty()),
                    );
                } else if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Depth-first search over the features; a back edge is an import circle.
fn visit<'a>(
    m: &'a str,
    uses: &'a BTreeMap<String, BTreeSet<String>>,
    state: &mut BTreeMap<&'a str, bool>,
    path: &mut Vec<&'a str>,
    problems: &mut Vec<String>,
) {
    match state.get(m) {
        Some(true) => return,
        Some(false) => {
            problems.push(format!("import circle: {} → {m}", path.join(" → ")));
            return;
        }
        None => {}
    }
    state.insert(m, false);
    path.push(m);
    for d in uses.get(m).into_iter().flatten() {
        if !ROOT.contains(&d.as_str()) {
            visit(d, uses, state, path, problems);
        }
    }
    path.pop();
    state.insert(m, true);
}

#[test]
fn the_studio_is_layered() {
    let mut files = Vec::new();
    rust_files(&studio_dir(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f).0).collect();
    // Module → the sibling modules it uses.
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let (module, _) = module_of(f);
        let refs = references(f, &text);
        let root = ROOT.contains(&module.as_str());
        if refs.contains("Studio") && !root {
            problems.push(format!("{}: a feature uses the Studio type", f.display()));
        }
        if module == "graph_view" {
            for r in refs
                .iter()
                .filter(|r| *r != "theme" && modules.contains(*r) && *r != "graph_view")
            {
                problems.push(format!("{}: the graph view uses studio module `{r}`", f.display()));
            }
        }
        let entry = uses.entry(module.clone()).or_default();
        for r in refs {
            if r != module && modules.contains(&r) {
                entry.insert(r);
            }
        }
    }
    // Features never use the root layer.
    for (m, deps) in &uses {
        if ROOT.contains(&m.as_str()) {
            continue;
        }
        for d in deps.iter().filter(|d| ROOT.contains(&d.as_str())) {
            problems.push(format!("feature `{m}` uses the studio's `{d}`"));
        }
    }
    // No circle among the features (depth-first search for a back edge).
    let mut state = BTreeMap::new();
    for m in uses.keys().filter(|m| !ROOT.contains(&m.as_str())) {
        visit(m, &uses, &mut state, &mut Vec::new(), &mut problems);
    }
    for (m, deps) in &uses {
        println!("{m:18} uses {}", deps.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check sees the modules it is about.
    for m in ["graph_view", "quantize", "optimize", "canvas", "pipeline"] {
        assert!(uses.contains_key(m), "no module {m}");
    }
    assert!(uses["canvas"].contains("graph_view") && uses["optimize"].contains("graph_view"));
}

/// The parts of the core the app reaches only through `npu_core::pipeline`: the binary
/// format, the emulator and the integer reference.
const BEHIND_THE_FACADE: &[&str] = &["compiler::binary", "emulator::", "sim::integer"];

/// Every source file of the app (studio and command line) names those parts only through
/// the facade: no `use`, path or doc link to them, outside comments.
#[test]
fn the_app_reaches_the_binary_emulator_and_integer_reference_through_the_facade() {
    let mut files = Vec::new();
    rust_files(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim();
            if code.starts_with("//") && !code.starts_with("//!") && !code.starts_with("///") {
                continue;
            }
            for p in BEHIND_THE_FACADE {
                if code.contains(p) {
                    problems.push(format!("{}:{}: {p} (use npu_core::pipeline)", f.display(), n + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check reads the files that use the facade for these.
    for name in ["emulate.rs", "integer.rs", "inspect.rs"] {
        assert!(files.iter().any(|f| f.ends_with(name)), "no {name} under app/src");
    }
}
