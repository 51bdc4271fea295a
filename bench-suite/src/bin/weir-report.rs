//! `cargo xtask bench`: run every comparison and write the Markdown report.

use std::path::PathBuf;
use std::time::Instant;
use weir_bench_suite::alloc::CountingAllocator;
use weir_bench_suite::machine;
use weir_bench_suite::report::{Report, Scale};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// A section of the report: its name for `--only`, and the function that runs it.
type Section = (&'static str, fn(&mut Report));

/// The report's sections, in order.
const SECTIONS: &[Section] = &[
    ("limits", weir_bench_suite::limits::run),
    ("timeout", weir_bench_suite::timeout::run),
    ("rate", weir_bench_suite::rate::run),
    ("redis", weir_bench_suite::redis::run),
    ("http", weir_bench_suite::http::run),
    ("adaptive", weir_bench_suite::adaptive::run),
    ("hhh", weir_bench_suite::hhh::run),
    ("hhh-kernel", weir_bench_suite::hhh::run_kernel),
    #[cfg(feature = "bpf")]
    ("hhh-loopback", weir_bench_suite::hhh_loopback::run),
];

/// Whether `--only wanted` runs section `name`: the section itself and the
/// sections under it (`hhh` also runs `hhh-kernel` and `hhh-loopback`).
fn covers(wanted: &str, name: &str) -> bool {
    name == wanted
        || name
            .strip_prefix(wanted)
            .is_some_and(|rest| rest.starts_with('-'))
}

fn main() {
    let mut scale = Scale::Full;
    let mut only: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => scale = Scale::Quick,
            "--only" => only.extend(args.next()),
            other => {
                eprintln!(
                    "weir-report: unknown argument `{other}` (expected --quick, --only SECTION)"
                );
                std::process::exit(2);
            }
        }
    }
    let names: Vec<&str> = SECTIONS.iter().map(|(name, _)| *name).collect();
    if let Some(unknown) = only.iter().find(|o| !names.contains(&o.as_str())) {
        eprintln!(
            "weir-report: no section `{unknown}` (sections: {})",
            names.join(", ")
        );
        std::process::exit(2);
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("weir-report");
    let started = Instant::now();
    let mut report = Report::new(&dir, scale);
    let header = format!(
        "# weir benchmark report\n\nRun on {}. {}\n\n{}\n\nScale: {:?}.\n",
        machine::today_utc(),
        machine::describe(),
        machine::crate_versions(),
        scale
    );
    println!("{header}");

    for (name, run) in SECTIONS {
        if only.is_empty() || only.iter().any(|o| covers(o, name)) {
            run(&mut report);
        }
    }

    let path = report.finish(&header).expect("write the report");
    if scale == Scale::Full && only.is_empty() {
        // docs/ keeps the latest full run (tables and plots), with date and machine.
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("docs");
        match copy_to_docs(&path, &docs) {
            Ok(()) => println!(
                "full-run report copied to {}",
                docs.join("report.md").display()
            ),
            Err(e) => eprintln!("weir-report: could not copy the report to docs/: {e}"),
        }
    }
    println!(
        "\nreport written to {} in {:.0?}",
        path.display(),
        started.elapsed()
    );
}

/// Copy `report.md` to `docs/report.md` and its plots to `docs/plots/`,
/// pointing the plot links at their new place.
fn copy_to_docs(report: &std::path::Path, docs: &std::path::Path) -> std::io::Result<()> {
    let dir = report.parent().unwrap_or(std::path::Path::new("."));
    let mut text = std::fs::read_to_string(report)?;
    let plots = docs.join("plots");
    std::fs::create_dir_all(&plots)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "svg") {
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                std::fs::copy(&path, plots.join(name))?;
                text = text.replace(&format!("]({name})"), &format!("](plots/{name})"));
            }
        }
    }
    std::fs::write(docs.join("report.md"), text)
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn only_a_section_runs_it_and_its_subsections() {
        assert!(covers("hhh", "hhh"));
        assert!(covers("hhh", "hhh-kernel"));
        assert!(covers("hhh", "hhh-loopback"));
        assert!(covers("hhh-kernel", "hhh-kernel"));
        assert!(!covers("hhh-kernel", "hhh"));
        assert!(!covers("rate", "redis"));
        assert!(!covers("hh", "hhh"));
    }
}
