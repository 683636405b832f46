//! Loading uringbench's embedded BPF objects (built by `engine/build.rs` from `xdp-prog/`)
//! with the libbpf functions that `libxdp-sys` exposes, and reading and writing their maps:
//! what the receiver's program ([`super::program`]), its kernel counting
//! ([`super::kernel_count`]) and the live-frames generator ([`super::live_frames`]) share.

use crate::base::error::{Error, Result};
use libxdp_sys as sys;
use std::ffi::{c_char, c_int, c_void, CString};
use std::os::fd::RawFd;
use std::sync::Once;

/// libbpf and libxdp print diagnostics on stderr by default. uringbench reports one line per
/// error itself, from the return codes, so their output is silenced once per process.
fn silence_library_logs() {
    static ONCE: Once = Once::new();
    extern "C" {
        // From libbpf (linked statically by libxdp-sys), not in its generated bindings. The
        // callback's last argument is a `va_list`, which is passed as a pointer on the
        // targets we build for; our callback never reads it.
        fn libbpf_set_print(f: Option<unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int>)
            -> *mut c_void;
    }
    unsafe extern "C" fn quiet(_level: c_int, _fmt: *const c_char, _args: *mut c_void) -> c_int {
        0
    }
    ONCE.call_once(|| {
        // SAFETY: both setters only store the function pointer; `quiet` ignores its arguments
        // and lives for the whole program.
        unsafe {
            libbpf_set_print(Some(quiet));
            sys::libxdp_set_print(None);
        }
    });
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC (BPF programs' clock), in nanoseconds: what a program
/// adds to `bpf_ktime_get_ns()` for wall-clock time.
pub(crate) fn realtime_offset_ns() -> u64 {
    let read = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
    };
    (read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC)).max(0) as u64
}

/// One embedded BPF object, loaded into the kernel; closed (program and maps freed unless
/// something else holds them) when dropped.
pub(crate) struct LoadedObject {
    object: *mut sys::bpf_object,
    /// The descriptor of the object's program.
    pub prog_fd: RawFd,
}

// SAFETY: the object pointer is only used to find maps right after loading and to close it in
// Drop; everything else goes through plain descriptors (syscalls).
unsafe impl Send for LoadedObject {}
// SAFETY: as for Send: shared use only reads the descriptors.
unsafe impl Sync for LoadedObject {}

impl Drop for LoadedObject {
    fn drop(&mut self) {
        // SAFETY: `object` came from bpf_object__open_mem and is closed exactly once.
        unsafe { sys::bpf_object__close(self.object) };
    }
}

impl LoadedObject {
    /// Opens `image` (an ELF object built by `engine/build.rs`), sizes its maps named in
    /// `sizes` (name, entries), loads it and finds `program`.
    pub(crate) fn load(image: &'static [u8], program: &str, sizes: &[(&str, u32)]) -> Result<Self> {
        silence_library_logs();
        // SAFETY: `image` is a valid ELF image that outlives the call (libbpf copies it).
        let object = unsafe { sys::bpf_object__open_mem(image.as_ptr().cast(), image.len(), std::ptr::null()) };
        if object.is_null() {
            return Err(Error::unsupported(format!(
                "opening the embedded BPF program '{program}' failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        // From here Drop closes the object on every early return.
        let mut loaded = Self { object, prog_fd: -1 };
        for &(map, entries) in sizes {
            let c = CString::new(map).expect("map names have no NUL");
            // SAFETY: an opened, not yet loaded object and a NUL-terminated name.
            let found = unsafe { sys::bpf_object__find_map_by_name(object, c.as_ptr()) };
            let rc = if found.is_null() {
                -libc::ENOENT
            } else {
                // SAFETY: a map of the opened object; resizing is allowed before the load.
                unsafe { sys::bpf_map__set_max_entries(found, entries) }
            };
            if rc != 0 {
                return Err(Error::unsupported(format!("sizing map '{map}' of '{program}': {}", errno_of(rc))));
            }
        }
        // SAFETY: a freshly opened object.
        let rc = unsafe { sys::bpf_object__load(object) };
        if rc != 0 {
            return Err(load_error(errno_of(rc)));
        }
        let name = CString::new(program).expect("program names have no NUL");
        // SAFETY: a loaded object and a NUL-terminated name.
        let prog = unsafe { sys::bpf_object__find_program_by_name(object, name.as_ptr()) };
        // SAFETY: prog checked non-null first.
        loaded.prog_fd = if prog.is_null() { -1 } else { unsafe { sys::bpf_program__fd(prog) } };
        if loaded.prog_fd < 0 {
            return Err(Error::unsupported(format!(
                "the embedded BPF object has no program '{program}' (a build problem)"
            )));
        }
        Ok(loaded)
    }

    /// The descriptor of map `name`.
    pub(crate) fn map_fd(&self, name: &str) -> Result<RawFd> {
        let c = CString::new(name).expect("map names have no NUL");
        // SAFETY: a loaded object and a NUL-terminated name.
        let map = unsafe { sys::bpf_object__find_map_by_name(self.object, c.as_ptr()) };
        // SAFETY: map is non-null (checked before use) and belongs to the loaded object.
        let fd = if map.is_null() { -1 } else { unsafe { sys::bpf_map__fd(map) } };
        if fd < 0 {
            return Err(Error::unsupported(format!("the embedded BPF object has no map '{name}' (a build problem)")));
        }
        Ok(fd)
    }
}

/// Writes `value` at `key` of the map behind `fd`; the error says what was being done.
pub(crate) fn map_update<K, V>(fd: RawFd, key: &K, value: &V, what: &str) -> Result<()> {
    // SAFETY: the caller's K and V are the map's key and value types (plain data of the
    // sizes the map was created with).
    let rc = unsafe { sys::bpf_map_update_elem(fd, (key as *const K).cast(), (value as *const V).cast(), 0) };
    if rc != 0 {
        return Err(Error::unsupported(format!("{what}: {}", errno_of(rc))));
    }
    Ok(())
}

/// Reads the value at `key` of the map behind `fd` (of a map whose values are not per-CPU).
pub(crate) fn map_lookup<K, V: Default>(fd: RawFd, key: &K, what: &str) -> Result<V> {
    let mut value = V::default();
    // SAFETY: as for map_update; the kernel writes one V.
    let rc = unsafe { sys::bpf_map_lookup_elem(fd, (key as *const K).cast(), (&mut value as *mut V).cast()) };
    if rc != 0 {
        return Err(Error::unsupported(format!("{what}: {}", errno_of(rc))));
    }
    Ok(value)
}

pub(crate) fn errno_of(rc: c_int) -> std::io::Error {
    if rc < 0 {
        std::io::Error::from_raw_os_error(-rc)
    } else {
        std::io::Error::last_os_error()
    }
}

pub(crate) fn load_error(err: std::io::Error) -> Error {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::unsupported(format!(
            "loading the XDP program was refused ({err}): run as root (or with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON)"
        )),
        _ => Error::unsupported(format!("loading the XDP program failed: {err}")),
    }
}

/// Possible CPUs, as the kernel sizes per-CPU map values (`/sys/devices/system/cpu/possible`).
pub(crate) fn possible_cpus() -> Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .map_err(|e| Error::io("reading /sys/devices/system/cpu/possible", e))?;
    let cpus = crate::base::units::parse_cpu_list(text.trim())?;
    Ok(cpus.iter().max().map_or(1, |m| m + 1))
}
