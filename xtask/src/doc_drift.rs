//! The tidy checks that keep the docs from drifting away from the code:
//! each compares a statement the docs make with the source of truth it
//! restates (a `Cargo.toml`, `cargo metadata`, the tree itself), so a
//! change to one that forgets the other fails `cargo xtask tidy`.
//!
//! "Prose" below means every line of a Markdown file (all of them but the
//! generated `docs/report.md`, which records a run and is rewritten by
//! the next), the `//!` and `///` lines of Rust files, and the `#` comment
//! lines of `Cargo.toml` files. Consecutive prose lines are read as one
//! text, so a mention broken across two lines is still found.
//!
//! * **Features named in prose exist.** A crate's features move between
//!   crates (weir-rate's integrations became crates of their own); a doc
//!   that still names the old home sends a user to a feature that is not
//!   there. Three forms are recognised, and only these (NAME is a feature
//!   name of lowercase letters, digits, `-` and `_`; CRATE a weir crate):
//!   - "CRATE's `NAME` feature" (or "features"; the crate name bare or in
//!     backticks, as in "`weir-tower`'s `NAME` feature"): NAME must be
//!     declared by CRATE;
//!   - "`CRATE/NAME`", the whole backticked text, as Cargo's `--features`
//!     writes it: NAME must be declared by CRATE (a backticked
//!     `weir-…/…` whose first part is not a workspace crate is a path
//!     and is skipped);
//!   - "feature `NAME`", which covers "(feature `NAME`)", unless a
//!     backticked word comes just before it ("the `bpf` feature `kernel`"
//!     names a module after the feature): NAME must be declared by the
//!     crate the text is about. That is the workspace member whose folder
//!     holds the file; for a file outside every member, the crates named
//!     by the innermost enclosing Markdown heading that names any
//!     (ARCHITECTURE.md's "### weir-store (`store/`)" makes its section
//!     weir-store's); without such a heading, any crate of the workspace.
//!
//!   Forms such as "the `NAME` feature" are not checked: they as often
//!   name a dependency's feature (plotters', redis') as weir's own.
//! * **The README's crate table lists each crate's features.** The root
//!   README's table with the columns "crate | what it gives you |
//!   features" gives, per crate, the backticked features it declares
//!   (comma-separated; an empty cell for none), each marked "(default)"
//!   exactly when the crate's `default` turns it on. Compared with the
//!   features `cargo metadata` reports, leaving out `default` itself and
//!   the features of [`HIDDEN_FEATURES`]. Each published crate has a row
//!   unless [`NOT_IN_CRATE_TABLE`] says why not.
//! * **Every published crate has a README.** A workspace member without
//!   `publish = false` has `README.md` in its folder, which crates.io
//!   shows as the crate's page.
//! * **Every Rust file belongs to a crate.** A `.rs` file of the
//!   repository (tracked or not ignored, so never under `target/`) lies in
//!   a workspace member's src, tests, benches or examples folder, is its
//!   `build.rs`, or is a target its `Cargo.toml` names (or in that
//!   target's folder, when the folder is not the member's own). A file
//!   nothing builds is neither compiled nor tested, yet reads as code that
//!   works; a sketch worth keeping belongs in `docs/` as Markdown.
//! * **The dependency table and the diagram agree with the dependencies.**
//!   tidy's `ALLOWED` table is what each published crate may depend on,
//!   and ARCHITECTURE.md's diagram (the first fenced block under "Bird's
//!   eye view") draws it. ASCII art is not parsed for edges; instead
//!   three rules hold the three together: every real normal dependency
//!   between weir's crates is in `ALLOWED` (tidy's dependency check);
//!   every edge in `ALLOWED` is a real normal dependency (optional ones
//!   included) in `cargo metadata`, so the table cannot keep an edge the
//!   code dropped; and every crate in `ALLOWED` is named in the diagram,
//!   which names no crate the workspace lacks.
//! * **The algorithms' bounds are tabulated once.** The table of each
//!   rate-limiting algorithm's state and bound lives in weir-rate's crate
//!   documentation (`rate/src/lib.rs`, "The algorithms' bounds"), which
//!   rustdoc users see; every other doc links to it. A table whose header
//!   row begins with the cells "algorithm" and "state per key" (backticks,
//!   brackets and case ignored) anywhere else in the prose is a copy that
//!   would drift from it.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Declared features the README's crate table leaves out, each with the
/// reason.
const HIDDEN_FEATURES: &[(&str, &str, &str)] = &[(
    "weir-hhh",
    "test-util",
    "fixtures for weir-hhh's own tests and the bench suite, hidden from the \
     documentation and outside the supported API",
)];

