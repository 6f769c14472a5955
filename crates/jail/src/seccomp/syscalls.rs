//! System call numbers, per architecture, for every call the filter names.
//!
//! A call is a variant of [`Syscall`], so a misspelt or unknown name is a
//! build error, never a rule that is silently left out. Every row gives the
//! number on each supported architecture, or `absent` where that
//! architecture has no such call (the row cannot be written without saying
//! which): the macro accepts nothing else.
//!
//! Numbers come from the kernel's `arch/x86/entry/syscalls/syscall_64.tbl`
//! and `include/uapi/asm-generic/unistd.h` (aarch64); the tests check them
//! against the libc crate and the installed kernel headers.

/// A number, or `absent` on that architecture.
macro_rules! nr {
    (absent) => {
        None
    };
    ($n:literal) => {
        Some($n)
    };
}

macro_rules! syscalls {
    ($( $variant:ident $name:literal x86_64: $x:tt aarch64: $a:tt; )*) => {
        /// A system call the filter has a rule for.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Syscall {
            $($variant,)*
        }

        impl Syscall {
            /// Every call in the table.
            pub const ALL: &'static [Syscall] = &[$(Syscall::$variant,)*];

            /// The kernel's name for the call.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Syscall::$variant => $name,)*
                }
            }

            const fn x86_64(self) -> Option<u32> {
                match self {
                    $(Syscall::$variant => nr!($x),)*
                }
            }

            const fn aarch64(self) -> Option<u32> {
                match self {
                    $(Syscall::$variant => nr!($a),)*
                }
            }
        }
    };
}

syscalls! {
    // Mounts, old and new API, and root changes.
    Mount "mount" x86_64: 165 aarch64: 40;
    Umount2 "umount2" x86_64: 166 aarch64: 39;
    PivotRoot "pivot_root" x86_64: 155 aarch64: 41;
    Chroot "chroot" x86_64: 161 aarch64: 51;
    MoveMount "move_mount" x86_64: 429 aarch64: 429;
    OpenTree "open_tree" x86_64: 428 aarch64: 428;
    Fsopen "fsopen" x86_64: 430 aarch64: 430;
    Fsconfig "fsconfig" x86_64: 431 aarch64: 431;
    Fsmount "fsmount" x86_64: 432 aarch64: 432;
    Fspick "fspick" x86_64: 433 aarch64: 433;
    MountSetattr "mount_setattr" x86_64: 442 aarch64: 442;
    OpenTreeAttr "open_tree_attr" x86_64: 467 aarch64: 467;
    // Namespaces.
    Unshare "unshare" x86_64: 272 aarch64: 97;
    Setns "setns" x86_64: 308 aarch64: 268;
    Clone "clone" x86_64: 56 aarch64: 220;
    Clone3 "clone3" x86_64: 435 aarch64: 435;
    // Inspecting or steering other processes.
    Ptrace "ptrace" x86_64: 101 aarch64: 117;
    ProcessVmReadv "process_vm_readv" x86_64: 310 aarch64: 270;
    ProcessVmWritev "process_vm_writev" x86_64: 311 aarch64: 271;
    Kcmp "kcmp" x86_64: 312 aarch64: 272;
    PidfdGetfd "pidfd_getfd" x86_64: 438 aarch64: 438;
    // Kernel attack surface.
    Bpf "bpf" x86_64: 321 aarch64: 280;
    PerfEventOpen "perf_event_open" x86_64: 298 aarch64: 241;
    Userfaultfd "userfaultfd" x86_64: 323 aarch64: 282;
    IoUringSetup "io_uring_setup" x86_64: 425 aarch64: 425;
    IoUringEnter "io_uring_enter" x86_64: 426 aarch64: 426;
    IoUringRegister "io_uring_register" x86_64: 427 aarch64: 427;
    // Kernel keyrings.
    Keyctl "keyctl" x86_64: 250 aarch64: 219;
    AddKey "add_key" x86_64: 248 aarch64: 217;
    RequestKey "request_key" x86_64: 249 aarch64: 218;
    // The machine itself.
    KexecLoad "kexec_load" x86_64: 246 aarch64: 104;
    KexecFileLoad "kexec_file_load" x86_64: 320 aarch64: 294;
    InitModule "init_module" x86_64: 175 aarch64: 105;
    FinitModule "finit_module" x86_64: 313 aarch64: 273;
    DeleteModule "delete_module" x86_64: 176 aarch64: 106;
    Reboot "reboot" x86_64: 169 aarch64: 142;
    Swapon "swapon" x86_64: 167 aarch64: 224;
    Swapoff "swapoff" x86_64: 168 aarch64: 225;
    Acct "acct" x86_64: 163 aarch64: 89;
    Syslog "syslog" x86_64: 103 aarch64: 116;
    Quotactl "quotactl" x86_64: 179 aarch64: 60;
    QuotactlFd "quotactl_fd" x86_64: 443 aarch64: 443;
    Settimeofday "settimeofday" x86_64: 164 aarch64: 170;
    ClockSettime "clock_settime" x86_64: 227 aarch64: 112;
    ClockAdjtime "clock_adjtime" x86_64: 305 aarch64: 266;
    Iopl "iopl" x86_64: 172 aarch64: absent;
    Ioperm "ioperm" x86_64: 173 aarch64: absent;
    Vhangup "vhangup" x86_64: 153 aarch64: 58;
    LookupDcookie "lookup_dcookie" x86_64: 212 aarch64: 18;
    Uselib "uselib" x86_64: 134 aarch64: absent;
    Ustat "ustat" x86_64: 136 aarch64: absent;
    Sysfs "sysfs" x86_64: 139 aarch64: absent;
    Sysctl "_sysctl" x86_64: 156 aarch64: absent;
    Nfsservctl "nfsservctl" x86_64: 180 aarch64: 42;
    // Opening files by handle bypasses the mount tree.
    OpenByHandleAt "open_by_handle_at" x86_64: 304 aarch64: 265;
    NameToHandleAt "name_to_handle_at" x86_64: 303 aarch64: 264;
    FanotifyInit "fanotify_init" x86_64: 300 aarch64: 262;
    // Observed in learn mode (the supervisor reads the path and lets the
    // call continue).
    Open "open" x86_64: 2 aarch64: absent;
    Openat "openat" x86_64: 257 aarch64: 56;
    Openat2 "openat2" x86_64: 437 aarch64: 437;
    Creat "creat" x86_64: 85 aarch64: absent;
    Execve "execve" x86_64: 59 aarch64: 221;
    Execveat "execveat" x86_64: 322 aarch64: 281;
    Mkdir "mkdir" x86_64: 83 aarch64: absent;
    Mkdirat "mkdirat" x86_64: 258 aarch64: 34;
    // Observed in learn mode for the process's peak address space.
    ExitGroup "exit_group" x86_64: 231 aarch64: 94;
    // Calls with argument rules.
    Ioctl "ioctl" x86_64: 16 aarch64: 29;
    Socket "socket" x86_64: 41 aarch64: 198;
    Socketpair "socketpair" x86_64: 53 aarch64: 199;
    // The newest call this table knows (Linux 6.17): every number above it
    // answers ENOSYS.
    FileSetattr "file_setattr" x86_64: 469 aarch64: 469;
}

