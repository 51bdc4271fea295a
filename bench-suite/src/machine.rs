//! What the numbers were measured on: printed at the top of every report.

use std::fs;

/// Cores, CPU model and kernel of this machine, as a Markdown paragraph.
pub fn describe() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown CPU".to_string(), |m| m.trim().to_string());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("Machine: {cores} cores, {model}, Linux {}.", kernel.trim())
}

/// The competitors and runtimes measured, with the versions this build
/// locked, as a Markdown sentence.
pub fn crate_versions() -> String {
    const LOCK: &str = include_str!("../../Cargo.lock");
    const NAMES: [&str; 7] = [
        "pingora-limits",
        "pingora-timeout",
        "governor",
        "dashmap",
        "tokio",
        "redis",
        "ahash",
    ];
    let versions: Vec<String> = NAMES
        .iter()
        .filter_map(|name| locked_version(LOCK, name).map(|v| format!("{name} {v}")))
        .collect();
    format!(
        "Crates: weir {}, {}.",
        env!("CARGO_PKG_VERSION"),
        versions.join(", ")
    )
}

/// The version of `name` in a Cargo.lock text (the first entry, if several).
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("name = \"{name}\"\nversion = \"");
    let start = lock.find(&needle)? + needle.len();
    let end = lock[start..].find('"')? + start;
    Some(&lock[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_from_a_lock_file() {
        let lock = "[[package]]\nname = \"tokio\"\nversion = \"1.2.3\"\n";
        assert_eq!(locked_version(lock, "tokio"), Some("1.2.3"));
        assert_eq!(locked_version(lock, "redis"), None);
    }
}