/// Published crates without a row in the README's crate table, each with
/// the reason.
const NOT_IN_CRATE_TABLE: &[(&str, &str)] = &[(
    "weir-primitives",
    "internal: published because the other crates depend on it, with no \
     stability promise",
)];

/// The file that holds the algorithms' bounds table.
const BOUNDS_TABLE_HOME: &str = "rate/src/lib.rs";

/// The leading header cells that make a table the algorithms' bounds
/// table.
const BOUNDS_TABLE_HEADER: &[&str] = &["algorithm", "state per key"];

/// Markdown files that are not prose to keep in step: the generated report.
const GENERATED: &[&str] = &["docs/report.md"];

/// A workspace member, as far as these checks need it.
struct Member {
    name: String,
    /// Its folder, relative to the repository root.
    dir: PathBuf,
    features: BTreeMap<String, Vec<String>>,
    published: bool,
    /// Its targets' source files, relative to the repository root.
    targets: Vec<(PathBuf, bool)>,
    /// Its normal dependencies (optional ones included).
    dependencies: BTreeSet<String>,
}

impl Member {
    fn declares(&self, feature: &str) -> bool {
        feature != "default" && self.features.contains_key(feature)
    }
}

/// One file's prose: runs of consecutive lines, each line with its number.
struct Prose {
    file: PathBuf,
    /// Each run's text (lines joined by a space) and the byte offset at
    /// which each of its lines starts, with that line's number.
    runs: Vec<(String, Vec<(usize, usize)>)>,
    /// For Markdown, the crates named by the headings in force at each
    /// line (by line number); empty where no heading names one.
    context: BTreeMap<usize, Vec<String>>,
}

impl Prose {
    /// The line number of byte `offset` of run `run`.
    fn line_at(&self, run: usize, offset: usize) -> usize {
        let starts = &self.runs[run].1;
        let at = starts.partition_point(|&(start, _)| start <= offset);
        starts[at.saturating_sub(1)].1
    }
}

/// Runs every check of this file; `allowed` is tidy's dependency table.
pub fn check(
    root: &Path,
    files: &[PathBuf],
    packages: &[serde_json::Value],
    allowed: &[(&str, &[&str])],
) -> Vec<String> {
    let members = members(root, packages);
    let prose: Vec<Prose> = files
        .iter()
        .filter_map(|f| read_prose(root, f, &members))
        .collect();
    let mut problems = Vec::new();
    problems.extend(feature_mentions(&prose, &members));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    problems.extend(crate_table(&readme, &members));
    problems.extend(crate_readmes(root, &members));
    problems.extend(stray_sources(files, &members));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    problems.extend(dependency_table(&architecture, &members, allowed));
    problems.extend(one_bounds_table(&prose));
    problems
}

fn members(root: &Path, packages: &[serde_json::Value]) -> Vec<Member> {
    let relative = |path: &str| {
        let path = Path::new(path);
        path.strip_prefix(root).unwrap_or(path).to_path_buf()
    };
    packages
        .iter()
        .filter_map(|package| {
            let manifest = relative(package["manifest_path"].as_str()?);
            let features = package["features"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, enables)| {
                    let enables = enables
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| e.as_str().map(str::to_owned))
                        .collect();
                    (name.clone(), enables)
                })
                .collect();
            let targets = package["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| {
                    let build = t["kind"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k == "custom-build"));
                    Some((relative(t["src_path"].as_str()?), build))
                })
                .collect();
            let dependencies = crate::tidy::normal_dependencies(package)
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            Some(Member {
                name: package["name"].as_str()?.to_owned(),
                dir: manifest.parent()?.to_path_buf(),
                features,
                published: crate::tidy::is_published(package),
                targets,
                dependencies,
            })
        })
        .collect()
}

