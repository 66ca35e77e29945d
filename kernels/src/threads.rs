//! The worker pool: matmuls split their rows over rayon's global pool, which `init_threads`
//! sizes once at start-up.

use std::sync::Mutex;

use crate::KernelError;

/// The thread count `init_threads` settled on, so a repeat call with the same count is a no-op.
static BUILT: Mutex<Option<usize>> = Mutex::new(None);

/// Builds rayon's global pool with `n` threads (`0` means one per available core). Later calls
/// with the same effective `n` succeed; a different `n` is an error, since rayon's global pool
/// cannot be rebuilt. Without any call, rayon builds its default pool (one thread per core, or
/// `RAYON_NUM_THREADS`) on first use.
pub fn init_threads(n: usize) -> Result<(), KernelError> {
    let n = if n == 0 {
        std::thread::available_parallelism().map_or(1, |p| p.get())
    } else {
        n
    };
    // A poisoned lock only means another caller panicked between lock and unlock; the value
    // itself is always consistent.
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = *built {
        return if m == n {
            Ok(())
        } else {
            Err(KernelError::ThreadPool(format!(
                "already built with {m} threads, asked for {n}"
            )))
        };
    }
    let result = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("kostant-kernel-{i}"))
        .build_global();
    match result {
        Ok(()) => {
            *built = Some(n);
            Ok(())
        }
        Err(e) => {
            // The global pool already exists: some parallel work ran before this call.
            let m = rayon::current_num_threads();
            if m == n {
                *built = Some(n);
                Ok(())
            } else {
                Err(KernelError::ThreadPool(format!(
                    "the global pool already runs {m} threads, asked for {n}: {e}"
                )))
            }
        }
    }
}

/// Runs `f` on a worker thread of the current rayon pool (the global one unless called inside
/// `ThreadPool::install`) and returns its result; runs it in place if already on a worker.
///
/// Why: a matmul called from a thread outside the pool hands its rows to the pool and sleeps
/// until they are done, paying a cross-thread wake-up on every call. Decoding one token of the
/// default model is about 210 matmuls; measured at 2 threads, running them outside the pool
/// cost about 5 ms per token more than running them inside. Wrapping each forward pass (or the
/// whole generation loop) in `in_pool` makes its matmuls split work in place, with the calling
/// worker taking a share.
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::join(f, || ()).0
    }
}
