//! The futures: [`Timeout`] and [`Sleep`], both built on one lazily armed
//! [`Timer`].
//!
//! A timer costs nothing until the first poll that would have to wait: the
//! proxy's common case is a read that is already satisfied, and then no clock
//! is read and no table is touched. Only when the inner future pends is the
//! timer armed, and only then is time looked at (usually just the TSC, see
//! the clock module), so a `Timeout` that is ready on its first poll costs
//! one branch over the bare future.

use crate::manager::{Arm, Inner, TimerManager, tokio_clock_paused};
use crate::table::Armed;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use weir_primitives::time::duration_to_nanos;

/// The error of a [`Timeout`] whose deadline passed before its future
/// completed.
///
/// It converts into [`std::io::Error`] with kind
/// [`TimedOut`](std::io::ErrorKind::TimedOut), so `?` works in I/O code:
///
/// ```
/// use std::io;
/// use weir_timeout::Elapsed;
///
/// let e: io::Error = Elapsed::default().into();
/// assert_eq!(e.kind(), io::ErrorKind::TimedOut);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(e: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, e)
    }
}

/// Which manager a timer uses.
#[derive(Debug)]
enum Source {
    Global,
    Custom(Arc<Inner>),
}

impl Source {
    #[inline]
    fn inner(&self) -> &Arc<Inner> {
        match self {
            Source::Global => &TimerManager::global().inner,
            Source::Custom(inner) => inner,
        }
    }
}

#[derive(Debug)]
enum State {
    /// Not armed yet.
    Idle,
    /// Subscribed to a tick's shared timer.
    Armed(Armed),
    /// The deadline has passed.
    Elapsed,
    /// Under a paused tokio clock: tokio's own timer, so virtual time rules.
    Tokio(Pin<Box<tokio::time::Sleep>>),
    /// Under a paused tokio clock, a deadline beyond the horizon where weir's
    /// own timers saturate: never fires, as they never do.
    Never,
}

/// When a timer's deadline is.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// This long after the first poll that waits (no clock read before).
    After(Duration),
    /// At this instant.
    At(Instant),
}

/// A lazily armed deadline, registered at the first poll that waits.
#[derive(Debug)]
pub(crate) struct Timer {
    deadline: Deadline,
    source: Source,
    state: State,
}

impl Timer {
    fn new(duration: Duration, source: Source) -> Self {
        Self::until(Deadline::After(duration), source)
    }

    fn until(deadline: Deadline, source: Source) -> Self {
        Self {
            deadline,
            source,
            state: State::Idle,
        }
    }

    /// The time left to wait, read at the moment of arming.
    #[inline]
    fn remaining(&self) -> Duration {
        match self.deadline {
            Deadline::After(duration) => duration,
            Deadline::At(at) => at.saturating_duration_since(Instant::now()),
        }
    }

    /// Give up any registration and wait for `deadline` instead. A timer
    /// that was waiting (its tick not yet fired) is armed again at once for
    /// the same task, so the task is woken at the new deadline whether or
    /// not it polls first, as with tokio; otherwise it is armed at the next
    /// poll that waits.
    fn reset(&mut self, deadline: Deadline) {
        let waker = match std::mem::replace(&mut self.state, State::Idle) {
            State::Armed(armed) => self.source.inner().disarm_taking(armed),
            // On a paused clock: tokio's reset keeps tokio's registration.
            State::Tokio(mut sleep) => {
                self.state = match paused_wait(deadline) {
                    State::Tokio(new) => {
                        sleep.as_mut().reset(new.deadline());
                        State::Tokio(sleep)
                    }
                    // Already past: due at once, and tokio wakes the task.
                    State::Elapsed => {
                        sleep.as_mut().reset(tokio::time::Instant::now());
                        State::Tokio(sleep)
                    }
                    never => never,
                };
                None
            }
            _ => None,
        };
        self.deadline = deadline;
        if let Some(waker) = waker
            && self
                .poll_elapsed(&mut Context::from_waker(&waker))
                .is_ready()
        {
            waker.wake();
        }
    }

