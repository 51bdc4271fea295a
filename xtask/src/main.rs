//! weir's workflows, in Rust rather than scattered shell scripts.
//!
//! `cargo xtask <command>` (the alias lives in `.cargo/config.toml`):
//!
//! * `test`  — everything CI must pass: formatting, clippy with warnings
//!   denied (all features, then each feature set users build on its own),
//!   the docs with warnings denied, every unit/doc/property/integration test
//!   with all features, and the loom models. `.ci/run` calls exactly this.
//! * `loom`  — only the loom models, built with `--cfg loom` into a separate
//!   target directory so they never invalidate the normal build cache.
//! * `bench` — the report harness in `bench-suite/` (`--quick` for a short
//!   run, `--only SECTION` for one section: limits, timeout, rate, redis,
//!   memcached, http, adaptive, hhh).
//! * `api`   — compare each published crate's public API (rendered from
//!   rustdoc's JSON) with its snapshot in `api/`; `--bless` rewrites the
//!   snapshots. `test` runs the comparison, so an API change is a visible
//!   diff in review. It also checks the constructor rule of
//!   ARCHITECTURE.md on each listing and its crate's sources. `--count`
//!   prints how many named items each listing shows.
//! * `tidy`  — what no compiler checks: every path a doc names exists,
//!   no tracker numbers, dependencies point downward (`tidy.rs`), and the
//!   docs agree with the code they describe (`doc_drift.rs`). `test`
//!   runs it first.
//! * `fmt`   — format the workspace.
//!
//! Each step prints the command it runs, so a failure can be rerun by hand.