/// The member whose folder holds `file`, if any.
fn member_of<'a>(file: &Path, members: &'a [Member]) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| !m.dir.as_os_str().is_empty() && file.starts_with(&m.dir))
        .max_by_key(|m| m.dir.components().count())
}

fn read_prose(root: &Path, file: &Path, members: &[Member]) -> Option<Prose> {
    let name = file.file_name()?.to_str()?;
    let ext = file.extension().and_then(|e| e.to_str());
    if !(ext == Some("md") || ext == Some("rs") || name == "Cargo.toml")
        || GENERATED.iter().any(|g| file == Path::new(g))
    {
        return None;
    }
    let text = std::fs::read_to_string(root.join(file)).ok()?;
    Some(prose_of(file, &text, members))
}

/// The prose of `text`, the contents of `file` (a Markdown, Rust or
/// `Cargo.toml` file).
fn prose_of(file: &Path, text: &str, members: &[Member]) -> Prose {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let markdown = file.extension().is_some_and(|e| e == "md");
    let heading = Regex::new(r"^(#{1,6})\s").expect("a valid regex");
    let crate_name = Regex::new(r"weir-[a-z0-9-]+").expect("a valid regex");
    let known: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut runs = Vec::new();
    let mut run = (String::new(), Vec::new());
    let mut previous = None;
    let mut context = BTreeMap::new();
    // Per heading level, the crates the heading of that level names.
    let mut headings: Vec<(usize, Vec<String>)> = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let content = if markdown {
            Some(line)
        } else if name == "Cargo.toml" {
            line.trim_start()
                .strip_prefix('#')
                .map(|c| c.trim_start_matches('#'))
        } else {
            let trimmed = line.trim_start();
            trimmed
                .strip_prefix("//!")
                .or_else(|| trimmed.strip_prefix("///"))
        };
        if markdown {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if let Some(cap) = heading.captures(line).filter(|_| !fenced) {
                let level = cap[1].len();
                headings.retain(|(l, _)| *l < level);
                let named: Vec<String> = crate_name
                    .find_iter(line)
                    .map(|m| m.as_str())
                    .filter(|n| known.contains(n))
                    .map(str::to_owned)
                    .collect();
                headings.push((level, named));
            }
            let named = headings
                .iter()
                .rev()
                .find(|(_, n)| !n.is_empty())
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            context.insert(number, named);
        }
        let Some(content) = content else {
            continue;
        };
        if previous != Some(number - 1) && !run.1.is_empty() {
            runs.push(std::mem::take(&mut run));
        }
        if !run.1.is_empty() {
            run.0.push(' ');
        }
        run.1.push((run.0.len(), number));
        run.0.push_str(content.strip_prefix(' ').unwrap_or(content));
        previous = Some(number);
    }
    if !run.1.is_empty() {
        runs.push(run);
    }
    Prose {
        file: file.to_path_buf(),
        runs,
        context,
    }
}

