//! The one way the simulators run many independent runs at once: a fixed number of scoped
//! threads pull tasks in order, and every result lands at its task's index, so the output does
//! not depend on the number of threads or on which thread ran what.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` applied to every task on up to `threads` threads, the results in the tasks' order.
pub fn map<T: Sync, R: Send>(tasks: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..tasks.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, tasks.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(task) = tasks.get(i) else { break };
                    let r = f(task);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
    });
    // Every index was taken by exactly one thread and the scope joined them all, so every slot
    // holds its result (a panicking task propagates out of the scope before this line).
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect()
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
