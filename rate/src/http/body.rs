//! The response body the in-flight layers return: the wrapped body, and
//! the request's hold on its limit until the body has ended. A streaming
//! download counts as in flight for as long as it streams.

use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A response body that keeps its request counted in flight, by
    /// holding `G` (the layer's permit or guard), until the body has ended
    /// (or failed, or been dropped).
    pub struct CountedBody<B, G> {
        #[pin]
        inner: B,
        guard: Option<G>,
    }
}

impl<B, G> CountedBody<B, G> {
    /// `inner`, released from `guard` when it ends.
    pub(crate) fn counted(inner: B, guard: Option<G>) -> Self {
        Self { inner, guard }
    }

    /// `inner`, holding nothing (a refusal's body).
    pub(crate) fn uncounted(inner: B) -> Self {
        Self { inner, guard: None }
    }

    /// The wrapped body.
    pub fn into_inner(self) -> B {
        self.inner
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
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            drop(this.guard.take());
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
