//! A bounded, elastic pool of OS threads for blocking jobs (CRI calls, probes, hooks).
//!
//! `min` threads are kept once started and sleep on a condition variable without a timeout
//! when idle, so an idle pool costs no wake-up. Work goes to an idle kept thread first, to an
//! idle extra one only when every kept thread is busy (so extras really idle and leave). A
//! job that finds every thread busy starts another one, up to `max`: one slow job (a CreateContainer that hangs, a postStart hook
//! that runs a minute) delays nothing else while fewer than `max` jobs block at once. A thread
//! above `min` exits after `idle_exit` with nothing to do, so a burst (50 pods written at
//! once) gets parallelism and the steady state keeps `min` stacks. Jobs run in submission
//! order; a job that panics is contained and the thread goes on.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How big a pool may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// Threads kept while idle (started on demand, then kept).
    pub min: usize,
    /// Threads at most; at least `min` and at least 1.
    pub max: usize,
}

/// What a pool is doing, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub threads: usize,
    pub busy: usize,
    pub queued: usize,
    /// Threads started since the pool was made.
    pub started: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {pool} is stopped")]
    Stopped { pool: &'static str },
}

struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Of `idle`, the kept threads (the first `min` started; they never leave).
    idle_kept: usize,
    kept: usize,
    started: u64,
    stopping: bool,
}

struct Inner {
    name: &'static str,
    size: PoolSize,
    idle_exit: Duration,
    stack: usize,
    state: Mutex<State>,
    /// Kept threads wait here, extra threads on `spare`.
    work: Condvar,
    spare: Condvar,
}