/// Features named in prose that the crate named does not declare.
fn feature_mentions(prose: &[Prose], members: &[Member]) -> Vec<String> {
    let possessive =
        Regex::new(r"`?(weir-[a-z0-9-]+)`?['’]s\s+`([a-z0-9][a-z0-9_-]*)`\s+features?\b")
            .expect("a valid regex");
    let slashed = Regex::new(r"`(weir-[a-z0-9-]+)/([a-z0-9][a-z0-9_-]*)`").expect("a valid regex");
    let bare = Regex::new(r"\bfeature\s+`([a-z0-9][a-z0-9_-]*)`").expect("a valid regex");
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut problems = Vec::new();
    for file in prose {
        let own = member_of(&file.file, members);
        for (index, (text, _)) in file.runs.iter().enumerate() {
            let at = |offset| format!("{}:{}", file.file.display(), file.line_at(index, offset));
            for cap in possessive.captures_iter(text) {
                let (krate, feature) = (&cap[1], &cap[2]);
                let offset = cap.get(0).map_or(0, |m| m.start());
                match by_name.get(krate) {
                    Some(m) if m.declares(feature) => {}
                    Some(_) => problems.push(format!(
                        "{}: names {krate}'s `{feature}` feature, which {krate} does not declare",
                        at(offset)
                    )),
                    None => problems.push(format!(
                        "{}: names a `{feature}` feature of {krate}, which is not a crate of the workspace",
                        at(offset)
                    )),
                }
            }
            for cap in slashed.captures_iter(text) {
                let (krate, feature) = (&cap[1], &cap[2]);
                let offset = cap.get(0).map_or(0, |m| m.start());
                if by_name.get(krate).is_some_and(|m| !m.declares(feature)) {
                    problems.push(format!(
                        "{}: names `{krate}/{feature}`, a feature {krate} does not declare",
                        at(offset)
                    ));
                }
            }
            for cap in bare.captures_iter(text) {
                let feature = &cap[1];
                let offset = cap.get(0).map_or(0, |m| m.start());
                if text[..offset].trim_end().ends_with('`') {
                    continue;
                }
                let line = file.line_at(index, offset);
                let candidates: Vec<&Member> = match own {
                    Some(m) => vec![m],
                    None => {
                        let named = file.context.get(&line).cloned().unwrap_or_default();
                        if named.is_empty() {
                            members.iter().collect()
                        } else {
                            named
                                .iter()
                                .filter_map(|n| by_name.get(n.as_str()).copied())
                                .collect()
                        }
                    }
                };
                if !candidates.iter().any(|m| m.declares(feature)) {
                    let says = match candidates[..] {
                        [only] => format!("{} does not declare it", only.name),
                        _ if candidates.len() == members.len() => {
                            "no crate of the workspace declares it".to_owned()
                        }
                        _ => {
                            let names: Vec<&str> =
                                candidates.iter().map(|m| m.name.as_str()).collect();
                            format!("none of {} declares it", names.join(", "))
                        }
                    };
                    problems.push(format!(
                        "{}: names feature `{feature}`, but {says}",
                        at(offset)
                    ));
                }
            }
        }
    }
    problems
}