    /// `Ready` once the deadline has passed; otherwise the task behind `cx`
    /// will be woken when it does.
    #[inline]
    fn poll_elapsed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.state {
            State::Idle => self.arm(cx),
            State::Armed(armed) => {
                if self.source.inner().poll_armed(armed, cx.waker()) {
                    self.finish();
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
            State::Elapsed => Poll::Ready(()),
            State::Tokio(sleep) => sleep.as_mut().poll(cx),
            State::Never => Poll::Pending,
        }
    }

    #[inline]
    fn arm(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let remaining = self.remaining();
        if remaining.is_zero() {
            // Past on the real clock, but a paused tokio clock, on which
            // tokio reads instants, may not have got there yet.
            if matches!(self.deadline, Deadline::At(_)) && tokio_clock_paused() {
                self.state = paused_wait(self.deadline);
                return self.poll_elapsed(cx);
            }
            self.state = State::Elapsed;
            return Poll::Ready(());
        }
        let inner = self.source.inner();
        match inner.arm(duration_to_nanos(remaining), cx.waker()) {
            Arm::Armed(armed) => {
                self.leave_idle(State::Armed(armed));
                Poll::Pending
            }
            Arm::Elapsed => {
                self.leave_idle(State::Elapsed);
                Poll::Ready(())
            }
            Arm::UseTokio => {
                self.state = paused_wait(self.deadline);
                self.poll_elapsed(cx)
            }
        }
    }

    /// Move on from [`State::Idle`], which owns nothing: no drop of the old
    /// state is needed, and skipping its (never taken) call to drop a
    /// tokio timer lets the registration go straight from registers into
    /// the state instead of through a stack copy the CPU cannot forward.
    #[inline(always)]
    fn leave_idle(&mut self, next: State) {
        let idle = std::mem::replace(&mut self.state, next);
        debug_assert!(matches!(idle, State::Idle));
        std::mem::forget(idle);
    }

    /// The tick fired: give back the registration.
    fn finish(&mut self) {
        if let State::Armed(armed) = std::mem::replace(&mut self.state, State::Elapsed) {
            self.source.inner().disarm(armed);
        }
    }

    /// Whether the deadline is known to have passed, without registering.
    fn has_elapsed(&self) -> bool {
        match &self.state {
            State::Idle => match self.deadline {
                Deadline::After(duration) => duration.is_zero(),
                Deadline::At(at) => {
                    at <= Instant::now()
                        && (!tokio_clock_paused() || at <= tokio::time::Instant::now().into_std())
                }
            },
            State::Armed(armed) => self.source.inner().armed_fired(armed),
            State::Elapsed => true,
            State::Tokio(sleep) => sleep.is_elapsed(),
            State::Never => false,
        }
    }
}

/// The wait for `deadline` on a paused tokio clock. An instant is read on
/// tokio's clock, as tokio's own `sleep_until` reads it: converted on the
/// real clock it would be early or late by however far the virtual time is
/// from the real one. And not `tokio::time::sleep`: it clamps every
/// duration to 30 years, so a longer timer would fire early and
/// `Duration::MAX` would fire at all once the test's virtual time
/// auto-advances that far.
fn paused_wait(deadline: Deadline) -> State {
    let now = tokio::time::Instant::now();
    let remaining = match deadline {
        Deadline::After(duration) => duration,
        Deadline::At(at) => at.saturating_duration_since(now.into_std()),
    };
    if remaining.is_zero() {
        return State::Elapsed;
    }
    if duration_to_nanos(remaining) == u64::MAX {
        return State::Never;
    }
    match now.checked_add(remaining) {
        Some(at) => State::Tokio(Box::pin(tokio::time::sleep_until(at))),
        None => State::Never,
    }
}

impl Drop for Timer {
    #[inline]
    fn drop(&mut self) {
        if let State::Armed(_) = &self.state {
            self.finish();
        }
    }
}

pin_project! {
    /// A future with a deadline, from [`timeout`](crate::timeout) or
    /// [`TimerManager::timeout`].
    ///
    /// Each poll polls the inner future first, so a result that is ready is
    /// returned even if the deadline has just passed, and a future that is
    /// ready at once never arms a timer.
    ///
    /// ```
    /// use std::time::Duration;
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let slow = weir_timeout::timeout(Duration::from_millis(5), std::future::pending::<()>());
    /// assert_eq!(slow.await, Err(weir_timeout::Elapsed::default()));
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        timer: Timer,
    }
}

