//! Unit tests of the loader: a verifier refusal is a typed error with its
//! log, and each layout runs the program compiled for it.

use super::abi::GENERAL_PROGRAM;
use super::*;
use crate::Classifier;
use weir_limits::Shape;

/// A socket filter that reads a map value without a NULL check
/// (`bpf/rejected.c`), which every kernel's verifier refuses.
static REJECTED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rejected.o"));

/// `Err(skip reason)` when the kernel refuses for lack of privilege and
/// `CI` is not `true` (under CI that is a failure, as in the
/// integration tests).
fn or_skip<T>(test: &str, result: Result<T, KernelError>) -> Result<T, KernelError> {
    if let Err(e) = &result
        && e.is_permission_denied()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: CI=true and BPF programs cannot be loaded: {e}"
        );
        eprintln!("\n*** SKIPPED {test}: no permission to load BPF programs ({e}) ***\n");
    }
    result
}

#[test]
fn a_program_the_verifier_refuses_is_a_verifier_error_with_its_log() {
    let test = "a_program_the_verifier_refuses_is_a_verifier_error_with_its_log";
    let loaded = EbpfLoader::new()
        .load(REJECTED)
        .map_err(|e| KernelError::ebpf("loading the maps", e));
    let mut ebpf = match or_skip(test, loaded) {
        Ok(ebpf) => ebpf,
        Err(e) if e.is_permission_denied() => return,
        Err(e) => panic!("{test}: creating the test program's map failed: {e}"),
    };
    let program: &mut SocketFilter = ebpf
        .program_mut("rejected")
        .expect("the object has its program")
        .try_into()
        .expect("a socket filter");
    let refused = program
        .load()
        .map_err(|e| KernelError::program("loading the filter", e));
    match or_skip(test, refused) {
        Err(e @ KernelError::Verifier { .. }) => {
            // The log names the fault, and the message a caller prints
            // carries the log.
            let shown = e.to_string();
            let KernelError::Verifier { log, .. } = e else {
                panic!("matched as a verifier error above")
            };
            assert!(log.contains("map_value_or_null"), "verifier log: {log}");
            assert!(shown.contains(log.as_str()), "{shown}");
        }
        Err(e) if e.is_permission_denied() => {}
        other => panic!("expected a verifier error, got {other:?}"),
    }
}

fn program_for(shape: Shape) -> &'static str {
    let params = Classifier::builder(1_000)
        .seed(1)
        .shape(shape)
        .params()
        .expect("a valid configuration");
    Config::new(&params).expect("supported").program()
}

#[test]
fn common_layouts_run_a_program_compiled_for_them() {
    assert_eq!(program_for(Classifier::DEFAULT_SHAPE), "weir_filter_rows_2");
    assert_eq!(program_for(Shape::rows::<4, 4096>()), "weir_filter_rows_4");
    assert_eq!(program_for(Shape::rows::<1, 2>()), "weir_filter_rows_1");
    assert_eq!(
        program_for(Shape::blocked::<4, 1024>()),
        "weir_filter_blocked_4"
    );
    // Anything else runs the general program.
    assert_eq!(program_for(Shape::rows::<3, 1000>()), GENERAL_PROGRAM);
    assert_eq!(program_for(Shape::blocked::<2, 1000>()), GENERAL_PROGRAM);
    // 3 × 1024 cells are 384 blocks, no power of two.
    assert_eq!(program_for(Shape::blocked::<3, 1024>()), GENERAL_PROGRAM);
    assert_eq!(program_for(Shape::rows::<5, 1024>()), GENERAL_PROGRAM);
    assert_eq!(program_for(Shape::rows::<2, 1>()), GENERAL_PROGRAM);
    // Every name the loader can pick is a symbol of the object (the
    // integration tests load them).
    for shape in [
        Shape::rows::<1, 1024>(),
        Shape::rows::<2, 1024>(),
        Shape::rows::<3, 1024>(),
        Shape::rows::<4, 1024>(),
        Shape::blocked::<1, 1024>(),
        Shape::blocked::<2, 1024>(),
        Shape::blocked::<4, 1024>(),
        Shape::rows::<3, 1000>(),
    ] {
        let name = program_for(shape);
        let symbol = [b"\0", name.as_bytes(), b"\0"].concat();
        assert!(
            OBJECT.windows(symbol.len()).any(|w| w == symbol),
            "{name} is not in the object"
        );
    }
}
