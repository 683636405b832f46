//! The calling thread's CPU affinity: read, and narrowed for a while.

/// The calling thread's affinity mask, or None when the kernel does not say.
fn own_mask() -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
    }
}

/// CPUs this process may run on (its affinity mask, as set by taskset or cgroups).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    match own_mask() {
        // SAFETY: CPU_ISSET only reads the set, for indices below CPU_SETSIZE.
        Some(set) => (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect(),
        None => (0..num_cpus_online()).collect(),
    }
}

fn num_cpus_online() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

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
        let Some(set) = own_mask() else { return Self { before: None } };
        let mut others = set;
        // SAFETY: CPU_CLR and CPU_COUNT touch only `others`, for indices below CPU_SETSIZE;
        // sched_setaffinity reads it, for the calling thread.
        let moved = unsafe {
            for &cpu in avoid.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_CLR(cpu, &mut others);
            }
            libc::CPU_COUNT(&others) > 0
                && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &others) == 0
        };
        Self { before: moved.then_some(set) }
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
