//! pingora-timeout's `fast_timeout` module: [`fast_timeout`] and
//! [`fast_sleep`] on weir's shared timers, the threshold above which
//! [`fast_timeout`] uses tokio's timer instead, and the `fork()` hooks.
//!
//! Like pingora's, the fast timers pay off from about a hundred timeouts a
//! second; below that [`tokio_timeout`](super::tokio_timeout) is as good.

use super::{Delay, Timeout, ToTimeout, TokioTimeout};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The default of [`fast_timeout_to_tokio_threshold`]: 15 minutes.
pub const DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD: Duration = Duration::from_secs(15 * 60);

/// Whole seconds, as pingora keeps them; `u64::MAX` means "never tokio"
/// (no duration has more whole seconds than that, so nothing is lost).
const NEVER_TOKIO: u64 = u64::MAX;
static THRESHOLD_SECS: AtomicU64 =
    AtomicU64::new(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD.as_secs());

/// Set the duration above which [`fast_timeout`] uses tokio's timer;
/// `None` never does. Only whole seconds count, as in pingora: a duration
/// uses tokio when its whole seconds exceed the threshold's.
///
/// pingora falls back because its shared timers of cancelled long timeouts
/// live until their deadline. weir frees a tick's timer when its last
/// waiter goes, so the fallback is kept only so that behaviour matches.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::fast_timeout::*;
///
/// set_fast_timeout_to_tokio_threshold(Some(Duration::from_secs(3600)));
/// assert_eq!(fast_timeout_to_tokio_threshold(), Some(Duration::from_secs(3600)));
/// set_fast_timeout_to_tokio_threshold(Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD));
/// ```
pub fn set_fast_timeout_to_tokio_threshold(threshold: Option<Duration>) {
    let secs = threshold.map_or(NEVER_TOKIO, |t| t.as_secs());
    THRESHOLD_SECS.store(secs, Ordering::Relaxed);
}

/// The duration above which [`fast_timeout`] uses tokio's timer (`None`:
/// never); [`DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD`] unless set.
///
/// ```
/// use weir_timeout::pingora::fast_timeout::fast_timeout_to_tokio_threshold;
///
/// assert!(fast_timeout_to_tokio_threshold().is_some());
/// ```
pub fn fast_timeout_to_tokio_threshold() -> Option<Duration> {
    match THRESHOLD_SECS.load(Ordering::Relaxed) {
        NEVER_TOKIO => None,
        secs => Some(Duration::from_secs(secs)),
    }
}

fn use_tokio(duration: Duration) -> bool {
    let threshold = THRESHOLD_SECS.load(Ordering::Relaxed);
    threshold != NEVER_TOKIO && duration.as_secs() > threshold
}

/// The timer of weir's global manager, started lazily.
///
/// Users don't need to interact with this type.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::{ToTimeout, fast_timeout::FastTimeout};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// FastTimeout::create(Duration::from_millis(2)).timeout().await;
/// # });
/// ```
#[derive(Debug)]
pub struct FastTimeout(Duration);

impl ToTimeout for FastTimeout {
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        Box::pin(crate::sleep(self.0))
    }

    fn create(d: Duration) -> Self {
        Self(d)
    }

    fn start(&self) -> Delay {
        Delay::weir(self.0)
    }
}

/// The timer of [`fast_timeout`]: weir's, or tokio's above the threshold
/// (decided when the timeout is created).
///
/// Users don't need to interact with this type.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::{Timeout, fast_timeout::{FastOrTokioTimeout, fast_timeout}};
///
/// let _t: Timeout<_, FastOrTokioTimeout> = fast_timeout(Duration::from_secs(1), async { 1 });
/// ```
#[derive(Debug)]
pub struct FastOrTokioTimeout {
    duration: Duration,
    tokio: bool,
}

impl ToTimeout for FastOrTokioTimeout {
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        if self.tokio {
            TokioTimeout::create(self.duration).timeout()
        } else {
            FastTimeout::create(self.duration).timeout()
        }
    }

    fn create(duration: Duration) -> Self {
        Self {
            duration,
            tokio: use_tokio(duration),
        }
    }

    fn start(&self) -> Delay {
        if self.tokio {
            TokioTimeout::create(self.duration).start()
        } else {
            Delay::weir(self.duration)
        }
    }
}

