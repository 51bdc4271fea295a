//! `cargo xtask bench`: run every comparison and write the Markdown report.

use std::path::Path;
use std::time::{Duration, Instant};
use weir_bench_suite::harness::alloc::CountingAllocator;
use weir_bench_suite::harness::machine;
use weir_bench_suite::harness::report::{Report, Scale};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// A section of the report: its name for `--only`, the function that runs
/// it, and about how many seconds it takes on the development VM, quick
/// and full (for the progress bar's estimate of what is left).
type Section = (&'static str, fn(&mut Report), [u64; 2]);

/// The report's sections, in order.
const SECTIONS: &[Section] = &[
    ("limits", weir_bench_suite::limits::run, [10, 60]),
    ("timeout", weir_bench_suite::timeout::run, [5, 40]),
    ("rate", weir_bench_suite::rate::run, [15, 120]),
    ("redis", weir_bench_suite::redis::run, [70, 300]),
    ("memcached", weir_bench_suite::memcached::run, [40, 150]),
    ("stalls", weir_bench_suite::stalls::run, [20, 80]),
    ("http", weir_bench_suite::http::run, [15, 45]),
    ("adaptive", weir_bench_suite::adaptive::run, [80, 110]),
    ("pingora", weir_bench_suite::pingora::run, [12, 35]),
    ("hhh", weir_bench_suite::hhh::run, [3, 25]),
    ("hhh-kernel", weir_bench_suite::hhh::run_kernel, [10, 10]),
    #[cfg(feature = "bpf")]
    ("hhh-loopback", weir_bench_suite::hhh_loopback::run, [5, 9]),
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
            other => exit(&format!(
                "unknown argument `{other}` (expected --quick, --only SECTION)"
            )),
        }
    }
    let names: Vec<&str> = SECTIONS.iter().map(|s| s.0).collect();
    if let Some(unknown) = only.iter().find(|o| !names.contains(&o.as_str())) {
        exit(&format!(
            "no section `{unknown}` (sections: {})",
            names.join(", ")
        ));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."));
    let selected: Vec<&Section> = SECTIONS
        .iter()
        .filter(|(name, _, _)| only.is_empty() || only.iter().any(|o| covers(o, name)))
        .collect();
    let secs = |s: &Section| Duration::from_secs(scale.pick(s.2[0], s.2[1]));
    let started = Instant::now();
    let header = format!(
        "# weir benchmark report\n\nRun on {}. {}\n\n{}\n\nScale: {scale:?}.\n",
        machine::today_utc(),
        machine::describe(),
        machine::crate_versions(),
    );
    println!("{header}");
    let estimate = selected.iter().map(|s| secs(s)).sum();
    let mut report = Report::new(root.join("target/weir-report"), scale, estimate);
    for section in selected {
        report.begin(section.0, secs(section));
        (section.1)(&mut report);
    }
    let (path, plots) = report.finish(&header).expect("write the report");
    let dir = path.parent().unwrap_or(Path::new("."));
    println!(
        "\nReport written in {:.0?}: {}",
        started.elapsed(),
        path.display()
    );
    if !plots.is_empty() {
        println!("Plots in {}: {}", dir.display(), plots.join(", "));
    }
    if scale == Scale::Full && only.is_empty() {
        // docs/ keeps the latest full run (tables and plots), with date and machine.
        let docs = root.join("docs");
        match copy_to_docs(&path, plots, &docs) {
            Ok(()) => println!(
                "Full run: copied to {} and {}",
                docs.join("report.md").display(),
                docs.join("plots").display()
            ),
            Err(e) => eprintln!("weir-report: could not copy the report to docs/: {e}"),
        }
    }
}

fn exit(message: &str) -> ! {
    eprintln!("weir-report: {message}");
    std::process::exit(2);
}

/// Copy `report.md` to `docs/report.md` and its plots to `docs/plots/`,
/// pointing the plot links at their new place.
fn copy_to_docs(report: &Path, plots: &[String], docs: &Path) -> std::io::Result<()> {
    let dir = report.parent().unwrap_or(Path::new("."));
    let mut text = std::fs::read_to_string(report)?;
    std::fs::create_dir_all(docs.join("plots"))?;
    for name in plots {
        std::fs::copy(dir.join(name), docs.join("plots").join(name))?;
        text = text.replace(&format!("]({name})"), &format!("](plots/{name})"));
    }
    std::fs::write(docs.join("report.md"), text)
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn only_a_section_runs_it_and_its_subsections() {
        assert!(
            covers("hhh", "hhh") && covers("hhh", "hhh-kernel") && covers("hhh", "hhh-loopback")
        );
        assert!(covers("hhh-kernel", "hhh-kernel") && !covers("hhh-kernel", "hhh"));
        assert!(!covers("rate", "redis") && !covers("hh", "hhh"));
    }
}
