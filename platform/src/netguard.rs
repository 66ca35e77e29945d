//! The process denies itself the network: a seccomp-bpf filter, installed once at start-up,
//! makes every non-`AF_UNIX` socket fail with `EPERM`.
//!
//! What the filter does (Linux and Android on x86_64 and aarch64; riscv64 too; on other CPUs
//! [`deny_network`] fails rather than pretend):
//! - `socket(domain, ..)` and `socketpair(domain, ..)` return `EPERM` unless `domain` is
//!   `AF_UNIX`, so no IPv4, IPv6, netlink, packet, Bluetooth, vsock ... socket can be opened.
//!   Local sockets (used by the Slint/Wayland/X11 stack, logging daemons) keep working.
//! - `io_uring_setup`, `io_uring_enter` and `io_uring_register` return `EPERM`: an io_uring
//!   `IORING_OP_SOCKET` request opens a socket without a `socket` syscall, behind the filter's
//!   back.
//! - Every other syscall is allowed; the filter is a deny-list of exactly these.
//!
//! How it is applied: with `SECCOMP_FILTER_FLAG_TSYNC`, so the filter lands on every thread
//! the process already has, and (as for any seccomp filter) it is inherited by every thread and
//! child created afterwards. The app still calls [`deny_network`] first thing in `main`, before
//! the kernel thread pool exists, so nothing could have opened a socket earlier. A filter can
//! never be removed, only stacked, so the denial lasts until the process exits.
//!
//! What it does not cover, honestly:
//! - 32-bit syscall entry points. `socket` is a direct syscall on x86_64 and aarch64; the old
//!   multiplexed `socketcall` exists only in the 32-bit ABIs (i386, arm). A 32-bit syscall made
//!   from a 64-bit process (`int 0x80`, AArch32 compat) carries a different audit arch, and the
//!   filter's architecture check kills the process for it rather than let it through. The x32
//!   ABI (x86_64 numbers with bit 30 set, same audit arch) is denied by number as well.
//! - Sockets inherited already open from the parent process: none are in the app's design
//!   (the app never receives a file descriptor), and the filter cannot see them.
//! - `AF_UNIX` sockets can talk to a local daemon that itself has network access; no such
//!   daemon is used.
//! - Other OSes: macOS, Windows and iOS have no per-process switch of this kind an app can flip
//!   on itself (iOS apps are sandboxed, but the sandbox allows outgoing connections), so there
//!   [`deny_network`] reports [`NetguardStatus::NotSupported`] and the promise rests on the app
//!   having no network code (checked by the dependency rules test).

use std::sync::Mutex;

use crate::PlatformError;

/// Whether the no-network filter guards this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetguardStatus {
    /// The seccomp filter is installed on every thread of this process.
    Enforced,
    /// [`deny_network`] has not been called (or is still running) in this process.
    NotApplied,
    /// This OS has no mechanism the process can apply to itself.
    NotSupported { os: &'static str },
    /// [`deny_network`] was called and failed; the reason is the error it returned.
    Failed { reason: String },
}

impl std::fmt::Display for NetguardStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetguardStatus::Enforced => {
                f.write_str("enforced (seccomp: non-unix sockets and io_uring denied)")
            }
            NetguardStatus::NotApplied => f.write_str("not applied"),
            NetguardStatus::NotSupported { os } => {
                write!(f, "not supported on {os} (no per-process network switch)")
            }
            NetguardStatus::Failed { reason } => write!(f, "failed: {reason}"),
        }
    }
}

static STATUS: Mutex<NetguardStatus> = Mutex::new(NetguardStatus::NotApplied);

