//! `tracing` warnings counted on the thread that emits them, by one
//! process-wide subscriber installed at the first count.
//!
//! Scoped subscribers (`with_default`) meet tracing's process-wide callsite
//! cache, which two tests installing and dropping them at once can leave
//! stale (a test then misses its warnings). Tests that count run their
//! service on a current-thread runtime, so every warning they cause is
//! emitted, and counted, on their own thread.

use std::cell::RefCell;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

std::thread_local! {
    static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

struct Counter;

/// The message of an event.
#[derive(Default)]
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Counter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut message = Message::default();
            event.record(&mut message);
            // The target first, so a test can tell whose warning it is.
            let line = format!("{}: {}", event.metadata().target(), message.0);
            SEEN.with(|seen| seen.borrow_mut().push(line));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Warnings emitted on this thread so far whose `target: message`
/// contains `containing` (every warning for `""`).
pub fn on_this_thread(containing: &str) -> usize {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Counter)
            .expect("the only global subscriber of this test binary");
    });
    SEEN.with(|seen| {
        seen.borrow()
            .iter()
            .filter(|m| m.contains(containing))
            .count()
    })
}
