//! One shutdown for every thread `nanolet run` starts (the Go kubelet passes one context).
//!
//! Threads keep the std shapes they wait on: a `Receiver<()>` (stop on a message or when the
//! sender is gone: `recv_timeout` returns at once), a pipe's read end for threads waiting in
//! poll(2) (readable/hung up once the write end is dropped), or a handle whose `Drop` stops
//! its thread. The wiring asks this one object for each, and [`Shutdown::trigger`] stops them
//! all in one call, in the order they were asked for.

use std::any::Any;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{Receiver, Sender, channel};

enum Stop {
    Channel(Sender<()>),
    Pipe(OwnedFd),
    Guard(Box<dyn Any + Send>),
}

#[derive(Default)]
pub struct Shutdown {
    stops: Vec<Stop>,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// A receiver that gets `()` (and then disconnects) on [`Shutdown::trigger`].
    pub fn receiver(&mut self) -> Receiver<()> {
        let (tx, rx) = channel();
        self.stops.push(Stop::Channel(tx));
        rx
    }

    /// The read end of a pipe whose write end is closed on [`Shutdown::trigger`].
    pub fn pipe(&mut self) -> std::io::Result<OwnedFd> {
        let (read, write) = nix::unistd::pipe()?;
        self.stops.push(Stop::Pipe(write));
        Ok(read)
    }

    /// Keep `handle` until [`Shutdown::trigger`] drops it (handles that stop their thread on
    /// drop: sources, servers).
    pub fn hold<T: Send + 'static>(&mut self, handle: T) {
        self.stops.push(Stop::Guard(Box::new(handle)));
    }

    /// Stop everything, in the order it was asked for.
    pub fn trigger(self) {
        for stop in self.stops {
            match stop {
                Stop::Channel(tx) => {
                    let _ = tx.send(());
                }
                Stop::Pipe(write) => drop(write),
                Stop::Guard(handle) => drop(handle),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::RecvTimeoutError;
    use std::time::Duration;

    #[test]
    fn trigger_stops_receivers_pipes_and_guards() {
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let mut s = Shutdown::new();
        let a = s.receiver();
        let b = s.receiver();
        let pipe = s.pipe().expect("pipe");
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        s.hold(Flag(dropped.clone()));
        assert_eq!(
            a.recv_timeout(Duration::ZERO),
            Err(RecvTimeoutError::Timeout),
            "not before trigger"
        );
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        s.trigger();
        assert_eq!(a.recv_timeout(Duration::ZERO), Ok(()));
        assert_eq!(b.recv_timeout(Duration::ZERO), Ok(()));
        assert_eq!(
            b.recv_timeout(Duration::ZERO),
            Err(RecvTimeoutError::Disconnected)
        );
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
        // The write end is closed: reading the pipe gives end-of-file at once.
        let mut buf = [0u8; 1];
        assert_eq!(nix::unistd::read(&pipe, &mut buf), Ok(0));
    }
}