impl<F> Timeout<F> {
    /// The inner future.
    ///
    /// ```
    /// let t = weir_timeout::timeout(std::time::Duration::from_secs(1), std::future::ready(5));
    /// let _inner: &std::future::Ready<i32> = t.get_ref();
    /// ```
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// Give up the deadline and take back the inner future (cancelling the
    /// timer if it was armed).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let t = weir_timeout::timeout(std::time::Duration::from_secs(1), async { 5 });
    /// assert_eq!(t.into_inner().await, 5);
    /// # });
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }

    /// Whether the deadline is known to have passed. `false` until the
    /// timer is armed (the first poll at which the inner future waits).
    ///
    /// ```
    /// let t = weir_timeout::timeout(std::time::Duration::from_secs(1), std::future::pending::<()>());
    /// assert!(!t.is_elapsed(), "never polled: no timer armed yet");
    /// ```
    pub fn is_elapsed(&self) -> bool {
        self.timer.has_elapsed()
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match this.timer.poll_elapsed(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A future that completes after a duration, from [`sleep`](crate::sleep) or
/// [`TimerManager::sleep`].
///
/// A duration is counted from the first poll (an instant, from
/// [`sleep_until`] or [`reset`](Sleep::reset), is fixed), and the deadline
/// is rounded up to the manager's tick: it never completes early and is late
/// by at most one tick plus the sweeper's wake-up latency.
///
/// ```
/// use std::time::{Duration, Instant};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let start = Instant::now();
/// let nap: weir_timeout::Sleep = weir_timeout::sleep(Duration::from_millis(3));
/// nap.await;
/// assert!(start.elapsed() >= Duration::from_millis(3));
/// # });
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct Sleep {
    timer: Timer,
}

impl Sleep {
    /// Whether the deadline is known to have passed.
    pub fn is_elapsed(&self) -> bool {
        self.timer.has_elapsed()
    }

    /// The instant this sleep ends, if it was given one ([`sleep_until`],
    /// [`reset`](Self::reset)). A sleep made with a duration has none: its
    /// deadline counts from the first poll that waits (tokio's counts from
    /// creation), which saves a clock read for sleeps that never wait.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let at = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(weir_timeout::sleep_until(at).deadline(), Some(at));
    /// assert_eq!(weir_timeout::sleep(Duration::from_secs(1)).deadline(), None);
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        match self.timer.deadline {
            Deadline::At(at) => Some(at),
            Deadline::After(_) => None,
        }
    }

    /// Wait until `deadline` instead, whether or not this sleep has already
    /// ended, so one `Sleep` can serve a `select!` loop (as tokio's
    /// `Sleep::reset` does). A sleep still waiting goes on waiting for the
    /// same task, on a paused tokio clock too: the task is woken at the new
    /// deadline even if it does not poll the sleep again first (an idle
    /// timer reset on activity). One whose deadline had already come has
    /// woken its task, which polls as usual.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let mut tick = std::pin::pin!(weir_timeout::sleep(Duration::from_millis(5)));
    /// for _ in 0..3 {
    ///     tick.as_mut().await;
    ///     tick.as_mut().reset(Instant::now() + Duration::from_millis(5));
    /// }
    /// # });
    /// ```
    pub fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
        self.timer.reset(Deadline::At(deadline));
    }
}

