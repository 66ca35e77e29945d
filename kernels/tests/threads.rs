//! `init_threads`: its own test binary, since it builds the process-wide rayon pool.

use kostant_kernels::{init_threads, KernelError};

#[test]
fn init_threads_builds_once_and_rejects_a_different_count() {
    init_threads(2).unwrap();
    assert_eq!(rayon::current_num_threads(), 2);
    init_threads(2).unwrap();
    assert!(matches!(init_threads(3), Err(KernelError::ThreadPool(_))));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(init_threads(0).is_ok(), cores == 2);
}
