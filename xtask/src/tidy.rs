//! `cargo xtask tidy`: what no compiler checks, checked on every test run.
//!
//! * **Paths in docs exist.** A repository path a doc names in backticks
//!   (`rate/src/lib.rs`, `rate/tests/`) and every relative Markdown
//!   link must lead to a file or folder that is there, so a file move
//!   cannot leave a doc pointing nowhere. Paths are read from Markdown
//!   files and from Rust comments; a path is resolved from the repository
//!   root, the crate of the file naming it, or the file's own folder.
//! * **No tracker numbers.** Code, tests and docs say what they mean, not
//!   which ticket asked for it.
//! * **Dependencies point downward.** Each crate's normal dependencies on
//!   weir's crates are within what ARCHITECTURE.md allows it, and the
//!   crates that must stay small name none of the integrations (no HTTP
//!   stack or store client in weir-rate, no store in weir-tower, no store
//!   in another store).
//! * **One MSRV, stated once.** Every crate takes the workspace's
//!   `rust-version`, and the README names that version.
//! * **Modules import downward.** No two modules of a published crate
//!   import each other, directly or round a loop, and none imports a
//!   sibling's item through a `lib.rs` re-export (`module_cycles.rs`).
//! * **Docs cannot drift.** Features named in prose exist, the README's
//!   crate table lists each crate's features, every published crate has a
//!   README, every Rust file belongs to a crate, `ALLOWED` and
//!   ARCHITECTURE.md's diagram agree with the real dependencies, and the
//!   algorithms' bounds are tabulated once (`doc_drift.rs`).

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What each published crate may depend on (normal dependencies only;
/// dev-dependencies are for tests and examples). The table of
/// ARCHITECTURE.md, "Dependencies point downward".
const ALLOWED: &[(&str, &[&str])] = &[
    ("weir-primitives", &[]),
    ("weir-limits", &["weir-primitives"]),
    ("weir-timeout", &["weir-primitives"]),
    (
        "weir-rate",
        &["weir-limits", "weir-primitives", "weir-timeout"],
    ),
    ("weir-adaptive", &["weir-limits", "weir-primitives"]),
    ("weir-store", &["weir-rate", "weir-primitives"]),
    (
        "weir-redis",
        &["weir-rate", "weir-store", "weir-primitives"],
    ),
    (
        "weir-memcached",
        &["weir-rate", "weir-store", "weir-primitives"],
    ),
    (
        "weir-tower",
        &["weir-rate", "weir-adaptive", "weir-timeout", "weir-limits"],
    ),
    ("weir-hhh", &["weir-limits", "weir-primitives"]),
    (
        "weir-pingora",
        &["weir-rate", "weir-limits", "weir-adaptive"],
    ),
];

/// Outside crates a weir crate must not depend on, whatever the feature:
/// the integrations live in crates of their own.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "weir-rate",
        &[
            "redis",
            "memcache",
            "tower",
            "http",
            "http-body",
            "axum",
            "hyper",
            "tracing",
            "metrics",
        ],
    ),
    (
        "weir-adaptive",
        &["tower", "http", "axum", "hyper", "redis", "memcache"],
    ),
    (
        "weir-store",
        &["redis", "memcache", "tower", "http", "axum", "hyper"],
    ),
    ("weir-tower", &["redis", "memcache"]),
    ("weir-redis", &["memcache", "tower", "http", "axum"]),
    ("weir-memcached", &["redis", "tower", "http", "axum"]),
    (
        "weir-pingora",
        &[
            "redis",
            "memcache",
            "weir-store",
            "weir-redis",
            "weir-memcached",
            "weir-tower",
            "tower",
        ],
    ),
];

/// Crates only tests, benchmarks or workflows may depend on.
const NOT_A_LIBRARY_DEPENDENCY: &[&str] = &[
    "weir-test-support",
    "weir-bench-suite",
    "xtask",
    "criterion",
    "proptest",
];

