//! Which integration tests may run side by side in the one test process.
//!
//! Until the tests became one binary, each `tests/<area>.rs` was its own process and cargo ran
//! those one after another: a test only ever ran beside tests of its own file. In one process
//! libtest runs tests of every area together (two at a time on a 2-core machine), so the tests
//! that measure the node or load it for minutes say so here:
//!
//! - [`shared`]: taken by the harness for every [`Containerd`](crate::Containerd),
//!   [`FakeApiServer`](crate::apiserver::FakeApiServer) and real control plane
//!   ([`Cluster`](crate::cluster::Cluster)) a test starts, and held until it is dropped. Any number of tests hold it at once.
//! - [`exclusive`]: taken by a test (or one step of it) that must run alone: no shared holder
//!   runs meanwhile and new ones wait. It waits for the running shared holders to finish, and
//!   waiting exclusive tests go first (so a steady stream of short tests cannot starve one).
//!
//! Who takes [`exclusive`] (docs/testing.md, "Running side by side"): the eviction tests (they
//! measure the node's memory and disk, and ran one at a time already), the soak (probe
//! timeliness and CPU figures of the whole machine), the 1000-connection flood (file
//! descriptors of the test process, timed answers), and the cargo builds some tests run: the
//! upgrade test's second binary and the grpc probe server (both cores for a minute or more).
//!
//! Tests that start neither a containerd nor the API server double (the log format, the fuzz
//! replay, `nanolet validate` and the runtime-less `nanolet run` tests) take no gate: they are
//! short and light and measure nothing beside their own process.
//!
//! Re-entrant per thread: a thread holding a shared guard gets more at once (a test starting
//! an API server double and then a containerd), and [`shared`] on the thread that holds the
//! exclusive guard is free (an exclusive test starts a containerd). A thread holding a shared
//! guard must not ask for [`exclusive`] (that would wait for itself: it panics instead), and a
//! test must not start a containerd or an API server double on another thread and wait for it
//! (that thread waits while an exclusive test runs or waits). Guards may be dropped on any
//! thread.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

struct State {
    /// Shared guards held, per thread (a thread's guards count once against exclusive).
    shared: Vec<(ThreadId, usize)>,
    /// The thread holding the exclusive guard.
    exclusive: Option<ThreadId>,
    /// Threads waiting for the exclusive guard.
    waiting: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    shared: Vec::new(),
    exclusive: None,
    waiting: 0,
});
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    // No code panics while holding it; a poisoned lock still holds consistent counts.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a test's containerd or API server double lives; see the module docs.
#[must_use = "the gate is released when the guard is dropped"]
pub struct Shared {
    /// The thread it was counted for; `None`: taken on the exclusive thread (counts nothing).
    thread: Option<ThreadId>,
}

/// Held while a test (or a step of one) must run alone; see the module docs.
#[must_use = "the gate is released when the guard is dropped"]
pub struct Exclusive {
    thread: ThreadId,
}

/// Waits until no exclusive test runs or waits (unless this thread already holds the gate),
/// then holds the gate shared.
pub fn shared() -> Shared {
    let me = std::thread::current().id();
    let mut st = state();
    if st.exclusive == Some(me) {
        return Shared { thread: None };
    }
    if let Some(entry) = st.shared.iter_mut().find(|(t, _)| *t == me) {
        entry.1 += 1;
        return Shared { thread: Some(me) };
    }
    while st.exclusive.is_some() || st.waiting > 0 {
        st = CHANGED.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.shared.push((me, 1));
    Shared { thread: Some(me) }
}

/// Waits until no other test holds the gate, then holds it alone.
///
/// Panics if this thread holds a shared guard (it would wait for itself): take it first,
/// before starting a containerd.
pub fn exclusive() -> Exclusive {
    let me = std::thread::current().id();
    let mut st = state();
    assert!(
        !st.shared.iter().any(|(t, _)| *t == me),
        "support::gate::exclusive() on a thread that holds the shared gate (its containerd or \
         API server double): take the exclusive gate first"
    );
    assert!(
        st.exclusive != Some(me),
        "support::gate::exclusive() taken twice on one thread"
    );
    st.waiting += 1;
    while st.exclusive.is_some() || !st.shared.is_empty() {
        st = CHANGED.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.waiting -= 1;
    st.exclusive = Some(me);
    Exclusive { thread: me }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(thread) = self.thread else {
            return;
        };
        let mut st = state();
        if let Some(i) = st.shared.iter().position(|(t, _)| *t == thread) {
            st.shared[i].1 -= 1;
            if st.shared[i].1 == 0 {
                st.shared.swap_remove(i);
                CHANGED.notify_all();
            }
        }
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        let mut st = state();
        if st.exclusive == Some(self.thread) {
            st.exclusive = None;
        }
        CHANGED.notify_all();
    }
}
