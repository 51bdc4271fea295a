//! What a forked child must forget: one `pthread_atfork` child handler for
//! the whole process, counting forks ([`forks`]) and running the hooks
//! weir's crates register.
//!
//! In the child only the forking thread exists. Background threads (a
//! clock's upkeep thread, a timer sweeper) did not survive, and whatever
//! remembers them must be reset before anything waits on them. The hooks
//! run inside the child's `fork()` call, where only async-signal-safe
//! operations are allowed: lock-free atomic stores and adds, and `Cell`
//! stores to `const` thread-locals without destructors. No allocation, no
//! lock, no I/O.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// See [`forks`].
static FORKS: AtomicU64 = AtomicU64::new(0);

/// How many forks this process descends through, counted since the child
/// handler was installed ([`watch`] or [`on_fork_in_child`]). It changes
/// only in a child, at the fork, so a value recorded by a thread that is
/// not the current count's was recorded in an ancestor process: that
/// thread is not in this one.
///
/// ```
/// use weir_primitives::fork;
/// assert!(fork::watch());
/// let here = fork::forks();
/// assert_eq!(fork::forks(), here); // only a child's count moves
/// ```
#[inline]
pub fn forks() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// Count forks from now on (see [`forks`]), installing the child handler
/// if it is not yet. Returns `false` if it could not be installed
/// (`pthread_atfork` failed for lack of memory); on targets without `fork`
/// there is nothing to count and it returns `true`.
///
/// ```
/// assert!(weir_primitives::fork::watch());
/// ```
pub fn watch() -> bool {
    #[cfg(unix)]
    {
        use std::sync::OnceLock;

        static INSTALLED: OnceLock<bool> = OnceLock::new();

        extern "C" fn in_child() {
            FORKS.fetch_add(1, Ordering::Relaxed);
            run_hooks();
        }
        *INSTALLED.get_or_init(|| {
            // SAFETY: registers a handler that only adds to an atomic, loads
            // atomics and calls the hooks, each async-signal-safe by
            // `on_fork_in_child`'s contract.
            unsafe { libc::pthread_atfork(None, None, Some(in_child)) == 0 }
        })
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// Hooks a process can hold; weir's crates register one each.
const CAPACITY: usize = 8;

/// The registered hooks, filled in order; null marks the end. A slot is
/// written once, before its hook can be asked for, and read (in the child
/// handler) with atomic loads only.
static HOOKS: [AtomicPtr<()>; CAPACITY] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CAPACITY];

/// Run `hook` in the child after every later `fork()` of this process
/// (through `libc::fork` or anything else that runs `pthread_atfork`
/// handlers; a raw `clone` system call is not seen).
///
/// `hook` runs in the child's `fork()` call and must be async-signal-safe
/// (see the [module docs](self)). Registering the same function again has
/// no further effect. Returns `false` if the hook cannot run: the handler
/// could not be installed (`pthread_atfork` failed for lack of memory), or
/// the process already holds as many hooks as it can. On targets without
/// `fork` there is nothing to do and it returns `true`.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// static FORKED: AtomicBool = AtomicBool::new(false);
/// fn forked() {
///     FORKED.store(true, Ordering::Relaxed);
/// }
/// assert!(weir_primitives::fork::on_fork_in_child(forked));
/// assert!(!FORKED.load(Ordering::Relaxed)); // only a child sets it
/// ```
pub fn on_fork_in_child(hook: fn()) -> bool {
    #[cfg(unix)]
    {
        use std::sync::Mutex;

        static REGISTER: Mutex<()> = Mutex::new(());

        if !watch() {
            return false;
        }
        // Registrations are rare; the lock keeps two of one hook from both
        // finding it absent. The child handler never takes it.
        let _turn = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let hook = hook as *mut ();
        for slot in &HOOKS {
            let present = slot.load(Ordering::Acquire);
            if present == hook {
                return true;
            }
            if present.is_null() {
                slot.store(hook, Ordering::Release);
                return true;
            }
        }
        false
    }
    #[cfg(not(unix))]
    {
        let _ = hook;
        true
    }
}

/// Run every registered hook, in registration order.
#[cfg(unix)]
fn run_hooks() {
    for slot in &HOOKS {
        let hook = slot.load(Ordering::Acquire);
        if hook.is_null() {
            return;
        }
        // SAFETY: every non-null slot holds a `fn()` stored by
        // `on_fork_in_child`, and a function pointer round-trips through a
        // data pointer on every target Rust supports.
        let hook = unsafe { std::mem::transmute::<*mut (), fn()>(hook) };
        hook();
    }
}
