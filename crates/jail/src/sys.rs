//! Thin wrappers over the system calls the crates we use do not cover
//! (raw `clone` with namespace flags and `CLONE_PIDFD`, `mount_setattr`,
//! `close_range`, loading a prepared seccomp program, signal masks,
//! capability bounding sets). Each wrapper is small and documents why it is
//! sound.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The resource argument of setrlimit: `__rlimit_resource_t` in glibc,
/// `c_int` in musl (the static build).
#[cfg(target_env = "gnu")]
pub(crate) type RlimitResource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
pub(crate) type RlimitResource = libc::c_int;

/// Result of [`clone_sandbox`]: which side of the clone we are on.
pub(crate) enum Forked {
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
    Child,
}

/// `clone(2)` with the given namespace flags, like `fork` (the child runs on
/// a copy of the caller's stack), returning a pidfd for the child.
///
/// Must only be called while the process is single-threaded: the child is a
/// copy of this one thread and may then use any function (allocation
/// included), since no lock can be held by a thread that no longer exists.
pub(crate) fn clone_sandbox(ns_flags: libc::c_int) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let flags = (ns_flags | libc::CLONE_PIDFD) as libc::c_ulong | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: raw clone with a NULL stack behaves like fork: the child gets a
    // copy-on-write copy of the address space and continues here. The only
    // pointer passed is `pidfd`, a valid, writable c_int for the kernel to
    // store the pidfd in (x86_64/aarch64 argument order: flags, stack,
    // parent_tid, child_tid, tls).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            &mut pidfd as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_int>(),
            0usize,
        )
    };
    forked(ret, pidfd)
}

/// Which side of a clone with `CLONE_PIDFD` this is, from the call's
/// return value and the pidfd the kernel stored.
fn forked(ret: libc::c_long, pidfd: libc::c_int) -> io::Result<Forked> {
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => {
            // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor
            // that nobody else owns (read only in the parent, `ret > 0`).
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok(Forked::Parent {
                pid: pid as libc::pid_t,
                pidfd,
            })
        }
    }
}

/// The start of clone3(2)'s `struct clone_args`, up to `cgroup`
/// (`CLONE_ARGS_SIZE_VER2`, Linux 5.7). Written out: the libc crate has it
/// only for some targets (not glibc's), and the layout is the kernel's ABI.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// clone3's flag to create the child in the cgroup v2 group `cgroup`
/// names (the value of the kernel's uapi, on every architecture).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// [`clone_sandbox`], with the child created in the cgroup v2 group open
/// as `cgroup` (`clone3` with `CLONE_INTO_CGROUP`). Moving a process into
/// a v2 group afterwards (a write of its pid to `cgroup.procs`) takes the
/// kernel's global cgroup_threadgroup_rwsem for writing, which waits for
/// an RCU grace period (about 15 ms on an idle host); a child made in its
/// group takes only the read side, as every fork does. Fails where clone3
/// cannot be used (a seccomp filter answering ENOSYS, as some container
/// runtimes do); the caller then clones and moves the child.
pub(crate) fn clone_sandbox_into(
    ns_flags: libc::c_int,
    cgroup: BorrowedFd<'_>,
) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: u64::from((ns_flags | libc::CLONE_PIDFD) as u32) | CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM and with no stack behaves like fork,
    // as `clone_sandbox`'s raw clone does (the same rule on threads
    // applies). `args` is a valid clone_args of the size passed; its one
    // pointer, `pidfd`, is a valid, writable c_int for the kernel to store
    // the pidfd in, and `cgroup` is a descriptor the caller keeps open.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    forked(ret, pidfd)
}

