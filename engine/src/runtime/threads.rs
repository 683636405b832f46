//! Starting, pinning and joining the queue threads of one side of a test.

use crate::base::error::{Error, Result};
use crate::runtime::placement::{pin_current_thread, ThreadPlan};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// The running queue threads of one test side.
pub(crate) struct QueueThreads<R> {
    handles: Vec<JoinHandle<Result<R>>>,
    /// Kernel thread ids, in plan order, for per-thread CPU accounting.
    pub tids: Vec<i32>,
    /// The plan each thread runs (its CPU and queues), in the same order.
    pub plans: Vec<ThreadPlan>,
    finished: Arc<AtomicUsize>,
}

impl<R: Send + 'static> QueueThreads<R> {
    /// Starts one thread per plan entry, pins it to its CPU, and runs `body` with its input.
    /// Returns once every thread is pinned and running.
    pub(crate) fn spawn<T, F>(plans: &[ThreadPlan], inputs: Vec<T>, body: F) -> Result<Self>
    where
        T: Send + 'static,
        F: Fn(T) -> Result<R> + Send + Sync + 'static,
    {
        assert_eq!(plans.len(), inputs.len(), "one input per planned thread");
        let body = Arc::new(body);
        let finished = Arc::new(AtomicUsize::new(0));
        let (tid_tx, tid_rx) = mpsc::channel();
        let mut handles = Vec::with_capacity(plans.len());
        for (i, (plan, input)) in plans.iter().zip(inputs).enumerate() {
            let body = Arc::clone(&body);
            let finished = Arc::clone(&finished);
            let tid_tx = tid_tx.clone();
            let cpu = plan.cpu;
            let handle = std::thread::Builder::new()
                .name(format!("ub-q{cpu}"))
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    let pinned = pin_current_thread(cpu);
                    let _ = tid_tx.send((i, tid));
                    let result = pinned.and_then(|()| body(input));
                    finished.fetch_add(1, Ordering::Release);
                    result
                })
                .map_err(|e| Error::io("starting a queue thread", e))?;
            handles.push(handle);
        }
        drop(tid_tx);
        let mut tids = vec![0; plans.len()];
        for (i, tid) in tid_rx.iter().take(plans.len()) {
            tids[i] = tid;
        }
        Ok(Self { handles, tids, plans: plans.to_vec(), finished })
    }

    /// Whether every thread has returned.
    pub(crate) fn all_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire) == self.handles.len()
    }

    /// Waits for every thread; the first error (or panic) wins.
    pub(crate) fn join(self) -> Result<Vec<R>> {
        let mut out = Vec::with_capacity(self.handles.len());
        let mut first_err = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(payload) => {
                    first_err.get_or_insert(panic_error("a queue thread", payload.as_ref()));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// The error a panicked thread becomes: what it was, and the panic's message, so the test
/// fails with the cause instead of taking the process down.
pub(crate) fn panic_error(what: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    Error::io(what, std::io::Error::other(format!("panicked: {message}")))
}

/// Deals items (flows) to the threads of a plan by the queue each item belongs to.
pub(crate) fn deal_by_queue<T>(plans: &[ThreadPlan], items: Vec<(u32, T)>) -> Vec<Vec<T>> {
    let mut per_thread: Vec<Vec<T>> = plans.iter().map(|_| Vec::new()).collect();
    for (queue, item) in items {
        let t = plans.iter().position(|p| p.queues.contains(&queue)).expect("every queue is planned on a thread");
        per_thread[t].push(item);
    }
    per_thread
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_run_pinned_and_report_tids() {
        let cpu = crate::sys::affinity::allowed_cpus()[0];
        let plans = vec![ThreadPlan { cpu, queues: vec![0] }, ThreadPlan { cpu, queues: vec![1] }];
        let threads = QueueThreads::spawn(&plans, vec![1u32, 2], move |x| {
            // SAFETY: sched_getcpu has no preconditions.
            let on = unsafe { libc::sched_getcpu() };
            Ok((x * 10, on))
        })
        .unwrap();
        assert!(threads.tids.iter().all(|&t| t > 0), "every thread reported its tid");
        let got = threads.join().unwrap();
        assert_eq!(got, vec![(10, cpu as i32), (20, cpu as i32)], "results in plan order, each on its CPU");
    }

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        let from_str = std::thread::spawn(|| panic!("plain")).join().unwrap_err();
        assert_eq!(panic_error("a queue thread", from_str.as_ref()).message, "a queue thread: panicked: plain");
        let from_string = std::thread::spawn(|| panic!("flow {}", 3)).join().unwrap_err();
        assert!(panic_error("the sending half", from_string.as_ref()).message.ends_with("panicked: flow 3"));
    }

    #[test]
    fn dealing_follows_queue_ownership() {
        let plans = vec![ThreadPlan { cpu: 0, queues: vec![0, 2] }, ThreadPlan { cpu: 1, queues: vec![1] }];
        let dealt = deal_by_queue(&plans, vec![(0, 'a'), (1, 'b'), (2, 'c'), (0, 'd')]);
        assert_eq!(dealt, vec![vec!['a', 'c', 'd'], vec!['b']]);
    }
}