/// A handle to the pool; clones share it. Threads stop on [`Pool::stop`].
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.inner.name)
            .field("size", &self.inner.size)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pool {
    /// A pool whose threads are named `name` and get `stack` bytes of (virtual) stack.
    pub fn new(name: &'static str, size: PoolSize, idle_exit: Duration, stack: usize) -> Pool {
        let max = size.max.max(size.min).max(1);
        Pool {
            inner: Arc::new(Inner {
                name,
                size: PoolSize { min: size.min, max },
                idle_exit,
                stack,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                    idle_kept: 0,
                    kept: 0,
                    started: 0,
                    stopping: false,
                }),
                work: Condvar::new(),
                spare: Condvar::new(),
            }),
        }
    }

    /// Queue `job`; it runs on an idle thread, or on a new one while fewer than `max` run.
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) -> Result<(), PoolError> {
        let mut st = self.inner.lock();
        if st.stopping {
            return Err(PoolError::Stopped {
                pool: self.inner.name,
            });
        }
        st.queue.push_back(Box::new(job));
        if st.queue.len() > st.idle && st.threads < self.inner.size.max {
            st.threads += 1;
            st.started += 1;
            let kept = st.kept < self.inner.size.min;
            if kept {
                st.kept += 1;
            }
            drop(st);
            self.start_thread(kept);
        } else {
            let kept_idle = st.idle_kept > 0;
            drop(st);
            if kept_idle {
                self.inner.work.notify_one();
            } else {
                self.inner.spare.notify_one();
            }
        }
        Ok(())
    }

    fn start_thread(&self, kept: bool) {
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name(self.inner.name.into())
            .stack_size(self.inner.stack)
            .spawn(move || inner.run(kept));
        if let Err(e) = spawned {
            let mut st = self.inner.lock();
            st.threads -= 1;
            if kept {
                st.kept -= 1;
            }
            let (threads, queued) = (st.threads, st.queue.len());
            drop(st);
            tracing::warn!(pool = self.inner.name, error = %e, threads, queued, "cannot start a pool thread; the queued work waits for a running one");
        }
    }

    pub fn stats(&self) -> PoolStats {
        let st = self.inner.lock();
        PoolStats {
            threads: st.threads,
            busy: st.threads - st.idle,
            queued: st.queue.len(),
            started: st.started,
        }
    }

    /// Stop: queued jobs are dropped, running ones finish, then every thread exits.
    pub fn stop(&self) {
        let mut st = self.inner.lock();
        st.stopping = true;
        st.queue.clear();
        drop(st);
        self.inner.work.notify_all();
        self.inner.spare.notify_all();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A job never runs under the lock, so a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, kept: bool) {
        let mut st = self.lock();
        loop {
            if st.stopping {
                break;
            }
            if let Some(job) = st.queue.pop_front() {
                drop(st);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    tracing::error!(pool = self.name, "a pool job panicked; the thread goes on");
                }
                st = self.lock();
                continue;
            }
            st.idle += 1;
            if kept {
                st.idle_kept += 1;
                st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
                st.idle_kept -= 1;
                st.idle -= 1;
            } else {
                let (g, wait) = self
                    .spare
                    .wait_timeout(st, self.idle_exit)
                    .unwrap_or_else(|p| p.into_inner());
                st = g;
                st.idle -= 1;
                if wait.timed_out() && st.queue.is_empty() {
                    break;
                }
            }
        }
        st.threads -= 1;
        if kept {
            st.kept -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Instant;

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A job that blocks until its gate opens.
    fn blocker(pool: &Pool) -> std::sync::mpsc::Sender<()> {
        let (tx, rx) = channel::<()>();
        pool.submit(move || {
            let _ = rx.recv();
        })
        .expect("submit");
        tx
    }

    /// One blocked job does not hold back the next: a new thread takes it, up to `max`.
    #[test]
    fn a_blocked_job_does_not_delay_the_next_until_max_threads_block() {
        let pool = Pool::new(
            "t",
            PoolSize { min: 1, max: 2 },
            Duration::from_secs(60),
            64 * 1024,
        );
        let gate1 = blocker(&pool);
        let (done, ran) = channel();
        let d = done.clone();
        pool.submit(move || d.send(1).expect("send"))
            .expect("submit");
        assert_eq!(
            ran.recv_timeout(Duration::from_secs(10))
                .expect("second job ran"),
            1
        );
        // Now both threads block: the third job waits (the bound holds) ...
        let gate2 = blocker(&pool);
        wait_for("two busy threads", || pool.stats().busy == 2);
        pool.submit(move || done.send(3).expect("send"))
            .expect("submit");
        assert!(
            ran.recv_timeout(Duration::from_millis(200)).is_err(),
            "bounded at max"
        );
        assert_eq!(pool.stats().threads, 2);
        // ... until one unblocks.
        drop(gate1);
        assert_eq!(
            ran.recv_timeout(Duration::from_secs(10))
                .expect("third job ran"),
            3
        );
        drop(gate2);
        pool.stop();
        wait_for("threads gone", || pool.stats().threads == 0);
    }

    /// Threads above `min` leave after `idle_exit`; `min` stay, idle without a timeout.
    #[test]
    fn extra_threads_exit_when_idle_and_min_stay() {
        let pool = Pool::new(
            "t",
            PoolSize { min: 1, max: 4 },
            Duration::from_millis(50),
            64 * 1024,
        );
        let gates: Vec<_> = (0..4).map(|_| blocker(&pool)).collect();
        wait_for("four busy", || pool.stats().busy == 4);
        assert_eq!(pool.stats().started, 4);
        drop(gates);
        wait_for("back to min", || pool.stats().threads == 1);
        // The kept thread still serves.
        let (tx, rx) = channel();
        pool.submit(move || tx.send(()).expect("send"))
            .expect("submit");
        rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        assert_eq!(pool.stats().started, 4, "an idle kept thread is reused");
        pool.stop();
        wait_for("stopped", || pool.stats().threads == 0);
        assert!(pool.submit(|| {}).is_err(), "a stopped pool takes no work");
    }

    /// A steady trickle of short jobs goes to the kept thread, so the extras a burst started
    /// leave even though jobs keep coming more often than their idle time (a shared wait
    /// would hand the jobs round to every thread and keep them all).
    #[test]
    fn a_trickle_of_work_goes_to_the_kept_thread_and_extras_leave() {
        let pool = Pool::new(
            "t",
            PoolSize { min: 1, max: 4 },
            Duration::from_millis(300),
            64 * 1024,
        );
        let gates: Vec<_> = (0..4).map(|_| blocker(&pool)).collect();
        wait_for("four busy", || pool.stats().busy == 4);
        drop(gates);
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.stats().threads > 1 {
            assert!(
                Instant::now() < deadline,
                "extras kept alive: {:?}",
                pool.stats()
            );
            let (tx, rx) = channel();
            pool.submit(move || tx.send(()).expect("send"))
                .expect("submit");
            rx.recv_timeout(Duration::from_secs(10)).expect("ran");
            std::thread::sleep(Duration::from_millis(50));
        }
        pool.stop();
    }

    /// A panicking job is contained: the pool keeps running jobs.
    #[test]
    fn a_panicking_job_does_not_kill_the_pool() {
        let pool = Pool::new(
            "t",
            PoolSize { min: 1, max: 1 },
            Duration::from_secs(60),
            256 * 1024,
        );
        pool.submit(|| panic!("job panics")).expect("submit");
        let (tx, rx) = channel();
        pool.submit(move || tx.send(()).expect("send"))
            .expect("submit");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("ran after the panic");
        assert_eq!(pool.stats().threads, 1);
        pool.stop();
    }
}