/// The root README's crate table against each crate's declared features.
fn crate_table(readme: &str, members: &[Member]) -> Vec<String> {
    let lines: Vec<&str> = readme.lines().collect();
    let header = ["crate", "what it gives you", "features"];
    let Some(start) = lines.iter().position(|l| cells(l) == header) else {
        return vec![
            "README.md has no crate table (columns: crate | what it gives you | features)"
                .to_owned(),
        ];
    };
    let backticked = Regex::new(r"`([^`]+)`").expect("a valid regex");
    let listed = Regex::new(r"`([^`]+)`(\s*\(default\))?").expect("a valid regex");
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut problems = Vec::new();
    let mut rows = BTreeSet::new();
    for (index, line) in lines.iter().enumerate().skip(start + 2) {
        if !line.trim_start().starts_with('|') {
            break;
        }
        let at = format!("README.md:{}", index + 1);
        let row = cells(line);
        let Some(krate) = row
            .first()
            .and_then(|c| backticked.captures(c))
            .map(|c| c[1].to_owned())
        else {
            problems.push(format!("{at}: a crate-table row that names no crate"));
            continue;
        };
        let Some(member) = by_name.get(krate.as_str()) else {
            problems.push(format!(
                "{at}: the crate table lists {krate}, not a crate of the workspace"
            ));
            continue;
        };
        if !rows.insert(krate.clone()) {
            problems.push(format!("{at}: the crate table lists {krate} twice"));
        }
        let cell = row.get(2).map_or("", String::as_str);
        let stated: BTreeMap<String, bool> = listed
            .captures_iter(cell)
            .map(|c| (c[1].to_owned(), c.get(2).is_some()))
            .collect();
        let defaults = member.features.get("default").cloned().unwrap_or_default();
        let declared: BTreeMap<String, bool> = member
            .features
            .keys()
            .filter(|f| *f != "default")
            .filter(|f| {
                !HIDDEN_FEATURES
                    .iter()
                    .any(|(c, h, _)| *c == krate && h == f)
            })
            .map(|f| (f.clone(), defaults.contains(f)))
            .collect();
        if stated != declared {
            let show = |features: &BTreeMap<String, bool>| {
                if features.is_empty() {
                    return "none".to_owned();
                }
                let shown: Vec<String> = features
                    .iter()
                    .map(|(f, on)| format!("`{f}`{}", if *on { " (default)" } else { "" }))
                    .collect();
                shown.join(", ")
            };
            problems.push(format!(
                "{at}: the crate table gives {krate} the features {}, but its Cargo.toml declares {}",
                show(&stated),
                show(&declared)
            ));
        }
    }
    for member in members.iter().filter(|m| m.published) {
        let excused = NOT_IN_CRATE_TABLE.iter().any(|(c, _)| *c == member.name);
        if !excused && !rows.contains(&member.name) {
            problems.push(format!(
                "README.md: the crate table has no row for {}, a published crate",
                member.name
            ));
        }
    }
    problems
}

/// A Markdown table row's cells, trimmed and lowercased.
fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let Some(inner) = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')) else {
        return Vec::new();
    };
    inner.split('|').map(|c| c.trim().to_lowercase()).collect()
}

/// Published crates without a README.
fn crate_readmes(root: &Path, members: &[Member]) -> Vec<String> {
    members
        .iter()
        .filter(|m| m.published && !root.join(&m.dir).join("README.md").is_file())
        .map(|m| {
            format!(
                "{} is published but has no {}",
                m.name,
                m.dir.join("README.md").display()
            )
        })
        .collect()
}

/// Rust files no crate builds.
fn stray_sources(files: &[PathBuf], members: &[Member]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let built = member_of(file, members).is_some_and(|m| {
            let inside = file.strip_prefix(&m.dir).unwrap_or(file);
            let conventional = ["src", "tests", "benches", "examples"]
                .iter()
                .any(|d| inside.starts_with(d))
                || inside == Path::new("build.rs");
            let named = m.targets.iter().any(|(target, build)| {
                let folder = target.parent().filter(|p| *p != m.dir && !build);
                target == file || folder.is_some_and(|f| file.starts_with(f))
            });
            conventional || named
        });
        if !built {
            problems.push(format!(
                "{}: a Rust file no crate builds; keep a sketch as Markdown in docs/, or delete it",
                file.display()
            ));
        }
    }
    problems
}

/// tidy's `ALLOWED` against the real dependencies and ARCHITECTURE.md's
/// diagram.
fn dependency_table(
    architecture: &str,
    members: &[Member],
    allowed: &[(&str, &[&str])],
) -> Vec<String> {
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut problems = Vec::new();
    for (krate, deps) in allowed {
        let Some(member) = by_name.get(krate) else {
            problems.push(format!(
                "xtask/src/tidy.rs ALLOWED has a row for {krate}, not a crate of the workspace"
            ));
            continue;
        };
        for dep in *deps {
            if !member.dependencies.contains(*dep) {
                problems.push(format!(
                    "xtask/src/tidy.rs ALLOWED lets {krate} depend on {dep}, but it does not: \
                     drop the edge (and from ARCHITECTURE.md's diagram)"
                ));
            }
        }
    }
    let Some(diagram) = diagram(architecture) else {
        problems
            .push("ARCHITECTURE.md has no fenced diagram under \"## Bird's eye view\"".to_owned());
        return problems;
    };
    let crate_name = Regex::new(r"weir-[a-z0-9-]+").expect("a valid regex");
    let drawn: BTreeSet<&str> = crate_name.find_iter(&diagram).map(|m| m.as_str()).collect();
    for (krate, _) in allowed {
        if !drawn.contains(krate) {
            problems.push(format!(
                "ARCHITECTURE.md's dependency diagram does not show {krate}, which tidy's ALLOWED lists"
            ));
        }
    }
    for krate in drawn {
        if !by_name.contains_key(krate) {
            problems.push(format!(
                "ARCHITECTURE.md's dependency diagram shows {krate}, not a crate of the workspace"
            ));
        }
    }
    problems
}

