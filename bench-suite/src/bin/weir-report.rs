//! `cargo xtask bench`: run every comparison and write the Markdown report.

use std::path::PathBuf;
use std::time::Instant;
use weir_bench_suite::alloc::CountingAllocator;
use weir_bench_suite::machine;
use weir_bench_suite::report::{Report, Scale};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn main() {
    let mut scale = Scale::Full;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => scale = Scale::Quick,
            other => {
                eprintln!("weir-report: unknown argument `{other}` (expected --quick)");
                std::process::exit(2);
            }
        }
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

    weir_bench_suite::limits::run(&mut report);
    weir_bench_suite::hhh::run(&mut report);
    weir_bench_suite::rate::run(&mut report);
    weir_bench_suite::redis::run(&mut report);

    weir_bench_suite::timeout::run(&mut report);

    let path = report.finish(&header).expect("write the report");
    if scale == Scale::Full {
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
