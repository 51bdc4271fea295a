//! The response body the in-flight layers and a settling rate limit
//! return: the wrapped body, and the request's hold on its limit until the
//! body has ended. A streaming download counts as in flight for as long as
//! it streams, and is settled for what it turned out to send.

use http::HeaderMap;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// What a watched body tells its guard, frame by frame.
pub(crate) enum Seen<'a> {
    /// A data frame of this many bytes went out.
    Data(u64),
    /// The trailers went out.
    Trailers(&'a HeaderMap),
    /// The body ended: nothing more will be sent. Not told of a body that
    /// failed or was dropped before its end.
    End,
}

/// How a guard hears of its body's frames.
pub(crate) type Watch<G> = fn(&mut G, Seen<'_>);

/// What a body dropped before its end does for a guard still owed its
/// trailers ([`drain_ready`] for the body's type).
type Drain<B, G> = fn(Pin<&mut B>, &mut G, Watch<G>);

/// How many frames a body dropped before its end is read on, at most,
/// for trailers its source already produced.
const DRAIN_FRAMES: usize = 64;

pin_project! {
    /// A response body that keeps its request counted in flight, by
    /// holding `G` (the layer's permit or guard), until the body has ended
    /// (or failed, or been dropped).
    ///
    /// ```
    /// use http::{Request, Response};
    /// use http_body_util::BodyExt;
    /// use std::convert::Infallible;
    /// use tower::{Layer, ServiceExt};
    /// use weir_tower::{GlobalKey, InflightBody, InflightLayer};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let layer = InflightLayer::new(GlobalKey, 1);
    /// let service = layer.layer(tower::service_fn(|_: Request<String>| async {
    ///     Ok::<_, Infallible>(Response::new(String::from("hello")))
    /// }));
    /// let response = service.clone().oneshot(Request::new(String::new())).await.unwrap();
    /// let body: InflightBody<String> = response.into_body();
    /// // While the body is held, the request counts in flight: the next waits.
    /// let busy = service.clone().oneshot(Request::new(String::new())).await.unwrap();
    /// assert_eq!(busy.status(), 503);
    /// assert_eq!(body.collect().await.unwrap().to_bytes(), "hello");
    /// let next = service.oneshot(Request::new(String::new())).await.unwrap();
    /// assert_eq!(next.status(), 200);
    /// # });
    /// ```
    pub struct CountedBody<B, G> {
        #[pin]
        inner: B,
        guard: Option<G>,
        // Set for a guard that settles by what was sent: it hears of every
        // frame, and is released as soon as the body says it has ended
        // (hyper drops a body whose `is_end_stream` holds without polling
        // it again, which would otherwise look like a body cut short).
        watch: Option<Watch<G>>,
        // Set for a guard owed the trailers (a count in them): a body
        // dropped before its end is read on, without waiting, for trailers
        // its source already produced, so a client that hangs up before
        // them is still settled by the count.
        drain: Option<Drain<B, G>>,
    }

    impl<B, G> PinnedDrop for CountedBody<B, G> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (Some(guard), Some(watch), Some(drain)) = (this.guard.as_mut(), *this.watch, *this.drain)
                && !std::thread::panicking()
            {
                // A body that panics when polled once more must not take
                // the connection's task down from a drop: it is then
                // settled as it stands.
                let inner = this.inner;
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drain(inner, guard, watch);
                }));
            }
        }
    }
}

impl<B, G> CountedBody<B, G> {
    /// `inner`, released from `guard` when it ends.
    pub(crate) fn counted(inner: B, guard: Option<G>) -> Self {
        Self {
            inner,
            guard,
            watch: None,
            drain: None,
        }
    }

    /// `inner`, holding nothing (a refusal's body).
    pub(crate) fn uncounted(inner: B) -> Self {
        Self::counted(inner, None)
    }

    /// `inner`, telling `guard` of every frame through `watch` and then
    /// releasing it; a body already at its end releases it at once. With
    /// `owed_trailers`, a body dropped before its end is read on for the
    /// trailers its source already produced (never waiting for more).
    pub(crate) fn watched(inner: B, mut guard: G, watch: Watch<G>, owed_trailers: bool) -> Self
    where
        B: http_body::Body,
    {
        if inner.is_end_stream() {
            watch(&mut guard, Seen::End);
            drop(guard);
            return Self::uncounted(inner);
        }
        Self {
            inner,
            guard: Some(guard),
            watch: Some(watch),
            drain: owed_trailers.then_some(drain_ready::<B, G> as Drain<B, G>),
        }
    }
}

impl<B: Default, G> Default for CountedBody<B, G> {
    fn default() -> Self {
        Self::uncounted(B::default())
    }
}

impl<B: std::fmt::Debug, G> std::fmt::Debug for CountedBody<B, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountedBody")
            .field("inner", &self.inner)
            .field("counted", &self.guard.is_some())
            .finish()
    }
}

impl<B: http_body::Body, G> http_body::Body for CountedBody<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        match (&frame, *this.watch) {
            (Some(Ok(frame)), Some(watch)) => {
                if let Some(guard) = this.guard.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        watch(guard, Seen::Data(bytes::Buf::remaining(data) as u64));
                    } else if let Some(trailers) = frame.trailers_ref() {
                        watch(guard, Seen::Trailers(trailers));
                    }
                }
                if this.inner.is_end_stream() {
                    end(this.guard, watch);
                }
            }
            (Some(Ok(_)), None) => {}
            (None, Some(watch)) => end(this.guard, watch),
            // Failed, or ended without a watch: released, not settled as
            // complete.
            (Some(Err(_)), _) | (None, None) => drop(this.guard.take()),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The body has ended: tell the guard, then release it.
fn end<G>(guard: &mut Option<G>, watch: Watch<G>) {
    if let Some(mut guard) = guard.take() {
        watch(&mut guard, Seen::End);
    }
}

/// Read what `inner` already holds, without waiting, for trailers: its
/// source may have produced them after the client stopped reading. Data
/// frames found on the way were never sent and are not told; at most
/// [`DRAIN_FRAMES`] frames are read.
fn drain_ready<B: http_body::Body, G>(mut inner: Pin<&mut B>, guard: &mut G, watch: Watch<G>) {
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..DRAIN_FRAMES {
        match inner.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    watch(guard, Seen::Trailers(trailers));
                    return;
                }
            }
            // Pending (nothing more yet), ended, or failed.
            _ => return,
        }
    }
}
