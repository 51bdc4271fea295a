//! The names a decision can carry as the policy that made it (a key's
//! tier): interned for the life of the process, so that a decision names
//! one by a thin, copyable reference and a check that names its tier
//! copies and drops nothing more than one that does not.
//!
//! Names are interned when a [`Tier`](crate::Tier) is made, never per
//! check, so the interned set holds each distinct tier name once: a few
//! bytes per name a configuration ever gave.

use std::sync::Mutex;

/// An interned policy name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Interned(Box<str>);

impl Interned {
    pub(crate) fn as_str(&'static self) -> &'static str {
        &self.0
    }
}

/// Every name interned so far.
static NAMES: Mutex<Vec<&'static Interned>> = Mutex::new(Vec::new());

/// `name`, interned: the same reference for the same name, every time.
pub(crate) fn intern(name: &str) -> &'static Interned {
    // A poisoned set is still a set of names: nothing half-written.
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Looked through in full: names are few and interned only when a tier
    // is made.
    if let Some(&found) = names.iter().find(|n| n.as_str() == name) {
        return found;
    }
    let interned: &'static Interned = Box::leak(Box::new(Interned(name.into())));
    names.push(interned);
    interned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_interned_once() {
        let a = intern("paid");
        let b = intern("paid");
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.as_str(), "paid");
        assert!(!std::ptr::eq(a, intern("free")));
    }
}