/// Runs every check; `Err` lists every problem found.
pub fn tidy(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    let files = tracked_files(root)?;
    problems.extend(doc_paths(root, &files));
    problems.extend(tracker_numbers(root, &files));
    let packages = workspace_packages(root)?;
    problems.extend(dependencies(&packages));
    problems.extend(one_msrv(root, &packages));
    problems.extend(module_imports(root, &files, &packages));
    problems.extend(crate::doc_drift::check(root, &files, &packages, ALLOWED));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        ))
    }
}

fn tracked_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("running git ls-files: {e}"))?;
    if !out.status.success() {
        return Err("git ls-files failed".to_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|p| root.join(p).is_file())
        .collect())
}

fn is_text(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("rs" | "md" | "toml" | "c" | "h" | "sh")
    ) || path.file_name().is_some_and(|n| n == "run")
}

/// Backticked repository paths and relative Markdown links that lead
/// nowhere.
fn doc_paths(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let top: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.components().next())
        .filter_map(|c| c.as_os_str().to_str().map(str::to_owned))
        .filter(|c| root.join(c).is_dir())
        .collect();
    let crate_relative = ["src", "tests", "examples", "benches", "bpf"];
    let backticked = Regex::new(r"`([A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-/]*)`").expect("a valid regex");
    let link = Regex::new(r"\]\(([^)\s]+)\)").expect("a valid regex");
    let mut problems = Vec::new();
    for file in files {
        let ext = file.extension().and_then(|e| e.to_str());
        if !matches!(ext, Some("md" | "rs")) {
            continue;
        }
        // The generated report names files of the run it records.
        if file.starts_with("docs/report.md") || file.starts_with("api") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        let dir = file.parent().unwrap_or(Path::new(""));
        let krate = file
            .components()
            .next()
            .map(|c| PathBuf::from(c.as_os_str()));
        for (number, line) in text.lines().enumerate() {
            // In Rust, only comments name paths for a reader.
            let prose = match ext {
                Some("rs") => line.trim_start().starts_with("//"),
                _ => true,
            };
            if !prose {
                continue;
            }
            for cap in backticked.captures_iter(line) {
                let named = cap[1].trim_end_matches('/');
                let first = named.split('/').next().unwrap_or("");
                let looks_like_ours = top.contains(first) || crate_relative.contains(&first);
                if !looks_like_ours || named.contains("..") {
                    continue;
                }
                let exists = root.join(named).exists()
                    || krate
                        .as_ref()
                        .is_some_and(|k| root.join(k).join(named).exists())
                    || root.join(dir).join(named).exists();
                if !exists {
                    problems.push(format!(
                        "{}:{}: names `{}`, which does not exist",
                        file.display(),
                        number + 1,
                        &cap[1]
                    ));
                }
            }
            if ext == Some("md") {
                for cap in link.captures_iter(line) {
                    let target = cap[1].split('#').next().unwrap_or("");
                    if target.is_empty() || target.contains("://") || target.starts_with("mailto:")
                    {
                        continue;
                    }
                    if !root.join(dir).join(target).exists() {
                        problems.push(format!(
                            "{}:{}: links to `{}`, which does not exist",
                            file.display(),
                            number + 1,
                            target
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// Mentions of a tracker's ticket numbers.
fn tracker_numbers(root: &Path, files: &[PathBuf]) -> Vec<String> {
    // Built from parts so that this file does not match itself.
    let pattern = format!(r"(?i)\b{}s? #?[0-9]+\b", "issue");
    let ticket = Regex::new(&pattern).expect("a valid regex");
    let mut problems = Vec::new();
    for file in files.iter().filter(|f| is_text(f)) {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if let Some(m) = ticket.find(line) {
                problems.push(format!(
                    "{}:{}: cites a tracker number (\"{}\"): say what it means instead",
                    file.display(),
                    number + 1,
                    m.as_str()
                ));
            }
        }
    }
    problems
}

/// The workspace's packages, as `cargo metadata` describes them.
fn workspace_packages(root: &Path) -> Result<Vec<serde_json::Value>, String> {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("reading cargo metadata: {e}"))?;
    Ok(meta["packages"].as_array().cloned().unwrap_or_default())
}

/// Every package declares the same `rust-version`, and the README states
/// it where it names the toolchain a newcomer needs.
fn one_msrv(root: &Path, packages: &[serde_json::Value]) -> Vec<String> {
    let versions: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["rust_version"].as_str().unwrap_or("none"))
        .collect();
    let [version] = versions.iter().copied().collect::<Vec<_>>()[..] else {
        return vec![format!(
            "crates declare different rust-version values {versions:?}: take the workspace's"
        )];
    };
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    let stated = format!("({version} or later");
    if readme.contains(&stated) {
        Vec::new()
    } else {
        vec![format!(
            "README.md does not state the MSRV as \"{stated}\" (the workspace's rust-version)"
        )]
    }
}

/// Each published crate's modules import only downward
/// ([`crate::module_cycles`]).
fn module_imports(root: &Path, files: &[PathBuf], packages: &[serde_json::Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or("");
        if !ALLOWED.iter().any(|(published, _)| *published == name) {
            continue;
        }
        let Some(dir) = package["manifest_path"]
            .as_str()
            .map(Path::new)
            .and_then(Path::parent)
        else {
            continue;
        };
        let src = dir.join("src");
        let sources: Vec<PathBuf> = files
            .iter()
            .map(|f| root.join(f))
            .filter(|f| f.starts_with(&src) && f.extension().is_some_and(|e| e == "rs"))
            .collect();
        problems.extend(crate::module_cycles::check(name, &src, &sources));
    }
    problems
}

/// Whether `package` is published (its `Cargo.toml` lacks `publish = false`).
pub fn is_published(package: &serde_json::Value) -> bool {
    !package["publish"].as_array().is_some_and(Vec::is_empty)
}

/// `package`'s normal dependencies, optional ones included: those without
/// a `kind` (dev and build dependencies have one).
pub fn normal_dependencies(
    package: &serde_json::Value,
) -> impl Iterator<Item = &serde_json::Value> {
    package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|dep| dep["kind"].is_null())
}

/// Each crate's normal dependencies against the tables above.
fn dependencies(packages: &[serde_json::Value]) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let forbidden: BTreeMap<&str, &[&str]> = FORBIDDEN.iter().copied().collect();
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or("");
        let publish = is_published(package);
        for dep in normal_dependencies(package) {
            let dep_name = dep["name"].as_str().unwrap_or("");
            // `[target.'cfg(loom)'.dependencies]` is the loom shim's.
            let for_loom = dep["target"].as_str().is_some_and(|t| t.contains("loom"));
            if publish && NOT_A_LIBRARY_DEPENDENCY.contains(&dep_name) {
                problems.push(format!(
                    "{name} depends on {dep_name}, which only tests, benchmarks and workflows may use"
                ));
            }
            if publish && dep_name == "loom" && !for_loom {
                problems.push(format!("{name} depends on loom outside `cfg(loom)`"));
            }
            if dep_name.starts_with("weir-") {
                match allowed.get(name) {
                    Some(ok) if !ok.contains(&dep_name) => problems.push(format!(
                        "{name} depends on {dep_name}: not a crate below it (ARCHITECTURE.md)"
                    )),
                    None if publish => problems.push(format!(
                        "{name} is published but has no row in xtask/src/tidy.rs ALLOWED"
                    )),
                    _ => {}
                }
            }
            if forbidden.get(name).is_some_and(|no| no.contains(&dep_name)) {
                problems.push(format!(
                    "{name} depends on {dep_name}, which belongs in an integration crate"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_name_each_crate_once() {
        let names: BTreeSet<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), ALLOWED.len());
        // A crate never lists itself, nor one above it in the table.
        for (i, (name, deps)) in ALLOWED.iter().enumerate() {
            assert!(!deps.contains(name));
            for dep in *deps {
                let at = ALLOWED.iter().position(|(n, _)| n == dep).unwrap();
                assert!(at < i, "{name} may depend on {dep}, listed after it");
            }
        }
    }
}