/// [`tokio::time::timeout`], but cheap: the deadline is rounded up to the
/// next 10 ms tick and shares that tick's timer; nothing is armed unless
/// `future` waits. Durations above [`fast_timeout_to_tokio_threshold`] use
/// tokio's timer.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::fast_timeout::fast_timeout;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// assert_eq!(fast_timeout(Duration::from_secs(1), async { 1 }).await.unwrap(), 1);
/// assert!(fast_timeout(Duration::from_millis(10), std::future::pending::<()>()).await.is_err());
/// # });
/// ```
///
/// # Differences from pingora
///
/// * A zero duration times out at the first poll that waits (pingora waits
///   for the next tick).
/// * Without a threshold, `Duration::MAX` never fires (pingora panics when
///   the timer starts); with one, it goes to tokio's timer in both.
/// * Under tokio's paused test clock the timer follows virtual time.
pub fn fast_timeout<T>(duration: Duration, future: T) -> Timeout<T, FastOrTokioTimeout>
where
    T: Future,
{
    Timeout::with_callback(future, FastOrTokioTimeout::create(duration))
}

/// [`tokio::time::sleep`], but cheap: rounded up to the next 10 ms tick
/// (never early) and sharing that tick's timer. It never uses tokio's
/// timer, whatever the threshold (as in pingora).
///
/// ```
/// use std::time::{Duration, Instant};
/// use weir_timeout::pingora::fast_timeout::fast_sleep;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let start = Instant::now();
/// fast_sleep(Duration::from_millis(15)).await;
/// assert!(start.elapsed() >= Duration::from_millis(15));
/// # });
/// ```
pub async fn fast_sleep(duration: Duration) {
    crate::sleep(duration).await
}

/// Call right before `fork()`: returns once weir's timer thread has stopped
/// where it holds no lock.
///
/// ```
/// use weir_timeout::pingora::fast_timeout::{pause_for_fork, unpause};
///
/// pause_for_fork();
/// // ... fork() here ...
/// unpause();
/// ```
///
/// # Differences from pingora
///
/// pingora sleeps 20 ms and hopes; this waits for the timer thread to say
/// it stopped (usually microseconds; it keeps waiting if it is starved of
/// CPU, since forking then would not be safe). Timers started while paused
/// fire when due after [`unpause`]; pingora fires them at once.
pub fn pause_for_fork() {
    while !crate::manager::TimerManager::global().pause_for_fork() {}
}

/// Call right after `fork()`, in parent and child. In the child the timers
/// work again at once (pingora's child waits for a 2 s watchdog).
pub fn unpause() {
    crate::manager::TimerManager::global().unpause()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test in this crate that changes the threshold, so that the
    // global does not race with itself.
    #[test]
    fn tokio_is_used_only_above_the_threshold_in_whole_seconds() {
        assert_eq!(
            fast_timeout_to_tokio_threshold(),
            Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD)
        );
        let at = DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD;
        assert!(!FastOrTokioTimeout::create(Duration::from_secs(1)).tokio);
        assert!(!FastOrTokioTimeout::create(at).tokio);
        assert!(!FastOrTokioTimeout::create(at + Duration::from_millis(999)).tokio);
        assert!(FastOrTokioTimeout::create(at + Duration::from_secs(1)).tokio);
        assert!(FastOrTokioTimeout::create(Duration::MAX).tokio);

        set_fast_timeout_to_tokio_threshold(None);
        assert_eq!(fast_timeout_to_tokio_threshold(), None);
        assert!(!FastOrTokioTimeout::create(Duration::MAX).tokio);

        set_fast_timeout_to_tokio_threshold(Some(Duration::from_millis(2500)));
        assert_eq!(
            fast_timeout_to_tokio_threshold(),
            Some(Duration::from_secs(2))
        );
        assert!(!FastOrTokioTimeout::create(Duration::from_millis(2999)).tokio);
        assert!(FastOrTokioTimeout::create(Duration::from_secs(3)).tokio);

        set_fast_timeout_to_tokio_threshold(Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD));
    }
}
