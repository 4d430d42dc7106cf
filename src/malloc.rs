//! glibc malloc settings for a long-running agent with one thread per pod.
//!
//! glibc gives threads their own malloc arenas (up to 8 per core) and returns freed memory to
//! the kernel only from the top of an arena. With a hundred pod-worker threads that is most of
//! nanolet's RSS: at 100 pods, 12 MiB sat in 15 arenas (docs/benchmarks.md,
//! docs/decisions/malloc-arena.md). So `nanolet run` uses one arena (`M_ARENA_MAX=1`: the
//! threads mostly wait on channels, contention is negligible) and trims free pages from time to
//! time.
//!
//! Both are no-ops on other C libraries (musl's malloc has neither knob).

/// Limits glibc to one malloc arena unless the operator set `MALLOC_ARENA_MAX` (glibc reads the
/// environment itself). Call before any thread is started.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes allocator parameters; no thread allocates concurrently
        // (called first thing in `nanolet run`).
        unsafe {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
        }
    }
}

/// Returns free memory in the middle of the heap to the kernel (`malloc_trim(0)`, which walks
/// every arena and madvises whole free pages away). Costs well under a millisecond on nanolet's
/// heap; the sync loop calls it every 10 s.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe (it takes each arena's lock).
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