/// An architecture the filter supports.
#[derive(Debug, Clone, Copy)]
pub struct Arch {
    pub name: &'static str,
    /// `AUDIT_ARCH_*`, the value of `seccomp_data.arch` for this ABI.
    pub audit: u32,
    /// The bit that marks a call of a second ABI sharing `audit` (x32 on
    /// x86_64): such calls kill the process.
    pub foreign_abi_bit: Option<u32>,
    numbers: fn(Syscall) -> Option<u32>,
}

impl Arch {
    /// The call's number here, or `None` where this architecture lacks it.
    pub fn nr(&self, call: Syscall) -> Option<u32> {
        (self.numbers)(call)
    }

    /// The highest number the table knows: every number above it answers
    /// ENOSYS, so a kernel newer than cordon fails closed.
    pub fn max_known(&self) -> u32 {
        Syscall::ALL
            .iter()
            .filter_map(|&c| self.nr(c))
            .max()
            .unwrap_or(0)
    }

    /// The call with this number, if the table has one.
    pub fn call(&self, nr: u32) -> Option<Syscall> {
        Syscall::ALL
            .iter()
            .copied()
            .find(|&c| self.nr(c) == Some(nr))
    }
}

pub const X86_64: Arch = Arch {
    name: "x86_64",
    audit: 0xc000_003e, // EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    foreign_abi_bit: Some(0x4000_0000), // __X32_SYSCALL_BIT
    numbers: Syscall::x86_64,
};

pub const AARCH64: Arch = Arch {
    name: "aarch64",
    audit: 0xc000_00b7, // EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    foreign_abi_bit: None,
    numbers: Syscall::aarch64,
};

/// Both supported architectures (the tests check every table).
pub const ARCHES: &[Arch] = &[X86_64, AARCH64];

#[cfg(target_arch = "x86_64")]
pub const NATIVE: Arch = X86_64;
#[cfg(target_arch = "aarch64")]
pub const NATIVE: Arch = AARCH64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the seccomp filter has system call tables for x86_64 and aarch64 only");
