//! Which NUMA node a queue thread's memory comes from.
//!
//! A queue thread pins itself to its CPU and then asks for local allocation (`MPOL_LOCAL`)
//! before it builds its ring and buffers. The kernel's ring memory is allocated inside
//! `io_uring_setup` on the calling thread's behalf, and the buffers are mapped with
//! `MAP_POPULATE` (faulted in by the same call), so both come from the node of the thread's
//! CPU: the NIC's node when placement put the thread there. Asking explicitly matters when the
//! process runs under another policy (`numactl --interleave`, a cgroup's preferred node):
//! without it every thread's buffers would follow that policy instead of its CPU.
//! [`node_of`] reads back where a page landed, for tests and for the doubtful.

use std::io;

/// `MPOL_LOCAL` (Linux 3.8): allocate on the node of the CPU the thread runs on.
const MPOL_LOCAL: libc::c_int = 4;
/// `get_mempolicy` flags: return the node (`MPOL_F_NODE`) of the page at an address
/// (`MPOL_F_ADDR`).
const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;

/// Sets the calling thread's memory policy to local allocation. `ENOSYS` (a kernel without
/// NUMA support) is success: there is one node and nothing to choose.
pub fn allocate_locally() -> io::Result<()> {
    // SAFETY: MPOL_LOCAL takes no node mask (null, max node 0); the call changes only the
    // calling thread's policy and reads no user memory.
    let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, MPOL_LOCAL, std::ptr::null::<libc::c_ulong>(), 0usize) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOSYS) {
        Ok(())
    } else {
        Err(e)
    }
}

/// The node the page holding address `addr` lives on; None when the page is not mapped in yet or the
/// kernel has no NUMA support.
pub fn node_of(addr: usize) -> Option<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node` (a live local); with MPOL_F_ADDR it only
    // looks `addr` up in this process's mappings, never dereferences it; no node mask is asked
    // for (null, max node 0).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0usize,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (rc == 0 && node >= 0).then_some(node as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node whose CPU list holds `cpu`, from sysfs.
    fn node_of_cpu(cpu: usize) -> Option<u32> {
        let dir = std::fs::read_dir("/sys/devices/system/node").ok()?;
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("node")?.parse::<u32>().ok()).find(|n| {
            std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist"))
                .map(|list| crate::base::units::parse_cpu_list(list.trim()).unwrap_or_default().contains(&cpu))
                .unwrap_or(false)
        })
    }

    #[test]
    fn a_pinned_thread_allocates_on_its_cpus_node() {
        let cpu = core_affinity::get_core_ids().expect("this process's CPUs")[0].id;
        std::thread::spawn(move || {
            assert!(core_affinity::set_for_current(core_affinity::CoreId { id: cpu }));
            allocate_locally().expect("set_mempolicy(MPOL_LOCAL)");
            let len = 1 << 20;
            // SAFETY: an anonymous private mapping, unmapped below; MAP_POPULATE faults it in
            // here, under the policy just set.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            let (first, last) = (node_of(p as usize), node_of(p as usize + len - 1));
            // SAFETY: p/len are the mapping made above.
            unsafe { libc::munmap(p, len) };
            match node_of_cpu(cpu) {
                Some(node) => {
                    assert_eq!(first, Some(node), "first page of a local allocation on CPU {cpu}'s node");
                    assert_eq!(last, Some(node), "and the last");
                }
                // No node directories: a kernel without NUMA, where there is nothing to read.
                None => assert_eq!(first, None),
            }
        })
        .join()
        .unwrap();
    }
}