/// The state recorded by the last [`deny_network`] call of this process.
pub fn status() -> NetguardStatus {
    STATUS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Installs the no-network filter on every thread of this process (see the module docs).
///
/// Returns [`NetguardStatus::Enforced`] on Linux and Android once the filter is in place (a
/// second call returns it again without stacking another filter), and
/// [`NetguardStatus::NotSupported`] on other OSes. An error means the filter is *not* in place;
/// callers that promise no network must stop.
pub fn deny_network() -> Result<NetguardStatus, PlatformError> {
    let mut status = STATUS.lock().unwrap_or_else(|e| e.into_inner());
    if *status == NetguardStatus::Enforced {
        return Ok(NetguardStatus::Enforced);
    }
    match imp::deny_network() {
        Ok(s) => {
            *status = s.clone();
            Ok(s)
        }
        Err(e) => {
            *status = NetguardStatus::Failed {
                reason: e.to_string(),
            };
            Err(e)
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::NetguardStatus;
    use crate::PlatformError;

    /// Syscall numbers are kernel ABI, fixed per architecture (checked against libc in the
    /// tests). io_uring's share one number everywhere (the unified table new syscalls have used
    /// since Linux 5.1), and not every libc target names them.
    #[cfg(target_arch = "x86_64")]
    pub(super) const SYS_SOCKET: i64 = 41;
    #[cfg(target_arch = "x86_64")]
    pub(super) const SYS_SOCKETPAIR: i64 = 53;
    /// aarch64 and riscv64 use the generic table.
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const SYS_SOCKET: i64 = 198;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const SYS_SOCKETPAIR: i64 = 199;
    pub(super) const SYS_IO_URING_SETUP: i64 = 425;
    const SYS_IO_URING_ENTER: i64 = 426;
    const SYS_IO_URING_REGISTER: i64 = 427;

    /// The x32 ABI shares x86_64's audit arch and marks its syscall numbers with this bit.
    #[cfg(target_arch = "x86_64")]
    const X32_SYSCALL_BIT: i64 = 0x4000_0000;

    #[cfg(target_arch = "x86_64")]
    const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
    #[cfg(target_arch = "riscv64")]
    const ARCH: Option<TargetArch> = Some(TargetArch::riscv64);
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )))]
    const ARCH: Option<TargetArch> = None;

    fn filter_error(e: impl std::fmt::Display) -> PlatformError {
        PlatformError::NetguardFilter(e.to_string())
    }

    /// The BPF program: deny non-unix `socket`/`socketpair` and all io_uring set-up, allow the rest.
    pub(super) fn program() -> Result<BpfProgram, PlatformError> {
        let arch = ARCH.ok_or(PlatformError::NetguardUnsupportedArch(
            std::env::consts::ARCH,
        ))?;
        // A rule matches (and the call is denied) when the first argument, the address family,
        // is anything but AF_UNIX. The family is a C int: compare its low 32 bits.
        let not_unix = || -> Result<Vec<SeccompRule>, PlatformError> {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )
            .map_err(filter_error)?;
            Ok(vec![SeccompRule::new(vec![cond]).map_err(filter_error)?])
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        let socket_calls = [SYS_SOCKET, SYS_SOCKETPAIR];
        // An empty rule list matches unconditionally.
        let uring_calls = [
            SYS_IO_URING_SETUP,
            SYS_IO_URING_ENTER,
            SYS_IO_URING_REGISTER,
        ];
        for nr in socket_calls {
            rules.insert(nr, not_unix()?);
            #[cfg(target_arch = "x86_64")]
            rules.insert(nr | X32_SYSCALL_BIT, not_unix()?);
        }
        for nr in uring_calls {
            rules.insert(nr, Vec::new());
            #[cfg(target_arch = "x86_64")]
            rules.insert(nr | X32_SYSCALL_BIT, Vec::new());
        }
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(filter_error)?;
        BpfProgram::try_from(filter).map_err(filter_error)
    }

    pub(super) fn deny_network() -> Result<NetguardStatus, PlatformError> {
        let program = program()?;
        // TSYNC: the filter reaches every existing thread, or nothing is installed at all.
        seccompiler::apply_filter_all_threads(&program)
            .map_err(|e| PlatformError::NetguardApply(e.to_string()))?;
        Ok(NetguardStatus::Enforced)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use super::NetguardStatus;
    use crate::PlatformError;

    pub(super) fn deny_network() -> Result<NetguardStatus, PlatformError> {
        Ok(NetguardStatus::NotSupported {
            os: std::env::consts::OS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_as_a_sentence() {
        assert_eq!(NetguardStatus::NotApplied.to_string(), "not applied");
        assert!(NetguardStatus::NotSupported { os: "ios" }
            .to_string()
            .contains("not supported on ios"));
        assert_eq!(
            NetguardStatus::Failed { reason: "x".into() }.to_string(),
            "failed: x"
        );
    }

    /// Building the filter touches nothing; applying it is tested in a child process
    /// (tests/netguard.rs), because a filter cannot be removed from the test runner.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let program = imp::program().unwrap();
        assert!(program.len() > 10, "{} instructions", program.len());
    }

    #[cfg(all(
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    #[test]
    fn the_syscall_numbers_match_libc() {
        let libc_numbers: [i64; 3] = [
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_io_uring_setup,
        ];
        assert_eq!(
            [
                imp::SYS_SOCKET,
                imp::SYS_SOCKETPAIR,
                imp::SYS_IO_URING_SETUP
            ],
            libc_numbers
        );
    }
}