/// Start `child` in a new process that shares this one's memory
/// (`CLONE_VM`) while this one waits (`CLONE_VFORK`) until the child has
/// exec'd or exited, as `posix_spawn` starts a program. For the workload,
/// whose `execve` otherwise tears down the copy of its parent's address
/// space that `fork` made (and whose setup takes copy-on-write faults on
/// it): with the memory shared, nothing is copied and exec only lets go
/// of it. Returns the child's pid once this process runs again.
///
/// What the child may do, for this process to go on safely:
/// - only state that is per process or per thread may change: signal
///   dispositions and mask, descriptors, credentials, Landlock, seccomp,
///   no_new_privs, rlimits, the working directory, the session. Nothing
///   that belongs to the address space, which this process keeps (above
///   all not `PR_SET_DUMPABLE`, a flag of the memory: a learn-mode
///   workload, which sets it, must be forked);
/// - allocate and free (this process is single-threaded and suspended,
///   so the allocator's state stays consistent);
/// - end by exec or `_exit`; should `child` return, the child exits
///   with 125 (it never returns into frames of this process).
///
/// The child runs on a stack of its own, with every signal blocked until
/// it restores this process's mask, so no handler runs on shared memory
/// before the child has reset them. A panic that aborts in the child
/// ends the child (glibc's `raise` asks the kernel for the caller's
/// thread id, for vfork's sake); musl's `raise` uses the id kept in the
/// shared memory, which is this process's thread, so there it ends both.
/// Either way the exec fails closed.
pub(crate) fn spawn_sharing_memory<F: FnOnce()>(child: F) -> io::Result<libc::pid_t> {
    let stack = ChildStack::new()?;
    let mut spawn = Spawn {
        child: Some(child),
        mask: block_all_signals()?,
    };
    // SAFETY: `run_spawned::<F>` is given a pointer to `spawn`, which
    // lives on this frame until clone returns, and CLONE_VFORK keeps this
    // thread suspended until the child has exec'd or exited, so the child
    // is the only one to touch `spawn` (and the rest of the memory)
    // meanwhile. The child runs on `stack`, a mapping of its own, never
    // on this thread's frames. This process is single-threaded (see
    // `clone_sandbox`), so no other thread runs on the shared memory.
    let pid = unsafe {
        libc::clone(
            run_spawned::<F>,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut spawn as *mut Spawn<F>).cast::<libc::c_void>(),
        )
    };
    let err = io::Error::last_os_error();
    restore_signal_mask(&spawn.mask);
    if pid == -1 {
        return Err(err);
    }
    // The child took `child` (`spawn.child` is None now): what it owned
    // went with its exec or its exit.
    Ok(pid)
}

/// Run `with` while a process in a new user namespace exists, given that
/// process's pid (for `/proc/PID/uid_map`, `gid_map` and `ns/user`), and
/// return once that process is gone.
///
/// The process shares this one's memory (`CLONE_VM`, without
/// `CLONE_VFORK`: this one goes on), so nothing is copied to make it and
/// nothing torn down when it exits, which with `fork` cost this
/// supervisor two page-table walks of its whole address space per run.
/// It runs beside this process on a stack of its own and makes only raw
/// system calls, which touch no memory this process uses: it closes its
/// copy of a pipe's write end, reads the pipe until end-of-file (this
/// process closes its end after `with`, or dies) and exits. Every signal
/// is blocked in it (SIGKILL still ends it).
pub(crate) fn in_new_user_namespace<T>(with: impl FnOnce(libc::pid_t) -> T) -> io::Result<T> {
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stack = ChildStack::new()?;
    let ends: [RawFd; 2] = [rd.as_raw_fd(), wr.as_raw_fd()];
    let mask = block_all_signals()?;
    // SAFETY: the child runs `wait_for_end_of_file` on `stack`, a mapping
    // of its own, and reads only `ends`, which stays on this frame until
    // the child has been reaped below; it makes raw system calls and
    // touches no other memory. Its descriptor table is a copy.
    let pid = unsafe {
        libc::clone(
            wait_for_end_of_file,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
            ends.as_ptr().cast_mut().cast::<libc::c_void>(),
        )
    };
    let err = io::Error::last_os_error();
    restore_signal_mask(&mask);
    if pid == -1 {
        return Err(err);
    }
    drop(rd);
    // Declared after `stack` and `ends`, so dropped before them, also
    // when `with` unwinds: the child is gone before its stack and the
    // descriptors' numbers are.
    let _child = EndedOnDrop { pid, wr: Some(wr) };
    Ok(with(pid))
}

