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
        "# weir benchmark report\n\n{}\n\n{}\n\nScale: {:?}.\n",
        machine::describe(),
        machine::crate_versions(),
        scale
    );
    println!("{header}");

    weir_bench_suite::limits::run(&mut report);

    let path = report.finish(&header).expect("write the report");
    println!(
        "\nreport written to {} in {:.0?}",
        path.display(),
        started.elapsed()
    );
}
