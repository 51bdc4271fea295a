//! Why the kernel filter could not be loaded, attached or read, from aya's
//! errors.

use crate::error::ConfigError;
use aya::EbpfError;
use aya::maps::MapError;
use aya::programs::ProgramError;
use std::fmt;
use std::io;

/// Why the kernel filter could not be loaded, attached or read.
///
/// ```
/// use weir_hhh::ConfigError;
/// use weir_hhh::kernel::KernelError;
///
/// let e = KernelError::from(ConfigError::ZeroLimit);
/// assert!(e.to_string().contains("limit"));
/// assert!(!e.is_permission_denied());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum KernelError {
    /// The configuration is invalid (as for the user-space classifier).
    Config(ConfigError),
    /// The configuration is valid for the classifier but not supported by
    /// the kernel filter.
    Unsupported(&'static str),
    /// The kernel refused for lack of privilege (`EPERM`/`EACCES`: loading
    /// needs `CAP_BPF` or root, and attaching a socket filter may too).
    PermissionDenied {
        /// What was being done.
        during: &'static str,
        /// The system call's error.
        source: io::Error,
    },
    /// The verifier rejected the program.
    Verifier {
        /// The system call's error.
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// Any other failure of a BPF or socket system call.
    Syscall {
        /// What was being done.
        during: &'static str,
        /// The system call's error.
        source: io::Error,
    },
    /// A failure aya reports without a system call error (a malformed
    /// object, a missing map, ...).
    Other {
        /// What was being done.
        during: &'static str,
        /// aya's message.
        message: String,
    },
}

impl KernelError {
    /// Whether the kernel refused for lack of privilege (a caller may then
    /// fall back to the user-space classifier).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Self::PermissionDenied { .. })
    }

    fn io(during: &'static str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::PermissionDenied {
            Self::PermissionDenied { during, source }
        } else {
            Self::Syscall { during, source }
        }
    }

    pub(super) fn program(during: &'static str, e: ProgramError) -> Self {
        match e {
            ProgramError::LoadError {
                io_error,
                verifier_log,
            } => {
                // The verifier refuses a program with EACCES, the errno a
                // missing capability may also give: a refusal comes with a
                // log, a missing privilege without one.
                let log = verifier_log.to_string();
                if io_error.kind() == io::ErrorKind::PermissionDenied && log.trim().is_empty() {
                    Self::PermissionDenied {
                        during,
                        source: io_error,
                    }
                } else {
                    Self::Verifier {
                        source: io_error,
                        log,
                    }
                }
            }
            ProgramError::SyscallError(e) => Self::io(during, e.io_error),
            ProgramError::SocketFilterError(
                aya::programs::socket_filter::SocketFilterError::SetsockoptError {
                    io_error, ..
                },
            ) => Self::io(during, io_error),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }

    pub(super) fn map(during: &'static str, e: MapError) -> Self {
        match e {
            MapError::CreateError { io_error, .. } => Self::io(during, io_error),
            MapError::SyscallError(e) => Self::io(during, e.io_error),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }

    pub(super) fn ebpf(during: &'static str, e: EbpfError) -> Self {
        match e {
            EbpfError::MapError(e) => Self::map(during, e),
            EbpfError::ProgramError(e) => Self::program(during, e),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }
}

impl From<ConfigError> for KernelError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Unsupported(what) => write!(f, "the kernel filter does not support {what}"),
            Self::PermissionDenied { during, source } => write!(
                f,
                "{during}: permission denied ({source}); loading BPF programs needs CAP_BPF or root"
            ),
            Self::Verifier { source, log } => {
                write!(f, "the verifier rejected the filter ({source}):\n{log}")
            }
            Self::Syscall { during, source } => write!(f, "{during}: {source}"),
            Self::Other { during, message } => write!(f, "{during}: {message}"),
        }
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::PermissionDenied { source, .. }
            | Self::Verifier { source, .. }
            | Self::Syscall { source, .. } => Some(source),
            _ => None,
        }
    }
}
