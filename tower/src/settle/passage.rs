//! How far a request got through the weir layers inside a settling one.
//!
//! A settling layer outside another (the stacked recipe: a daily limit
//! settling by [`Settle::admitted`](super::Settle::admitted) outside a
//! per-second one on a store) has spent its units once its own check
//! admits. If the client then hangs up while a layer inside is still
//! deciding (a round trip to the store), the request never reaches the
//! origin, yet the outer layer, seeing no response, would keep what it
//! spent: every hang-up between the two checks would cost the client a
//! unit of its quota for nothing done.
//!
//! So a settling layer puts a [`Passage`] in the request's extensions
//! (sharing one already there), and a weir layer inside that decides
//! asynchronously counts itself in it while it decides, until it hands the
//! request on (or answers it). A dropped decision is never counted out: a
//! settling layer whose request ends with no response finds the count
//! above zero, and knows the request stopped at a weir check inside it,
//! so it settles at nothing. A count of zero means every weir layer inside
//! handed the request on: the origin (or a layer that is not weir's) may
//! have worked on it, and the layer keeps what it spent.
//!
//! Layers outside a settling one have handed the request on before it
//! sees it, so the count only ever holds layers inside whoever reads it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Weir checks under way for one request, inside its settling layers.
#[derive(Clone, Default)]
pub(crate) struct Passage(Arc<AtomicUsize>);

impl Passage {
    /// The passage of `extensions`' request, put there if it has none.
    pub(crate) fn of(extensions: &mut http::Extensions) -> Self {
        if let Some(passage) = extensions.get::<Passage>() {
            return passage.clone();
        }
        let passage = Passage::default();
        extensions.insert(passage.clone());
        passage
    }

    /// A check of `extensions`' request starts, if a settling layer is
    /// outside: its [`Checking`] is counted out when the check hands the
    /// request on or answers it.
    pub(crate) fn checking(extensions: &http::Extensions) -> Checking {
        let passage = extensions.get::<Passage>().cloned();
        if let Some(p) = &passage {
            p.0.fetch_add(1, Ordering::Relaxed);
        }
        Checking(passage)
    }

    /// Whether a check inside has not handed the request on.
    pub(crate) fn stopped_inside(&self) -> bool {
        // Relaxed is enough: the check and the guard reading this run in
        // the same request's future, which the runtime polls and drops
        // from one thread at a time, with its own synchronisation between.
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// One check counted in a [`Passage`]: counted out by
/// [`passed`](Self::passed), and never by a drop, so a check dropped
/// half-way stays counted.
pub(crate) struct Checking(Option<Passage>);

impl Checking {
    /// The check handed the request on, or answered it.
    pub(crate) fn passed(self) {
        if let Some(p) = &self.0 {
            p.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Passage;

    #[test]
    fn a_check_dropped_half_way_stays_counted() {
        let mut extensions = http::Extensions::new();
        let outer = Passage::of(&mut extensions);
        assert!(!outer.stopped_inside());
        // A second settling layer shares the first one's passage.
        let inner = Passage::of(&mut extensions);
        let passed = Passage::checking(&extensions);
        assert!(inner.stopped_inside());
        passed.passed();
        assert!(!outer.stopped_inside());
        drop(Passage::checking(&extensions));
        assert!(outer.stopped_inside() && inner.stopped_inside());
    }

    #[test]
    fn without_a_settling_layer_outside_nothing_is_counted() {
        let extensions = http::Extensions::new();
        Passage::checking(&extensions).passed();
        assert!(extensions.get::<Passage>().is_none());
    }
}