impl Future for Sleep {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.timer.poll_elapsed(cx)
    }
}

/// Run `future` with a deadline `duration` away on the global manager
/// (10 ms ticks).
///
/// The deadline is rounded up to the next tick and counted from the first
/// poll at which `future` is not ready; a future that is ready at once never
/// touches the timer. `Duration::ZERO` times out at the first poll that
/// would wait; `Duration::MAX` (or anything past the year 2500) never does.
///
/// # Panics
///
/// The first timer ever armed on a manager starts its sweeper thread; if the
/// operating system refuses to start a thread, that poll panics.
///
/// ```
/// use std::time::Duration;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let fast = weir_timeout::timeout(Duration::from_millis(50), async { "done" }).await;
/// assert_eq!(fast, Ok("done"));
///
/// let slow = weir_timeout::timeout(Duration::from_millis(20), std::future::pending::<()>()).await;
/// assert!(slow.is_err());
/// # });
/// ```
#[inline]
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        timer: Timer::new(duration, Source::Global),
    }
}

/// Wait for `duration` on the global manager (10 ms ticks).
///
/// Like [`timeout`], the deadline counts from the first poll, never fires
/// early, and panics only if the sweeper thread cannot be started.
///
/// ```
/// use std::time::{Duration, Instant};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let start = Instant::now();
/// weir_timeout::sleep(Duration::from_millis(15)).await;
/// assert!(start.elapsed() >= Duration::from_millis(15));
/// # });
/// ```
#[inline]
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        timer: Timer::new(duration, Source::Global),
    }
}

/// Run `future` until `deadline` on the global manager: [`timeout`] with an
/// instant instead of a duration (rounded up to the next tick, never early).
/// Under tokio's paused test clock the instant is read on tokio's clock, as
/// `tokio::time::timeout_at` reads it.
///
/// ```
/// use std::time::{Duration, Instant};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let soon = Instant::now() + Duration::from_millis(20);
/// assert!(weir_timeout::timeout_at(soon, std::future::pending::<()>()).await.is_err());
/// assert_eq!(weir_timeout::timeout_at(soon, async { 1 }).await, Ok(1));
/// # });
/// ```
#[inline]
pub fn timeout_at<F: Future>(deadline: Instant, future: F) -> Timeout<F> {
    Timeout {
        future,
        timer: Timer::until(Deadline::At(deadline), Source::Global),
    }
}

/// Wait until `deadline` on the global manager: [`sleep`] with an instant
/// instead of a duration. A deadline already past completes at the first
/// poll. Under tokio's paused test clock the instant is read on tokio's
/// clock, as `tokio::time::sleep_until` reads it.
///
/// ```
/// use std::time::{Duration, Instant};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let at = Instant::now() + Duration::from_millis(15);
/// weir_timeout::sleep_until(at).await;
/// assert!(Instant::now() >= at);
/// # });
/// ```
#[inline]
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        timer: Timer::until(Deadline::At(deadline), Source::Global),
    }
}

impl TimerManager {
    /// [`timeout_at`] on this manager.
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        Timeout {
            future,
            timer: Timer::until(
                Deadline::At(deadline),
                Source::Custom(Arc::clone(&self.inner)),
            ),
        }
    }

    /// [`sleep_until`] on this manager.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep {
            timer: Timer::until(
                Deadline::At(deadline),
                Source::Custom(Arc::clone(&self.inner)),
            ),
        }
    }

    /// [`timeout`](crate::timeout) on this manager.
    pub fn timeout<F: Future>(&self, duration: Duration, future: F) -> Timeout<F> {
        Timeout {
            future,
            timer: Timer::new(duration, Source::Custom(Arc::clone(&self.inner))),
        }
    }

    /// [`sleep`](crate::sleep) on this manager.
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep {
            timer: Timer::new(duration, Source::Custom(Arc::clone(&self.inner))),
        }
    }
}
