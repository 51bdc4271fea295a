//! The response body the in-flight layers and a settling rate limit
//! return: the wrapped body, and the request's hold on its limit until the
//! body has ended. A streaming download counts as in flight for as long as
//! it streams, and is settled for what it turned out to send.

use http::HeaderMap;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

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
    }
}

impl<B, G> CountedBody<B, G> {
    /// `inner`, released from `guard` when it ends.
    pub(crate) fn counted(inner: B, guard: Option<G>) -> Self {
        Self {
            inner,
            guard,
            watch: None,
        }
    }

    /// `inner`, holding nothing (a refusal's body).
    pub(crate) fn uncounted(inner: B) -> Self {
        Self::counted(inner, None)
    }

    /// `inner`, telling `guard` of every frame through `watch` and then
    /// releasing it; a body already at its end releases it at once.
    pub(crate) fn watched(inner: B, mut guard: G, watch: Watch<G>) -> Self
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
