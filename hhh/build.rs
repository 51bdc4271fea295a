//! Compiles the BPF filter (`bpf/filter.c`) with clang when the `bpf`
//! feature is on; the crate embeds the object with `include_bytes!`. The
//! unit tests also embed `bpf/rejected.c`, a program the verifier refuses.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=bpf/filter.c");
    println!("cargo:rerun-if-changed=bpf/rejected.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    if env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under the
    // host's multiarch directory; `-target bpf` does not look there.
    let multiarch = Command::new(&clang)
        .arg("-print-multiarch")
        .output()
        .unwrap_or_else(|e| missing_clang(&clang, &e.to_string()));
    let multiarch = String::from_utf8_lossy(&multiarch.stdout).trim().to_owned();
    for name in ["filter", "rejected"] {
        compile(&clang, &multiarch, name);
    }
}

/// `bpf/<name>.c` to `$OUT_DIR/<name>.o`.
fn compile(clang: &str, multiarch: &str, name: &str) {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join(format!("{name}.o"));
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("bpf")
        .join(format!("{name}.c"));
    let mut cmd = Command::new(clang);
    cmd.args([
        "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror", "-c",
    ]);
    if !multiarch.is_empty() {
        cmd.arg(format!("-I/usr/include/{multiarch}"));
    }
    cmd.arg(&src).arg("-o").arg(&out);
    let result = cmd
        .output()
        .unwrap_or_else(|e| missing_clang(clang, &e.to_string()));
    if !result.status.success() {
        let stderr = String::from_utf8_lossy(&result.stderr);
        let hint = if stderr.contains("bpf/bpf_helpers.h") || stderr.contains("linux/bpf.h") {
            "\nThe BPF headers are missing: install the Debian packages `libbpf-dev` and `linux-libc-dev` (apt-get install libbpf-dev linux-libc-dev)."
        } else {
            ""
        };
        panic!(
            "weir-hhh (feature `bpf`): compiling bpf/{name}.c with `{clang}` failed:\n{stderr}{hint}"
        );
    }
}

fn missing_clang(clang: &str, why: &str) -> ! {
    panic!(
        "weir-hhh (feature `bpf`) compiles its BPF filter with clang, but `{clang}` could not be run ({why}).\n\
         Install the Debian packages `clang` and `libbpf-dev` (apt-get install clang libbpf-dev), \
         or point the CLANG environment variable at a clang that supports `-target bpf`, \
         or build without the `bpf` feature."
    )
}