/// The process of [`in_new_user_namespace`]: told to go (its pipe's end
/// closed) and reaped when dropped.
struct EndedOnDrop {
    pid: libc::pid_t,
    wr: Option<OwnedFd>,
}

impl Drop for EndedOnDrop {
    fn drop(&mut self) {
        drop(self.wr.take());
        while let Err(e) = wait4(self.pid, 0) {
            if e.kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
    }
}

/// The body of [`in_new_user_namespace`]'s process: `arg` points to the
/// pipe's read and write ends.
extern "C" fn wait_for_end_of_file(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `[RawFd; 2]` of `in_new_user_namespace`, alive
    // until this process has been reaped.
    let [rd, wr] = unsafe { *arg.cast::<[RawFd; 2]>() };
    // SAFETY: this process's own copies of the two descriptors (the table
    // is not shared); rustix makes the calls directly, without libc's
    // errno, which lives in the parent's memory.
    unsafe {
        rustix::io::close(wr);
        let rd = BorrowedFd::borrow_raw(rd);
        let mut byte = [0u8; 1];
        while let Ok(1) = rustix::io::read(rd, &mut byte) {}
        // SAFETY: exit(2) of this task alone; it never returns.
        libc::syscall(libc::SYS_exit, 0);
    }
    0
}

/// Block every signal in this thread, for a clone whose child shares this
/// process's memory and must run no handler on it before it is ready;
/// returns the mask to restore after the clone (in this thread, and in a
/// child that takes it over).
fn block_all_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a valid sigset_t.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: plain data, set by sigprocmask below.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid sigset_t values.
    if unsafe { libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(old)
}

/// Put back a mask saved by [`block_all_signals`].
fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid sigset_t.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// What [`spawn_sharing_memory`] hands its child.
struct Spawn<F> {
    child: Option<F>,
    /// The parent's signal mask, which the child restores.
    mask: libc::sigset_t,
}

extern "C" fn run_spawned<F: FnOnce()>(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Spawn<F>` of `spawn_sharing_memory`, alive
    // and touched by no one else while its caller is suspended.
    let spawn = unsafe { &mut *arg.cast::<Spawn<F>>() };
    // The parent's mask, in this (the child's) thread.
    restore_signal_mask(&spawn.mask);
    if let Some(child) = spawn.child.take() {
        child();
    }
    // Never back into the parent's frames.
    exit_now(125)
}

/// The stack a [`spawn_sharing_memory`] child runs on: an anonymous
/// mapping with an inaccessible page below it, so an overflow faults
/// instead of writing into other memory. Only the pages touched are
/// backed; unmapped when dropped (the child has exec'd or exited).
struct ChildStack {
    base: *mut libc::c_void,
}

impl ChildStack {
    /// Generous for the workload's setup (it parses its order, reports
    /// in JSON and looks the command up in PATH); untouched pages cost
    /// nothing.
    const SIZE: usize = 1 << 20;
    const GUARD: usize = 4096;

    fn new() -> io::Result<Self> {
        // SAFETY: a new private anonymous mapping; no existing memory is
        // affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack grows down from here (16-byte aligned: the mapping is
    /// page aligned and its size a multiple of 16).
    fn top(&self) -> *mut libc::c_void {
        self.base.cast::<u8>().wrapping_add(Self::SIZE).cast()
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used by anyone.
        unsafe { libc::munmap(self.base, Self::SIZE) };
    }
}

/// Plain `fork(2)` for the single-threaded helper processes.
pub(crate) fn fork() -> io::Result<Option<libc::pid_t>> {
    // SAFETY: only called from single-threaded processes (the supervisor
    // before it starts threads, the sandbox init); see `clone_sandbox`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Mount attributes to set with [`mount_setattr`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MountAttrs {
    pub rdonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

/// `mount_setattr(2)` (Linux 5.12+) on the mount `fd` refers to, and on
/// every mount below it when `recursive`: unlike a remount it never needs
/// the locked flags repeated.
pub(crate) fn mount_setattr(
    fd: BorrowedFd<'_>,
    attrs: MountAttrs,
    recursive: bool,
) -> io::Result<()> {
    let mut set = 0;
    if attrs.rdonly {
        set |= MOUNT_ATTR_RDONLY;
    }
    if attrs.nosuid {
        set |= MOUNT_ATTR_NOSUID;
    }
    if attrs.nodev {
        set |= MOUNT_ATTR_NODEV;
    }
    if attrs.noexec {
        set |= MOUNT_ATTR_NOEXEC;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(fd, &attr, recursive)
}

/// Clear the read-only flag of the mount `fd` refers to (not recursive).
pub(crate) fn mount_clear_rdonly(fd: BorrowedFd<'_>) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: 0,
        attr_clr: MOUNT_ATTR_RDONLY,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(fd, &attr, false)
}

/// `setns(2)` into the namespace `fd` refers to (`flags`: its kind).
pub(crate) fn setns(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: setns with a live descriptor and integer flags; only called
    // in a single-threaded helper process.
    if unsafe { libc::setns(fd.as_raw_fd(), flags) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `unshare(2)` with the given flags (single-threaded helpers only).
pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare with integer flags.
    if unsafe { libc::unshare(flags) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Make the detached mount tree `fd` (from `open_tree(OPEN_TREE_CLONE)`)
/// an idmapped mount, recursively, with the maps of the user namespace
/// `userns` (Linux 5.12+; the filesystem must support it).
pub(crate) fn mount_setattr_idmap(fd: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    setattr(fd, &attr, true)
}

fn setattr(fd: BorrowedFd<'_>, attr: &MountAttr, recursive: bool) -> io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: `fd` is a live descriptor, the path is an empty NUL-terminated
    // string, and `attr` a properly laid out `struct mount_attr` (any
    // descriptor in it is live too) whose size we pass alongside.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `mount(2)`. Paths are usually `/proc/self/fd/N` magic links so that
/// nothing is resolved by name after it was checked.
pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let ptr = |c: Option<&CStr>| c.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is NULL or a valid NUL-terminated string that
    // outlives the call.
    let ret = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data) as *const libc::c_void,
        )
    };
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The `/proc/self/fd/N` path naming a descriptor.
pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> std::ffi::CString {
    // A decimal number never contains NUL.
    std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// Mark every descriptor from `first` up close-on-exec (Linux 5.11+), or
/// close them where the flag is unknown.
pub(crate) fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes plain integers; marking descriptors
    // close-on-exec cannot invalidate memory.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if ret == 0 {
        return Ok(());
    }
    // Older kernels: walk /proc/self/fd.
    let dir = std::fs::read_dir("/proc/self/fd")?;
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &RawFd| *fd >= first as RawFd)
        .collect();
    for fd in fds {
        // SAFETY: setting FD_CLOEXEC on a descriptor number is harmless even
        // if it was the read_dir descriptor (already closed, then EBADF).
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Close every descriptor from `first` up except those in `keep`.
pub(crate) fn close_all_from_except(first: RawFd, keep: &[RawFd]) {
    let mut start = first;
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&k| k >= first).collect();
    keep.sort_unstable();
    for k in keep {
        if k > start {
            // SAFETY: closing descriptors we own by number, in a helper
            // process that holds no Rust object over them.
            unsafe { libc::syscall(libc::SYS_close_range, start, k - 1, 0) };
        }
        start = k + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, start, u32::MAX, 0) };
}

/// Install a prepared classic-BPF seccomp program on the calling thread.
/// `no_new_privs` must already be set. With `listener`, the kernel returns
/// the user-notification descriptor (close-on-exec) for the supervisor.
pub(crate) fn seccomp_install(
    program: &[libc::sock_filter],
    listener: bool,
) -> io::Result<Option<OwnedFd>> {
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
    let flags: libc::c_ulong = if listener {
        SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seccomp program too long"))?;
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points to `len` valid instructions that outlive the
    // call; the kernel copies the program.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    if listener {
        // SAFETY: with NEW_LISTENER the return value is a new descriptor.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(ret as RawFd) }))
    } else {
        Ok(None)
    }
}

/// Drop every capability: bounding set, ambient set, then the effective,
/// permitted and inheritable sets.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    use crate::test_switch::{off, Switch};
    let bounding = if off(Switch::BoundingSet) { 0 } else { 64 };
    for cap in 0..bounding {
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break; // past the last capability this kernel knows
            }
            // Without CAP_SETPCAP (an unprivileged caller at the process
            // level, no user namespace) the bounding set cannot shrink; it
            // cannot matter either when we hold no capability and
            // no_new_privs stops setuid and file capabilities from granting
            // any.
            if err.raw_os_error() == Some(libc::EPERM) && holds_no_capability()? {
                break;
            }
            return Err(err);
        }
    }
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: rustix::thread::CapabilitySet::empty(),
            permitted: rustix::thread::CapabilitySet::empty(),
            inheritable: rustix::thread::CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// True when the effective and permitted sets are empty and
/// no_new_privs is set.
fn holds_no_capability() -> io::Result<bool> {
    let caps = rustix::thread::capabilities(None)?;
    // SAFETY: prctl(PR_GET_NO_NEW_PRIVS) takes no pointers.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1;
    Ok(caps.effective.is_empty() && caps.permitted.is_empty() && nnp)
}

/// The signal mask manipulations the helpers need.
pub(crate) fn block_signals(signals: &[libc::c_int]) -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: `set` is valid; an invalid signal number only returns EINVAL.
        unsafe { libc::sigaddset(&mut set, s) };
    }
    // SAFETY: both pointers are valid sigset_t values.
    let ret = unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(set)
}

/// Unblock all signals and restore default dispositions (before exec).
pub(crate) fn reset_signals() {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; resetting dispositions to SIG_DFL is always
    // allowed (SIGKILL/SIGSTOP just return EINVAL).
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for sig in 1..32 {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// A signalfd for the given set (which must be blocked).
pub(crate) fn signalfd(set: &libc::sigset_t) -> io::Result<OwnedFd> {
    // SAFETY: `set` is a valid sigset_t; -1 asks for a new descriptor.
    let fd = unsafe { libc::signalfd(-1, set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Read one pending signal number from a signalfd, if any.
pub(crate) fn read_signalfd(fd: RawFd) -> Option<i32> {
    // SAFETY: signalfd_siginfo is plain data.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading at most `size` bytes into `info`.
    let n = unsafe { libc::read(fd, &mut info as *mut _ as *mut libc::c_void, size) };
    if n as usize == size {
        Some(info.ssi_signo as i32)
    } else {
        None
    }
}

/// `wait4` that retries on EINTR; returns the raw status and rusage.
pub(crate) fn wait4(
    pid: libc::pid_t,
    flags: libc::c_int,
) -> io::Result<(libc::pid_t, i32, libc::rusage)> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to local status and rusage.
        let ret = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        return Ok((ret, status, usage));
    }
}

/// Bring the loopback interface up in the current network namespace.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() with constant arguments.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the `ifreq` we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) == -1 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Terminate the calling process immediately, without running destructors
/// or atexit handlers that belong to the parent's copy of the program.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit is always safe to call.
    unsafe { libc::_exit(code) }
}

/// Write all of `buf` to a raw descriptor, retrying on EINTR.
pub(crate) fn write_all_fd(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: writing from a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Run `f` in a forked child that is root in a new user namespace (mapped
/// to `uid`/`gid`) with a new mount namespace; returns its result: 0 on
/// success, else the errno it failed with. Only for single-threaded callers
/// (`cordon doctor`, a probe before a run).
pub(crate) fn in_user_and_mount_ns(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> Result<(), i32>,
) -> io::Result<i32> {
    // Everything that allocates is prepared before the fork.
    let uid_map = format!("0 {uid} 1");
    let gid_map = format!("0 {gid} 1");
    match fork()? {
        None => {
            let code = (|| {
                // SAFETY: unshare with constant flags in this child.
                if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } == -1 {
                    return io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO);
                }
                for (file, text) in [
                    ("/proc/self/setgroups", "deny"),
                    ("/proc/self/uid_map", uid_map.as_str()),
                    ("/proc/self/gid_map", gid_map.as_str()),
                ] {
                    if let Err(e) = std::fs::write(file, text) {
                        return e.raw_os_error().unwrap_or(libc::EIO);
                    }
                }
                match f() {
                    Ok(()) => 0,
                    Err(errno) => errno,
                }
            })();
            exit_now(code.clamp(0, 255))
        }
        Some(pid) => {
            let (_, status, _) = wait4(pid, 0)?;
            if libc::WIFEXITED(status) {
                Ok(libc::WEXITSTATUS(status))
            } else {
                Ok(libc::EIO)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The child of `spawn_sharing_memory` writes into this process's
    /// memory (shared, not a copy) and this process goes on only once the
    /// child has ended: the write is there when the call returns. The
    /// child's own descriptor table and signal mask are its own: it
    /// closes a descriptor and unblocks a signal, and neither changes
    /// here. (Only raw writes and system calls in the child: the test
    /// harness has threads.)
    #[test]
    fn a_child_sharing_memory_writes_here_and_is_waited_for() {
        let mut written = 0u32;
        let at = std::ptr::addr_of_mut!(written) as usize;
        let (rd, wr) = rustix::pipe::pipe().unwrap_or_else(|e| panic!("{e}"));
        let before = block_signals(&[libc::SIGUSR2]).unwrap_or_else(|e| panic!("{e}"));
        let fd = wr.as_raw_fd();
        let pid = spawn_sharing_memory(|| {
            // SAFETY: `at` is `written`, alive while the parent waits; the
            // descriptor and the mask are this (the child's) process's own.
            unsafe {
                libc::close(fd);
                libc::sigprocmask(libc::SIG_UNBLOCK, &before, std::ptr::null_mut());
                libc::usleep(20_000);
                std::ptr::write_volatile(at as *mut u32, 42);
            }
            exit_now(7)
        })
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        // SAFETY: reading a local the child wrote, after it ended.
        assert_eq!(
            unsafe { std::ptr::read_volatile(std::ptr::addr_of!(written)) },
            42
        );
        let (_, status, _) = wait4(pid, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
            "{status}"
        );
        assert!(
            rustix::io::write(&wr, b"x").is_ok(),
            "this process's copy of the descriptor is open"
        );
        // SAFETY: sigset_t is plain data, filled in below.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: reading this thread's mask into a local.
        unsafe { libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) };
        // SAFETY: `mask` was filled in above.
        assert_eq!(unsafe { libc::sigismember(&mask, libc::SIGUSR2) }, 1);
        // SAFETY: unblocking what this test blocked.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &before, std::ptr::null_mut()) };
        drop(rd);
    }

    /// A child that execs lets go of the shared memory: this process goes
    /// on, and the program's exit status is the child's.
    #[test]
    fn a_child_sharing_memory_can_exec() {
        let pid = spawn_sharing_memory(|| {
            let argv = [
                c"/bin/sh".as_ptr(),
                c"-c".as_ptr(),
                c"exit 3".as_ptr(),
                std::ptr::null(),
            ];
            let envp = [std::ptr::null()];
            // SAFETY: NUL-terminated arrays of valid C strings.
            unsafe { libc::execve(argv[0], argv.as_ptr(), envp.as_ptr()) };
            exit_now(127)
        })
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        let (_, status, _) = wait4(pid, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3,
            "{status}"
        );
    }

    /// The process of `in_new_user_namespace` is in a user namespace of
    /// its own while `with` runs (its maps can be written and the
    /// namespace kept by a descriptor, as the idmapped binds need), shares
    /// this process's address space (`kcmp`: nothing was copied), and
    /// is gone, reaped, when the call returns. Needs user namespaces.
    #[test]
    fn a_process_in_a_new_user_namespace_lives_while_it_is_needed() {
        if std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .is_ok_and(|n| n.trim() == "0")
        {
            assert!(
                std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_none(),
                "user namespaces are off on this host"
            );
            println!("SKIPPED: user namespaces are off on this host");
            return;
        }
        let own = std::fs::read_link("/proc/self/ns/user").unwrap_or_else(|e| panic!("{e}"));
        let (uid, gid) = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let (pid, theirs, held, shares_memory) = in_new_user_namespace(|pid| {
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/user"));
            std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {uid} 1"))
                .unwrap_or_else(|e| panic!("uid_map: {e}"));
            std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
                .unwrap_or_else(|e| panic!("setgroups: {e}"));
            std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {gid} 1"))
                .unwrap_or_else(|e| panic!("gid_map: {e}"));
            let held = rustix::fs::open(
                format!("/proc/{pid}/ns/user"),
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            );
            const KCMP_VM: libc::c_long = 1;
            // SAFETY: kcmp(2) with integer arguments: 0 when both
            // processes share one address space.
            let same_vm =
                unsafe { libc::syscall(libc::SYS_kcmp, libc::getpid(), pid, KCMP_VM, 0, 0) };
            let kcmp_error = io::Error::last_os_error();
            (pid, theirs, held, (same_vm, kcmp_error))
        })
        .unwrap_or_else(|e| panic!("clone: {e}"));
        let theirs = theirs.unwrap_or_else(|e| panic!("its namespace: {e}"));
        assert_ne!(theirs, own, "a user namespace of its own");
        let held = held.unwrap_or_else(|e| panic!("keep its namespace: {e}"));
        assert_eq!(
            std::fs::read_link(format!("/proc/self/fd/{}", held.as_raw_fd()))
                .unwrap_or_else(|e| panic!("{e}")),
            theirs,
            "the descriptor holds its namespace"
        );
        assert_eq!(
            shares_memory.0, 0,
            "it shares this process's address space (kcmp: {})",
            shares_memory.1
        );
        // SAFETY: kill(2) with signal 0 only checks that the pid exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        assert!(gone, "the process {pid} is reaped once the call returns");
    }

    /// The cgroup v2 line of a process's `/proc/PID/cgroup` while it waits
    /// on `rd`, then let it go and reap it.
    fn v2_line_of(forked: io::Result<Forked>, rd: &OwnedFd, wr: OwnedFd) -> String {
        match forked.unwrap_or_else(|e| panic!("clone: {e}")) {
            Forked::Child => {
                // Only async-signal-safe calls: the test harness has threads.
                // Its copy of the write end goes, so that the parent's close
                // is the end of file.
                // SAFETY: closing this process's own copy.
                unsafe { libc::close(wr.as_raw_fd()) };
                let mut b = [0u8; 1];
                // SAFETY: reading one byte into a local buffer.
                unsafe { libc::read(rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
                exit_now(0)
            }
            Forked::Parent { pid, pidfd: _ } => {
                let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .unwrap_or_else(|e| panic!("{e}"));
                drop(wr);
                let _ = wait4(pid, 0);
                text.lines()
                    .find(|l| l.starts_with("0::"))
                    .unwrap_or_default()
                    .to_owned()
            }
        }
    }

    /// A child made with `clone_sandbox_into` is in the v2 group from its
    /// start; one made by the plain clone is where its parent is (the
    /// control).
    #[test]
    fn a_child_cloned_into_a_v2_group_starts_there() {
        let Some(mount) = crate::cgroup::writable_cgroup2_or_skip() else {
            return;
        };
        let name = format!("cordon-clone-into-{}", std::process::id());
        let dir = mount.join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let group = std::fs::File::open(&dir).unwrap_or_else(|e| panic!("{e}"));
        let pipe = || rustix::pipe::pipe().unwrap_or_else(|e| panic!("{e}"));
        let (rd, wr) = pipe();
        let into = v2_line_of(clone_sandbox_into(0, group.as_fd()), &rd, wr);
        let (rd, wr) = pipe();
        let plain = v2_line_of(clone_sandbox(0), &rd, wr);
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(into, format!("0::/{name}"), "created in the group");
        assert_ne!(plain, format!("0::/{name}"), "the control is not");
    }
}