mod api_count;
mod constructors;
mod doc_drift;
mod module_cycles;
mod tidy;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => {
            eprintln!("{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    let result = match command {
        "test" => test(rest),
        "loom" => loom(rest),
        "bench" => bench(rest),
        "api" => api(rest),
        "tidy" => reject_args("tidy", rest).and_then(|()| tidy::tidy(&workspace_root())),
        "fmt" => run(cargo().args(["fmt", "--all"])),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <test|loom|bench [--quick] [--only SECTION]...|api [--bless|--count [DIR]]|tidy|fmt>";

/// The published crates whose public API is kept in `api/<package>.txt`.
const PUBLISHED: &[&str] = &[
    "weir-limits",
    "weir-timeout",
    "weir-rate",
    "weir-adaptive",
    "weir-tower",
    "weir-store",
    "weir-redis",
    "weir-memcached",
    "weir-hhh",
    "weir-pingora",
];

/// The loom models of each crate: the package and the `cargo test`
/// arguments that select them (a `loom` test target, or for models
/// inside the crate, the library's tests filtered to their module).
const LOOM_MODELS: &[(&str, &[&str])] = &[
    ("weir-primitives", &["--test", "loom"]),
    ("weir-limits", &["--test", "loom"]),
    ("weir-limits", &["--lib", "--", "rate::loom_tests::"]),
    ("weir-rate", &["--test", "loom"]),
    ("weir-adaptive", &["--test", "loom"]),
    ("weir-timeout", &["--lib", "--", "loom_tests::"]),
    ("weir-hhh", &["--test", "loom"]),
];

/// The feature sets users build besides `--all-features`, as cargo
/// arguments: each crate bare, and each optional feature alone. Each is
/// linted with warnings denied, so code behind one feature cannot lean on
/// another (an import, a dependency) unnoticed.
const FEATURE_SETS: &[&[&str]] = &[
    &["--package", "weir-limits", "--no-default-features"],
    &["--package", "weir-timeout", "--no-default-features"],
    &[
        "--package",
        "weir-timeout",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &["--package", "weir-rate", "--no-default-features"],
    &[
        "--package",
        "weir-rate",
        "--no-default-features",
        "--features",
        "wait",
    ],
    &["--package", "weir-adaptive", "--no-default-features"],
    &["--package", "weir-tower", "--no-default-features"],
    &[
        "--package",
        "weir-tower",
        "--no-default-features",
        "--features",
        "axum",
    ],
    &[
        "--package",
        "weir-tower",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &["--package", "weir-store", "--no-default-features"],
    &[
        "--package",
        "weir-store",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &[
        "--package",
        "weir-store",
        "--no-default-features",
        "--features",
        "test-util",
    ],
    &["--package", "weir-redis", "--no-default-features"],
    &[
        "--package",
        "weir-redis",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &[
        "--package",
        "weir-redis",
        "--no-default-features",
        "--features",
        "tls",
    ],
    &["--package", "weir-memcached", "--no-default-features"],
    &[
        "--package",
        "weir-memcached",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &["--package", "weir-pingora", "--no-default-features"],
    &["--package", "weir-hhh", "--no-default-features"],
    &["--package", "weir-hhh"],
    &[
        "--package",
        "weir-hhh",
        "--no-default-features",
        "--features",
        "metrics",
    ],
    &[
        "--package",
        "weir-hhh",
        "--no-default-features",
        "--features",
        "bpf",
    ],
];

/// Every feature but weir-hhh's `bpf` (and bench-suite's, which turns it
/// on): what `--all-features` becomes on a machine that cannot build BPF.
const ALL_BUT_BPF: &str = "weir-rate/wait,weir-tower/axum,weir-tower/metrics,weir-store/metrics,weir-store/test-util,weir-redis/metrics,weir-redis/tls,weir-memcached/metrics,weir-hhh/tokio,weir-hhh/metrics,weir-timeout/metrics";

/// What the `bpf` features need to build: clang with the BPF target and
/// the libbpf and kernel headers. `Err` says what is missing and how to get it.
fn bpf_toolchain() -> Result<(), String> {
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    let runs = Command::new(&clang)
        .args(["--target=bpf", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut missing = Vec::new();
    if !runs {
        missing.push("clang");
    }
    for (header, package) in [
        ("/usr/include/bpf/bpf_helpers.h", "libbpf-dev"),
        ("/usr/include/linux/bpf.h", "linux-libc-dev"),
    ] {
        if !Path::new(header).exists() {
            missing.push(package);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "weir-hhh's `bpf` feature needs {0}: apt-get install {0}",
            missing.join(" ")
        ))
    }
}

/// `--all-features`, or every feature but `bpf` (said loudly) where BPF
/// cannot be built; under `CI=true` that is an error.
fn all_features() -> Result<Vec<&'static str>, String> {
    match bpf_toolchain() {
        Ok(()) => Ok(vec!["--all-features"]),
        Err(missing) if env::var("CI").is_ok_and(|v| v == "true") => {
            Err(format!("{missing} (CI=true: not skipping it)"))
        }
        Err(missing) => {
            eprintln!("\n*** SKIPPING weir-hhh's kernel filter (feature `bpf`): {missing} ***\n");
            Ok(vec!["--features", ALL_BUT_BPF])
        }
    }
}

fn test(args: &[String]) -> Result<(), String> {
    reject_args("test", args)?;
    let started = Instant::now();
    let all = all_features()?;
    println!("==> tidy: cargo xtask tidy");
    tidy::tidy(&workspace_root()).map_err(|e| format!("step `tidy` failed: {e}"))?;
    step("format", cargo().args(["fmt", "--all", "--check"]))?;
    step(
        "clippy",
        cargo()
            .args(["clippy", "--workspace", "--all-targets"])
            .args(&all)
            .args(["--", "-D", "warnings"]),
    )?;
    for features in FEATURE_SETS {
        if features.contains(&"bpf") && all[0] != "--all-features" {
            continue;
        }
        step(
            &format!("clippy ({})", features[1..].join(" ")),
            cargo()
                .args(["clippy", "--all-targets"])
                .args(*features)
                .args(["--", "-D", "warnings"]),
        )?;
    }
    step(
        "docs",
        cargo()
            .args(["doc", "--workspace", "--no-deps"])
            .args(&all)
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    step(
        "tests",
        cargo()
            .args(["test", "--workspace", "--no-fail-fast"])
            .args(&all),
    )?;
    // What only a build without a default feature can show: weir-tower
    // without `axum` names the fix when axum's set-up finds no peer.
    step(
        "tests without default features",
        cargo().args([
            "test",
            "--package",
            "weir-tower",
            "--no-default-features",
            "--test",
            "http",
            "unkeyed",
        ]),
    )?;
    if all[0] != "--all-features" {
        eprintln!("\n*** weir-hhh's kernel filter was not built or tested (see above) ***\n");
    }
    api(&[])?;
    loom(&[])?;
    println!("xtask test: all steps passed in {:.0?}", started.elapsed());
    Ok(())
}

fn loom(args: &[String]) -> Result<(), String> {
    reject_args("loom", args)?;
    let target_dir = workspace_root().join("target").join("loom");
    for (package, selection) in LOOM_MODELS {
        let mut command = cargo();
        command
            .args(["test", "--release", "--package", package])
            .args(*selection)
            .env("RUSTFLAGS", "--cfg loom")
            .env("CARGO_TARGET_DIR", &target_dir)
            // Bounded exploration: every interleaving with up to this many
            // preemptions. Enough to find ordering bugs, quick enough for CI.
            .env("LOOM_MAX_PREEMPTIONS", "3");
        step(&format!("loom models of {package}"), &mut command)?;
    }
    Ok(())
}

fn bench(args: &[String]) -> Result<(), String> {
    let mut command = cargo();
    command.args([
        "run",
        "--release",
        "--package",
        "weir-bench-suite",
        "--bin",
        "weir-report",
    ]);
    // The kernel filter's section needs the `bpf` feature, which needs clang.
    match bpf_toolchain() {
        Ok(()) => {
            command.args(["--features", "bpf"]);
        }
        Err(missing) => eprintln!("xtask bench: the kernel filter is not measured: {missing}"),
    }
    command.arg("--");
    command.args(args);
    step("benchmark report", &mut command)
}

/// Prints how many named items each published crate's listing in `dir`
/// (`api/` unless given, e.g. an older commit's listings) shows; see
/// `api_count.rs` for what counts.
fn api_count(dir: &Path) -> Result<(), String> {
    for package in PUBLISHED {
        let path = dir.join(format!("{package}.txt"));
        let listing = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        println!(
            "{package}: {} named public items",
            api_count::named_items(&listing)
        );
    }
    Ok(())
}

/// Renders each published crate's public API (all its features) and
/// compares it with `api/<package>.txt`, or with `--bless` rewrites those
/// files. The JSON comes from the toolchain's own rustdoc; its JSON output
/// is unstable, so RUSTC_BOOTSTRAP unlocks it on stable. That variable is
/// part of some build scripts' inputs (proc-macro2's), so these builds get
/// their own target directory rather than invalidate the main one.
fn api(args: &[String]) -> Result<(), String> {
    let bless = match args {
        [] => false,
        [flag] if flag == "--bless" => true,
        [flag] if flag == "--count" => return api_count(&workspace_root().join("api")),
        [flag, dir] if flag == "--count" => return api_count(Path::new(dir)),
        _ => return Err(format!("`api` takes `--bless` or `--count`\n{USAGE}")),
    };
    let bpf = bpf_toolchain();
    let snapshots = workspace_root().join("api");
    let target_dir = workspace_root().join("target").join("api");
    let mut changed = Vec::new();
    for package in PUBLISHED {
        // The source half of the constructor rule needs no build, so it
        // runs for every crate, weir-hhh included when its listing is skipped.
        let crate_dir = package.trim_start_matches("weir-");
        let panicking =
            constructors::panicking_constructors(&workspace_root().join(crate_dir).join("src"))?;
        if !panicking.is_empty() {
            return Err(format!(
                "{package} breaks the constructor rule (ARCHITECTURE.md, \"Constructors\"):\n  {}",
                panicking.join("\n  ")
            ));
        }
        if *package == "weir-hhh"
            && let Err(missing) = &bpf
        {
            if env::var("CI").is_ok_and(|v| v == "true") {
                return Err(format!("{missing} (CI=true: not skipping weir-hhh's API)"));
            }
            eprintln!("\n*** SKIPPING weir-hhh's public API check: {missing} ***\n");
            continue;
        }
        step(
            &format!("public API of {package}"),
            cargo()
                .args([
                    "rustdoc",
                    "--quiet",
                    "--lib",
                    "--all-features",
                    "--package",
                    package,
                ])
                .args(["--", "-Z", "unstable-options", "--output-format", "json"])
                .env("RUSTC_BOOTSTRAP", "1")
                .env("CARGO_TARGET_DIR", &target_dir),
        )?;
        let json = target_dir
            .join("doc")
            .join(format!("{}.json", package.replace('-', "_")));
        let api = public_api::Builder::from_rustdoc_json(&json)
            .omit_blanket_impls(true)
            .build()
            .map_err(|e| format!("reading {}: {e}", json.display()))?;
        let listing: String = api.items().map(|item| format!("{item}\n")).collect();
        let broken = constructors::listing_violations(&listing);
        if !broken.is_empty() {
            return Err(format!(
                "{package} breaks the constructor rule (ARCHITECTURE.md, \"Constructors\"):\n  {}",
                broken.join("\n  ")
            ));
        }
        let snapshot = snapshots.join(format!("{package}.txt"));
        let committed = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if listing == committed {
            continue;
        }
        if bless {
            std::fs::create_dir_all(&snapshots).map_err(|e| e.to_string())?;
            std::fs::write(&snapshot, &listing).map_err(|e| e.to_string())?;
            println!("api: rewrote {}", snapshot.display());
            continue;
        }
        print_api_diff(package, &committed, &listing);
        changed.push(*package);
    }
    if changed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the public API of {} differs from its snapshot in api/ (above); \
             if the change is meant, run `cargo xtask api --bless` and commit the diff",
            changed.join(", ")
        ))
    }
}

/// The lines only in the snapshot (`-`) and only in the new listing (`+`).
fn print_api_diff(package: &str, committed: &str, listing: &str) {
    use std::collections::BTreeSet;
    let old: BTreeSet<&str> = committed.lines().collect();
    let new: BTreeSet<&str> = listing.lines().collect();
    println!("--- api/{package}.txt (committed)\n+++ {package} (as built)");
    for line in old.difference(&new) {
        println!("-{line}");
    }
    for line in new.difference(&old) {
        println!("+{line}");
    }
}

fn reject_args(command: &str, args: &[String]) -> Result<(), String> {
    match args.first() {
        None => Ok(()),
        Some(arg) => Err(format!("`{command}` takes no arguments, got `{arg}`")),
    }
}

fn cargo() -> Command {
    let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn step(name: &str, command: &mut Command) -> Result<(), String> {
    println!("==> {name}: {}", describe(command));
    run(command).map_err(|e| format!("step `{name}` failed: {e}"))
}

fn run(command: &mut Command) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("could not start {}: {e}", describe(command)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} exited with {status}", describe(command)))
    }
}

fn describe(command: &Command) -> String {
    let mut text = String::new();
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            text.push_str(&format!(
                "{}={} ",
                key.to_string_lossy(),
                value.to_string_lossy()
            ));
        }
    }
    text.push_str(&command.get_program().to_string_lossy());
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}
