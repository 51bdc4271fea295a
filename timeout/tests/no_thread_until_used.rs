//! Linking the crate or touching the global manager starts no thread; the
//! first armed timer starts exactly one. Its own test binary, so nothing else
//! in the process has armed a timer first.

use std::time::Duration;

/// Threads of this process named like the sweeper.
fn sweeper_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .filter(|name| name.trim() == "weir-timeout")
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn the_sweeper_starts_with_the_first_armed_timer() {
    let global = weir_timeout::TimerManager::global();
    assert_eq!(global.metrics().sweeper_threads_started, 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Ready at once: nothing is armed.
    let r = rt.block_on(weir_timeout::timeout(Duration::from_secs(1), async { 3 }));
    assert_eq!(r, Ok(3));
    assert_eq!(global.metrics().sweeper_threads_started, 0);
    assert_eq!(sweeper_threads(), 0);

    rt.block_on(weir_timeout::sleep(Duration::from_millis(5)));
    assert_eq!(global.metrics().sweeper_threads_started, 1);
    if cfg!(target_os = "linux") {
        assert_eq!(sweeper_threads(), 1);
    }
}

#[test]
fn futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    send_sync(&weir_timeout::sleep(Duration::from_secs(1)));
    send_sync(&weir_timeout::timeout(
        Duration::from_secs(1),
        std::future::ready(1),
    ));
    send_sync(weir_timeout::TimerManager::global());
}
