//! The tidy check that a crate's modules import only downward: no two
//! top-level modules of a published crate reach each other (directly or
//! round a longer loop), and none reaches a sibling through a `lib.rs`
//! re-export (`use crate::Name`), which hides such a loop from the eye.
//!
//! Read as text, from each module's code (comments, `#[cfg(test)]`
//! sections and test files left out; `#[cfg(doc)]` imports count, since a
//! doc link's import is an import): every `crate::module` path, in `use`
//! items and inline alike.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Test-only files inside `src/`, whose imports are the tests' own.
const TEST_FILES: &[&str] = &["tests.rs", "loom_tests.rs", "loom_model.rs"];

/// The problems of the crate whose sources are under `src`.
pub fn check(crate_name: &str, src: &Path, files: &[PathBuf]) -> Vec<String> {
    let path = Regex::new(r"crate::(\{)?\s*([A-Za-z_][A-Za-z0-9_]*)").expect("a valid regex");
    let grouped = Regex::new(r"crate::\{([^}]*)\}").expect("a valid regex");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let Some(module) = top_module(relative) else {
            continue;
        };
        let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if TEST_FILES.contains(&name) || relative.components().any(|c| c.as_os_str() == "test_util")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in code(&text) {
            let mut targets: Vec<String> = Vec::new();
            for group in grouped.captures_iter(&line) {
                for item in group[1].split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim();
                    if !first.is_empty() {
                        targets.push(first.to_owned());
                    }
                }
            }
            for found in path.captures_iter(&line) {
                if found.get(1).is_none() {
                    targets.push(found[2].to_owned());
                }
            }
            for target in targets {
                let through_root = target.starts_with(|c: char| c.is_ascii_uppercase());
                if through_root {
                    problems.push(format!(
                        "{crate_name}: `{}` imports `crate::{target}` through lib.rs; name the module that defines it",
                        relative.display()
                    ));
                } else if target != module && target != "self" {
                    edges.entry(module.clone()).or_default().insert(target);
                }
            }
        }
    }
    for cycle in cycles(&edges) {
        problems.push(format!(
            "{crate_name}: modules import each other in a circle: {}",
            cycle.join(" → ")
        ));
    }
    problems
}

/// The top-level module a file under `src/` belongs to; `None` for
/// `lib.rs` (the root, which re-exports everything) and `main.rs`.
fn top_module(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    if relative.components().count() == 1 {
        let stem = first.strip_suffix(".rs")?;
        return (stem != "lib" && stem != "main").then(|| stem.to_owned());
    }
    Some(first.to_owned())
}

/// The lines of code of `text`: comments stripped, a `#[cfg(test)] mod
/// tests;` declaration left out, and an inline `#[cfg(test)]` module (the
/// end of a file) left out.
fn code(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut test_item = false;
    for raw in text.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if test_item {
            // `mod tests;` is one line; an inline test module runs to
            // the end of the file, as weir's do.
            if line.ends_with(';') {
                test_item = false;
                continue;
            }
            break;
        }
        if line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test") {
            test_item = true;
            continue;
        }
        lines.push(line.to_owned());
    }
    lines
}

/// Each strongly connected set of two or more modules, as one loop's
/// members in order of name.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let reaches = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for next in edges.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reaches(n))).collect();
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reach[n].contains(*n) {
            continue;
        }
        let members: Vec<String> = nodes
            .iter()
            .filter(|m| reach[n].contains(**m) && reach[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        done.extend(members.iter().cloned());
        if members.len() > 1 {
            found.push(members);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_of_two_or_three_is_found_and_a_chain_is_not() {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut add = |a: &str, b: &str| {
            edges.entry(a.into()).or_default().insert(b.into());
        };
        add("limiter", "leases");
        add("leases", "limiter");
        add("a", "b");
        add("b", "c");
        add("c", "a");
        add("answer", "error");
        assert_eq!(
            cycles(&edges),
            vec![
                vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
                vec!["leases".to_owned(), "limiter".to_owned()],
            ]
        );
    }

    #[test]
    fn comments_and_tests_are_not_code_and_doc_imports_are() {
        let text = "use crate::a::X; // crate::b\n#[cfg(test)]\nmod tests;\n#[cfg(doc)]\nuse crate::c::Y;\nfn f() { crate::d::g(); }\n#[cfg(test)]\nmod tests { use crate::e; }\n";
        assert_eq!(
            code(text),
            [
                "use crate::a::X;",
                "#[cfg(doc)]",
                "use crate::c::Y;",
                "fn f() { crate::d::g(); }"
            ]
        );
    }
}