/// The first fenced block under ARCHITECTURE.md's "Bird's eye view".
fn diagram(text: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != "## Bird's eye view")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.trim_start().starts_with("```"))
        .skip(1);
    let block: Vec<&str> = lines
        .by_ref()
        .take_while(|l| !l.trim_start().starts_with("```"))
        .collect();
    (!block.is_empty()).then(|| block.join("\n"))
}

/// Copies of the algorithms' bounds table outside its home, and its home
/// without it.
fn one_bounds_table(prose: &[Prose]) -> Vec<String> {
    let clean = |cell: &str| {
        cell.chars()
            .filter(|c| !matches!(c, '`' | '[' | ']'))
            .collect::<String>()
    };
    let mut at_home = 0;
    let mut problems = Vec::new();
    for file in prose {
        for (text, starts) in &file.runs {
            let lines: Vec<(&str, usize)> = starts
                .iter()
                .enumerate()
                .map(|(i, &(start, number))| {
                    let end = starts.get(i + 1).map_or(text.len(), |&(next, _)| next - 1);
                    (&text[start..end], number)
                })
                .collect();
            for pair in lines.windows(2) {
                let ((header, number), (rule, _)) = (pair[0], pair[1]);
                let head: Vec<String> = cells(header).iter().map(|c| clean(c)).collect();
                let is_rule =
                    rule.trim_start().starts_with("|-") || rule.trim_start().starts_with("| -");
                let bounds = BOUNDS_TABLE_HEADER
                    .iter()
                    .enumerate()
                    .all(|(i, h)| head.get(i).is_some_and(|c| c == h));
                if !is_rule || !bounds {
                    continue;
                }
                if file.file == Path::new(BOUNDS_TABLE_HOME) {
                    at_home += 1;
                } else {
                    problems.push(format!(
                        "{}:{number}: repeats the algorithms' bounds table; link to weir-rate's crate \
                         docs (`{BOUNDS_TABLE_HOME}`, \"The algorithms' bounds\") instead",
                        file.file.display()
                    ));
                }
            }
        }
    }
    if at_home != 1 {
        problems.push(format!(
            "{BOUNDS_TABLE_HOME} should hold the algorithms' bounds table once; it holds it {at_home} time(s)"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, dir: &str, features: &[&str], dependencies: &[&str]) -> Member {
        Member {
            name: name.to_owned(),
            dir: PathBuf::from(dir),
            features: features
                .iter()
                .map(|f| ((*f).to_owned(), Vec::new()))
                .collect(),
            published: true,
            targets: vec![(PathBuf::from(dir).join("src/lib.rs"), false)],
            dependencies: dependencies.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    fn workspace() -> Vec<Member> {
        vec![
            member("weir-rate", "rate", &["wait"], &[]),
            member("weir-tower", "tower", &["axum", "metrics"], &["weir-rate"]),
        ]
    }

    fn mentions(file: &str, text: &str) -> Vec<String> {
        let members = workspace();
        feature_mentions(&[prose_of(Path::new(file), text, &members)], &members)
    }

    #[test]
    fn a_feature_named_for_the_wrong_crate_is_found() {
        let stale = mentions("README.md", "Enable weir-rate's\n`axum` feature.");
        assert_eq!(stale.len(), 1, "{stale:?}");
        assert!(stale[0].starts_with("README.md:1:"), "{stale:?}");
        assert!(mentions("README.md", "with `weir-tower`'s `axum` feature").is_empty());
        assert_eq!(mentions("README.md", "`weir-rate/metrics`").len(), 1);
        // A path that looks like one is not a crate's feature.
        assert!(mentions("README.md", "`weir-report/report.md`").is_empty());
    }

    #[test]
    fn a_bare_feature_is_the_crate_of_its_file_or_heading() {
        assert!(mentions("tower/src/lib.rs", "//! (feature `metrics`)").is_empty());
        assert_eq!(
            mentions("rate/src/lib.rs", "//! (feature `metrics`)").len(),
            1
        );
        // Code is not prose.
        assert!(mentions("rate/src/lib.rs", "#[cfg(feature = `metrics`)]").is_empty());
        let doc = "# weir-rate\n\n## Waiting\n\n(feature `axum`)\n\n# Other\n\n(feature `axum`)\n";
        let found = mentions("docs/x.md", doc);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("docs/x.md:5:"), "{found:?}");
        assert!(mentions("docs/x.md", "behind the `wait` feature `kernel`").is_empty());
    }

    #[test]
    fn the_crate_table_lists_the_declared_features() {
        let mut members = workspace();
        members[1]
            .features
            .insert("default".to_owned(), vec!["axum".to_owned()]);
        let table = "| crate | what it gives you | features |\n|---|---|---|\n";
        let good = format!(
            "{table}| [`weir-rate`](rate/) | limits | `wait` |\n\
             | [`weir-tower`](tower/) | layers | `axum` (default), `metrics` |\n"
        );
        assert_eq!(crate_table(&good, &members), Vec::<String>::new());
        let stale = format!(
            "{table}| [`weir-rate`](rate/) | limits | `wait`, `redis` |\n\
             | [`weir-tower`](tower/) | layers | `axum`, `metrics` |\n"
        );
        assert_eq!(crate_table(&stale, &members).len(), 2);
    }

    #[test]
    fn an_edge_the_code_dropped_leaves_the_table() {
        let members = workspace();
        let architecture = "## Bird's eye view\n\n```\nweir-tower\n  |\nweir-rate\n```\n";
        let allowed: &[(&str, &[&str])] = &[("weir-rate", &[]), ("weir-tower", &["weir-rate"])];
        assert!(dependency_table(architecture, &members, allowed).is_empty());
        let stale: &[(&str, &[&str])] = &[("weir-rate", &["weir-tower"]), ("weir-tower", &[])];
        assert_eq!(dependency_table(architecture, &members, stale).len(), 1);
        let undrawn = "## Bird's eye view\n\n```\nweir-tower weir-gone\n```\n";
        assert_eq!(dependency_table(undrawn, &members, allowed).len(), 2);
    }

    #[test]
    fn a_rust_file_outside_every_crate_is_stray() {
        let files = [
            PathBuf::from("rate/src/lib.rs"),
            PathBuf::from("rate/tests/a.rs"),
            PathBuf::from("rate/notes.rs"),
            PathBuf::from("docs/sketch.rs"),
        ];
        assert_eq!(stray_sources(&files, &workspace()).len(), 2);
    }

    #[test]
    fn the_bounds_table_lives_in_one_place() {
        let members = workspace();
        let table = "| algorithm | state per key | bound |\n|---|---|---|\n| gcra | one | b |\n";
        let home = prose_of(
            Path::new(BOUNDS_TABLE_HOME),
            &table
                .lines()
                .map(|l| format!("//! {l}\n"))
                .collect::<String>(),
            &members,
        );
        assert!(one_bounds_table(&[home]).is_empty());
        let copy = prose_of(Path::new("docs/algorithms.md"), table, &members);
        assert_eq!(one_bounds_table(&[copy]).len(), 2);
    }
}
