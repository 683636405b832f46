//! The calling thread's CPU affinity, narrowed for a while.

/// The calling thread kept off some CPUs (a test's pinned queue threads) while this lives; its
/// affinity before comes back on drop. Left as it was when every CPU it may use is one of them
/// (a small host, or a process pinned to the test's CPUs: it then shares them).
pub(crate) struct KeptOff {
    before: Option<libc::cpu_set_t>,
}

impl KeptOff {
    pub(crate) fn cpus(avoid: &[usize]) -> Self {
        if avoid.is_empty() {
            return Self { before: None };
        }
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls read and write only `set`
        // and `others`, for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Self { before: None };
            }
            let mut others = set;
            for &cpu in avoid.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_CLR(cpu, &mut others);
            }
            let moved = libc::CPU_COUNT(&others) > 0
                && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &others) == 0;
            Self { before: moved.then_some(set) }
        }
    }
}

impl Drop for KeptOff {
    fn drop(&mut self) {
        if let Some(set) = self.before.as_ref() {
            // SAFETY: `set` is the calling thread's own earlier mask; the call only reads it.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        }
    }
}
