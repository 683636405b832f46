//! Nothing at run time: this crate exists for its build script, which checks, before libbpf
//! and libxdp are compiled from source, that the system packages they and the XDP program
//! need are installed, and stops the build with one line naming `scripts/install-deps.sh
//! --build` when they are not. It has no dependencies, so cargo runs it within the first
//! second of a build, before the C builds that would otherwise fail with pages of make output.
