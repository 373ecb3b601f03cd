//! The one way the simulators run many independent runs at once: rayon's parallel iterator on a
//! pool of `threads`, which returns every result at its task's index, so the output does not
//! depend on the number of threads or on which thread ran what.

use rayon::prelude::*;

/// `f` applied to every task on up to `threads` threads, the results in the tasks' order. If
/// no pool can be built (no threads left), the tasks run on this thread.
pub fn map<T: Sync, R: Send>(tasks: &[T], threads: usize, f: impl Fn(&T) -> R + Sync + Send) -> Vec<R> {
    match rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build() {
        Ok(pool) => pool.install(|| tasks.par_iter().map(&f).collect()),
        Err(_) => tasks.iter().map(f).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_task_order_whatever_the_threads() {
        let tasks: Vec<u64> = (0..50).collect();
        let square = |x: &u64| {
            // The first task is the slowest: with several threads it finishes last.
            if *x == 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            x * x
        };
        let want: Vec<u64> = tasks.iter().map(square).collect();
        for threads in [1, 2, 3, 16] {
            assert_eq!(map(&tasks, threads, square), want, "{threads} threads");
        }
        assert!(map(&[] as &[u64], 4, square).is_empty());
    }
}
