//! Code that runs inside the sandbox, between `clone` and `execve`:
//! the init (PID 1 of the new PID namespace) and the workload process.
//!
//! Both are copies of the single-threaded supervisor, so ordinary Rust is
//! fine here; every failure is reported over the report pipe as one JSON
//! line and ends the process with status 125.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cgroup::Cgroup;
use crate::error::ChildReport;
use crate::landlock_rules::{self, PathAccess, PathRule};
use crate::rootfs::{Plan, ScratchDevices};
use crate::seccomp::SeccompProgram;
use crate::spec::{IsolationLevel, Layer, NetworkMode, Spec, StdinMode};
use crate::sys;
use crate::test_switch::{off, Switch};

/// Descriptors the child works with, already at their final numbers
/// except stdio, which `enter` moves onto 0, 1 and 2.
#[derive(Clone, Copy)]
pub(crate) struct ChildFds {
    pub sync: RawFd,
    pub report: RawFd,
    pub status: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// Unix socket to hand the proxy listener to the supervisor.
    pub control: Option<RawFd>,
}

pub(crate) struct ChildContext<'a> {
    pub spec: &'a Spec,
    pub plan: Option<&'a Plan>,
    pub seccomp: &'a SeccompProgram,
    /// The sandbox's groups; the child joins the cgroup v1 ones itself.
    pub cgroup: Option<&'a Cgroup>,
    pub fds: ChildFds,
    /// The cgroup could not limit processes/memory: use rlimits instead.
    pub rlimit_pids: bool,
    pub rlimit_memory: bool,
    /// Landlock may be missing on this host.
    pub landlock_optional: bool,
    /// Drop the caller's supplementary groups (crate::identity).
    pub drop_groups: bool,
    /// A session: the init serves exec orders on the control socket
    /// (crate::session_init) instead of running `spec.argv` once.
    pub session: bool,
    /// The workload's Landlock ruleset, built ahead by a session's init
    /// (`None`: the workload builds it).
    pub landlock: Option<&'a landlock_rules::Prepared>,
    /// Limits of one exec of a session, set as rlimits after the spec's,
    /// whether or not a cgroup holds the session's (empty for a run and
    /// for a session's init).
    pub exec_limits: crate::session::ExecLimits,
    /// The caller's CPUs, given back to the workload just before its
    /// `execve`: a one-shot run and a session's init are held on one CPU
    /// (crate::setup_cpu).
    pub cpus: Option<&'a rustix::thread::CpuSet>,
}

/// Signals the init passes on to the workload.
pub(crate) const FORWARDED: &[libc::c_int] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

pub(crate) fn report(fd: RawFd, r: &ChildReport) {
    if let Ok(mut line) = serde_json::to_vec(r) {
        line.push(b'\n');
        let _ = sys::write_all_fd(fd, &line);
    }
}

fn fail(fd: RawFd, layer: Layer, message: String, fix: Option<&str>) -> ! {
    fail_with(fd, setup(layer, message, fix))
}

/// Entry point of the cloned child. Never returns.
pub(crate) fn enter(ctx: ChildContext<'_>) -> ! {
    let fds = &ctx.fds;
    // Die with the supervisor. Set before waiting for the go byte: if the
    // supervisor died earlier, the read below sees end-of-file.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };

    // stdio onto 0/1/2; everything else the supervisor had is closed.
    // SAFETY: dup2 on descriptors this process owns.
    unsafe {
        libc::dup2(fds.stdout, 1);
        libc::dup2(fds.stderr, 2);
    }
    let mut keep = vec![fds.sync, fds.report, fds.status];
    keep.extend(fds.control);
    keep.extend(ctx.plan.map(Plan::idmapped_fds).unwrap_or_default());
    sys::close_all_from_except(3, &keep);

    let mut go = [0u8; 1];
    // SAFETY: reading one byte into a local buffer.
    let n = unsafe { libc::read(fds.sync, go.as_mut_ptr() as *mut libc::c_void, 1) };
    if n != 1 {
        sys::exit_now(125); // the supervisor is gone or gave up
    }
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(fds.sync) };

    // Join the cgroups before anything else runs (the supervisor wrote the
    // uid map and put us in the v2 groups before sending the go byte).
    if let Some(group) = ctx.cgroup {
        if let Err(e) = group.join_v1_self() {
            fail(
                fds.report,
                Layer::Cgroup,
                format!("cannot move the sandbox into its cgroup: {e}"),
                None,
            );
        }
    }

    match ctx.spec.isolation.level {
        IsolationLevel::Namespaces => init_main(&ctx),
        IsolationLevel::Process => workload_main(&ctx),
    }
}

fn init_main(ctx: &ChildContext<'_>) -> ! {
    let rfd = ctx.fds.report;
    settle_in(ctx);
    hand_over_proxy_listener(ctx);
    let scratch = ctx
        .plan
        .map(|plan| build_root(rfd, plan))
        .unwrap_or_default();
    // Nothing in the sandbox may read this process's memory, descriptors
    // or /proc/1/exe (which is the host's cordon binary).
    if !off(Switch::Dumpable) {
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    }

    if ctx.session {
        crate::session_init::serve(ctx);
    }
    let (workload, set) = start_workload(ctx);
    reap_until_the_workload_ends(ctx, workload, &set, scratch)
}

/// Take the sandbox's identity, enter a cgroup namespace (after the
/// supervisor moved us into the sandbox's groups, so that they become our
/// root), name the host and bring up loopback.
fn settle_in(ctx: &ChildContext<'_>) {
    let rfd = ctx.fds.report;
    if let Err(e) = crate::identity::become_sandbox_user(ctx.drop_groups) {
        fail(
            rfd,
            Layer::UserNamespace,
            format!(
                "cannot take the sandbox's identity (uid/gid 1000, no supplementary groups): {e}"
            ),
            None,
        );
    }
    // SAFETY: unshare with a constant flag; this process is single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } == -1 {
        let e = std::io::Error::last_os_error();
        fail(
            rfd,
            Layer::Cgroup,
            format!("cannot create a cgroup namespace: {e}"),
            None,
        );
    }
    if let Err(e) = rustix::system::sethostname(ctx.spec.hostname.as_bytes()) {
        fail(
            rfd,
            Layer::NetworkNamespace,
            format!("cannot set the hostname: {e}"),
            None,
        );
    }
    if let Err(e) = sys::loopback_up() {
        fail(
            rfd,
            Layer::NetworkNamespace,
            format!("cannot bring up loopback: {e}"),
            None,
        );
    }
}

/// With the proxy network, listen on the sandbox's loopback and hand the
/// listener to the supervisor, which serves it from outside.
fn hand_over_proxy_listener(ctx: &ChildContext<'_>) {
    let rfd = ctx.fds.report;
    if let (NetworkMode::Proxy, Some(control)) = (ctx.spec.network, ctx.fds.control) {
        let listener = match std::net::TcpListener::bind(("127.0.0.1", ctx.spec.proxy_port)) {
            Ok(l) => l,
            Err(e) => fail(
                rfd,
                Layer::NetworkNamespace,
                format!("cannot listen on 127.0.0.1:{}: {e}", ctx.spec.proxy_port),
                None,
            ),
        };
        use std::os::fd::{AsFd, BorrowedFd};
        // SAFETY: `control` is the socket the supervisor gave us; it stays
        // open for the duration of this call.
        let control_fd = unsafe { BorrowedFd::borrow_raw(control) };
        if let Err(e) = crate::fdpass::send_fd(control_fd, listener.as_fd()) {
            fail(
                rfd,
                Layer::NetworkNamespace,
                format!("cannot hand the proxy listener over: {e}"),
                None,
            );
        }
        drop(listener);
    }
}

/// Start the workload with the forwarded signals and SIGCHLD blocked (they
/// are read with `sigwaitinfo`); then give up the report pipe and the
/// control socket, which only the workload keeps.
fn start_workload(ctx: &ChildContext<'_>) -> (libc::pid_t, libc::sigset_t) {
    let rfd = ctx.fds.report;
    let mut wanted: Vec<libc::c_int> = FORWARDED.to_vec();
    wanted.push(libc::SIGCHLD);
    let set = match sys::block_signals(&wanted) {
        Ok(s) => s,
        Err(e) => fail(
            rfd,
            Layer::PidNamespace,
            format!("cannot block signals: {e}"),
            None,
        ),
    };
    let workload = match start_workload_process(ctx.spec, || workload_main(ctx)) {
        Ok(pid) => pid,
        Err(e) => fail(
            rfd,
            Layer::PidNamespace,
            format!("cannot start the workload: {e}"),
            None,
        ),
    };
    // Only the workload keeps the report pipe, so the supervisor sees
    // end-of-file exactly when it has exec'd; the same for the control
    // socket.
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(rfd);
        if let Some(control) = ctx.fds.control {
            libc::close(control);
        }
    }
    (workload, set)
}

/// Start the process that becomes the workload (`main` sets it up and
/// execs the command); its pid. It shares this process's memory until its
/// exec, this process waiting meanwhile (`sys::spawn_sharing_memory`),
/// so the exec frees no copy of it; `main` may capture by reference only
/// (what it would own is dropped by neither process) and finds its own
/// copies of this process's descriptors, as after a fork. A learn-mode
/// workload is forked: it makes its memory dumpable, a flag the shared
/// memory would keep for this process after the exec.
pub(crate) fn start_workload_process(
    spec: &Spec,
    main: impl FnOnce(),
) -> std::io::Result<libc::pid_t> {
    if spec.observe {
        return match sys::fork()? {
            Some(pid) => Ok(pid),
            None => {
                main();
                sys::exit_now(125)
            }
        };
    }
    sys::spawn_sharing_memory(main)
}

/// Forward signals to the workload's process group and reap orphans until
/// the workload ends; then report its status (and the scratch devices')
/// and leave, which kills everything else in the namespace.
fn reap_until_the_workload_ends(
    ctx: &ChildContext<'_>,
    workload: libc::pid_t,
    set: &libc::sigset_t,
    scratch: ScratchDevices,
) -> ! {
    loop {
        // SAFETY: `set` is a valid, initialised sigset_t.
        let sig = unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) };
        if sig == -1 {
            continue;
        }
        if sig == libc::SIGCHLD {
            // Reap everything; orphans are re-parented to us.
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                if pid == workload {
                    let mut msg = [0u8; 8];
                    msg[..4].copy_from_slice(&status.to_ne_bytes());
                    let scratch = scratch_state(ctx.spec.limits.file_size, scratch);
                    msg[4..].copy_from_slice(&scratch.to_ne_bytes());
                    let _ = sys::write_all_fd(ctx.fds.status, &msg);
                    // Leaving now kills everything else in the namespace.
                    sys::exit_now(0);
                }
            }
        } else {
            // SAFETY: kill(2) with integer arguments; the workload leads its
            // own process group.
            unsafe { libc::kill(-workload, sig) };
        }
    }
}

/// Build the sandbox's root; a failure is reported and ends the init.
fn build_root(rfd: RawFd, plan: &Plan) -> ScratchDevices {
    match plan.build() {
        Ok(devices) => devices,
        Err(e) => {
            let (layer, message, fix) = match e {
                crate::error::JailError::Setup {
                    layer,
                    message,
                    fix,
                } => (layer, message, fix),
                other => (Layer::Filesystem, other.to_string(), None),
            };
            report(
                rfd,
                &ChildReport::Setup {
                    layer,
                    message,
                    fix,
                },
            );
            sys::exit_now(125)
        }
    }
}

/// Bit of [`scratch_state`]: /tmp is full.
pub(crate) const SCRATCH_TMP_FULL: u32 = 1;
/// Bit of [`scratch_state`]: /dev/shm is full.
pub(crate) const SCRATCH_SHM_FULL: u32 = 2;
/// Bit of [`scratch_state`]: a file in scratch is exactly at the file-size
/// limit.
pub(crate) const SCRATCH_FILE_AT_LIMIT: u32 = 4;

/// Most directory entries looked at for files at the size limit (the
/// default /tmp holds at most 16384 inodes).
const SCRATCH_WALK_BUDGET: usize = 40_000;

/// The sandbox's own tmpfs mounts when the workload ends: full (no blocks
/// or no inodes left), and whether one holds a regular file of exactly
/// `file_size` bytes. The kernel cuts a `write` that would cross
/// RLIMIT_FSIZE at the limit and sends SIGXFSZ on the next one, so such a
/// file is what a breach leaves behind, whichever process hit it (only the
/// workload's own death by SIGXFSZ is visible to the supervisor).
fn scratch_state(file_size: Option<u64>, devices: ScratchDevices) -> u32 {
    // Only the sandbox's own tmpfs at each path (a declared path bound
    // over it shows the host's files there, which are not the sandbox's).
    let own = [
        (SCRATCH_TMP_FULL, "/tmp", devices.tmp),
        (SCRATCH_SHM_FULL, "/dev/shm", devices.shm),
    ]
    .into_iter()
    .filter_map(|(bit, path, device)| {
        let device = device?;
        std::fs::metadata(path)
            .is_ok_and(|m| m.dev() == device)
            .then_some((bit, path, device))
    });
    let mut bits = 0;
    let mut budget = SCRATCH_WALK_BUDGET;
    for (bit, path, device) in own {
        if let Ok(st) = rustix::fs::statvfs(path) {
            if st.f_bavail == 0 || st.f_favail == 0 {
                bits |= bit;
            }
        }
        if let Some(limit) = file_size.filter(|l| *l > 0) {
            if file_of_size(Path::new(path), device, limit, &mut budget) {
                bits |= SCRATCH_FILE_AT_LIMIT;
            }
        }
    }
    bits
}

/// Whether `dir` holds (at any depth, symlinks not followed, staying on
/// the filesystem `dev`: a directory bound or staged under /tmp is not
/// scratch, and may hold far more entries) a regular file of exactly
/// `size` bytes, looking at no more than `budget` entries.
fn file_of_size(dir: &Path, dev: u64, size: u64, budget: &mut usize) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_file() {
            if entry.metadata().is_ok_and(|m| m.len() == size) {
                return true;
            }
        } else if kind.is_dir()
            && entry.metadata().is_ok_and(|m| m.dev() == dev)
            && file_of_size(&entry.path(), dev, size, budget)
        {
            return true;
        }
    }
    false
}

pub(crate) fn workload_main(ctx: &ChildContext<'_>) -> ! {
    let rfd = ctx.fds.report;
    let spec = ctx.spec;
    sys::reset_signals();
    if ctx.spec.isolation.level == IsolationLevel::Namespaces && ctx.fds.status >= 0 {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(ctx.fds.status) };
    }
    // A new session: no controlling terminal to push input into.
    if !off(Switch::Session) {
        let _ = rustix::process::setsid();
    }

    if spec.stdin == StdinMode::Null {
        match rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => {
                use std::os::fd::IntoRawFd;
                let raw = fd.into_raw_fd();
                // SAFETY: dup2 onto stdin, then close the spare descriptor.
                unsafe {
                    libc::dup2(raw, 0);
                    libc::close(raw);
                }
            }
            Err(e) => fail(
                rfd,
                Layer::Filesystem,
                format!("cannot open /dev/null: {e}"),
                None,
            ),
        }
    }

    if let Err(r) = limit_and_enter_cwd(ctx) {
        fail_with(rfd, r);
    }
    match confine(ctx) {
        Ok(landlock) => landlock.iter().for_each(|r| report(rfd, r)),
        Err(r) => fail_with(rfd, r),
    }
    exec_command(ctx, |ctx| seccomp(ctx).err())
}

/// A setup failure as the report pipe carries it.
fn setup(layer: Layer, message: String, fix: Option<&str>) -> ChildReport {
    ChildReport::Setup {
        layer,
        message,
        fix: fix.map(str::to_owned),
    }
}

fn fail_with(fd: RawFd, r: ChildReport) -> ! {
    report(fd, &r);
    sys::exit_now(125)
}

/// The rlimits, then the working directory.
pub(crate) fn limit_and_enter_cwd(ctx: &ChildContext<'_>) -> Result<(), ChildReport> {
    apply_rlimits(ctx).map_err(|e| {
        setup(
            Layer::Rlimits,
            format!("cannot set resource limits: {e}"),
            None,
        )
    })?;
    rustix::process::chdir(&ctx.spec.cwd).map_err(|e| {
        setup(
            Layer::Filesystem,
            format!(
                "working directory {} is not available in the sandbox: {e}",
                ctx.spec.cwd.display()
            ),
            Some("bind the directory (--ro/--rw) or choose another --cwd"),
        )
    })
}

/// Landlock (which also sets no_new_privs), no_new_privs, and no
/// capability left. Returns the Landlock line for the report.
pub(crate) fn confine(ctx: &ChildContext<'_>) -> Result<Option<ChildReport>, ChildReport> {
    let landlock = if off(Switch::Landlock) {
        None
    } else if let Some(prepared) = ctx.landlock {
        Some(prepared.restrict_self())
    } else {
        let (rules, restrict_tcp, connect_port) = landlock_inputs(ctx);
        Some(landlock_rules::apply(
            &rules,
            restrict_tcp,
            connect_port,
            true,
        ))
    };
    let line = match landlock {
        None => None,
        Some(Ok(applied)) => {
            if applied.abi == 0 && !ctx.landlock_optional {
                return Err(setup(
                    Layer::Landlock,
                    "the kernel does not provide Landlock".into(),
                    Some("boot a kernel with CONFIG_SECURITY_LANDLOCK=y and 'landlock' in the lsm= list, or accept its absence in the profile"),
                ));
            }
            Some(ChildReport::Landlock {
                abi: applied.abi,
                fully: applied.fully,
            })
        }
        Some(Err(e)) => {
            return Err(setup(
                Layer::Landlock,
                format!("cannot apply Landlock rules: {e}"),
                None,
            ))
        }
    };
    if !off(Switch::NoNewPrivs) {
        rustix::thread::set_no_new_privs(true).map_err(|e| {
            setup(
                Layer::Capabilities,
                format!("cannot set no_new_privs: {e}"),
                None,
            )
        })?;
    }
    if !off(Switch::CapDrop) {
        sys::drop_all_capabilities().map_err(|e| {
            setup(
                Layer::Capabilities,
                format!("cannot drop capabilities: {e}"),
                None,
            )
        })?;
    }
    Ok(line)
}

/// The seccomp filter, the last layer before exec; with user
/// notification, its listener goes to the supervisor.
pub(crate) fn seccomp(ctx: &ChildContext<'_>) -> Result<(), ChildReport> {
    if off(Switch::Seccomp) {
        return Ok(());
    }
    let notify = ctx.seccomp.notify && ctx.fds.control.is_some();
    let listener = sys::seccomp_install(&ctx.seccomp.instructions, notify).map_err(|e| {
        setup(
            Layer::Seccomp,
            format!("cannot install the seccomp filter: {e}"),
            Some("use a kernel built with CONFIG_SECCOMP_FILTER=y (5.0+ for user notification)"),
        )
    })?;
    if let (Some(listener), Some(control)) = (listener, ctx.fds.control) {
        // The supervisor answers the refused calls and records them.
        use std::os::fd::{AsFd, BorrowedFd};
        // SAFETY: the control socket is open until exec.
        let control = unsafe { BorrowedFd::borrow_raw(control) };
        crate::fdpass::send_fd(control, listener.as_fd()).map_err(|e| {
            setup(
                Layer::Seccomp,
                format!("cannot hand the seccomp listener over: {e}"),
                None,
            )
        })?;
    }
    Ok(())
}

/// Exec `spec.argv` (looked up in the sandbox's PATH) with `spec.env`;
/// `last` runs just before, once everything exec needs is prepared and
/// every descriptor from 3 up is close-on-exec (the seccomp filter goes on
/// there). Reports why exec failed.
pub(crate) fn exec_command(
    ctx: &ChildContext<'_>,
    last: impl FnOnce(&ChildContext<'_>) -> Option<ChildReport>,
) -> ! {
    let (rfd, spec) = (ctx.fds.report, ctx.spec);
    let Some(program) = spec.argv.first() else {
        fail(rfd, Layer::Filesystem, "empty command".into(), None);
    };
    let to_c = |s: &str| CString::new(s).unwrap_or_default();
    let argv: Vec<CString> = spec.argv.iter().map(|a| to_c(a)).collect();
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect();
    let candidates = candidates(program, spec);
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    if let Err(e) = sys::cloexec_from(3) {
        fail(
            rfd,
            Layer::Filesystem,
            format!("cannot close inherited descriptors: {e}"),
            None,
        );
    }
    if spec.observe {
        // Learn mode: the supervisor reads each observed call's path from
        // the caller's memory. This process was forked from the
        // undumpable init and its memory belongs to the host's user
        // namespace, so without root that read is refused for the execs
        // below, and the program itself would be missing from the
        // profile. Dumpable lets the caller's own user read it; nothing
        // else runs in the sandbox yet, and exec replaces this memory.
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    }
    if let Some(r) = last(ctx) {
        fail_with(rfd, r);
    }
    // Set up on the one CPU its starter is held on; the command itself
    // may use every CPU the caller may (crate::setup_cpu).
    if let Some(cpus) = ctx.cpus {
        if let Err(e) = crate::setup_cpu::give_back(cpus) {
            fail(
                rfd,
                Layer::Cgroup,
                format!("cannot give the command back the CPUs it may use: {e}"),
                Some(
                    "run it again: this happens only when the CPUs cordon may use changed \
                     while the sandbox was set up (taskset, a cpuset, a CPU taken offline)",
                ),
            );
        }
    }

    let mut errno = libc::ENOENT;
    for path in &candidates {
        // SAFETY: `path`, `argv_ptrs` and `env_ptrs` are NUL-terminated
        // arrays of valid C strings that live until exec or failure.
        unsafe { libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT);
        // Keep looking on "not here"; remember a more telling error.
        if e != libc::ENOENT && e != libc::ENOTDIR {
            errno = e;
        }
        if e != libc::ENOENT && e != libc::ENOTDIR && e != libc::EACCES {
            break;
        }
    }
    report(
        rfd,
        &ChildReport::Exec {
            program: program.clone(),
            errno,
        },
    );
    sys::exit_now(if errno == libc::ENOENT { 127 } else { 126 })
}

/// Where to look for the program: itself if it has a slash, else each
/// directory of the sandbox's PATH.
fn candidates(program: &str, spec: &Spec) -> Vec<CString> {
    if program.contains('/') {
        return CString::new(program).into_iter().collect();
    }
    let path = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(crate::spec::DEFAULT_PATH, |(_, v)| v.as_str());
    path.split(':')
        .filter(|d| !d.is_empty())
        .filter_map(|d| CString::new(format!("{d}/{program}")).ok())
        .collect()
}

/// The workload's Landlock ruleset, built now to be enforced later by
/// every exec of a session (`None`: it cannot be kept; each workload then
/// builds its own).
pub(crate) fn prepare_landlock(ctx: &ChildContext<'_>) -> Option<landlock_rules::Prepared> {
    let (rules, restrict_tcp, connect_port) = landlock_inputs(ctx);
    landlock_rules::prepare(&rules, restrict_tcp, connect_port, true)
        .ok()
        .filter(landlock_rules::Prepared::keepable)
}

/// The path rules, whether TCP is handled, and the one port it may connect to.
fn landlock_inputs(ctx: &ChildContext<'_>) -> (Vec<PathRule>, bool, Option<u16>) {
    let (restrict_tcp, connect_port) = match ctx.spec.network {
        NetworkMode::None => (true, None),
        NetworkMode::Loopback => (false, None),
        NetworkMode::Proxy => (true, Some(ctx.spec.proxy_port)),
    };
    (landlock_rules_for(ctx), restrict_tcp, connect_port)
}

fn landlock_rules_for(ctx: &ChildContext<'_>) -> Vec<PathRule> {
    let rule = |p: &str, access| PathRule {
        path: PathBuf::from(p),
        access,
    };
    let mut rules = Vec::new();
    match ctx.plan {
        Some(plan) => {
            for (path, writable, _) in plan.landlock_paths() {
                rules.push(PathRule {
                    path,
                    access: if writable {
                        PathAccess::Full
                    } else {
                        PathAccess::ReadExec
                    },
                });
            }
            // Listing the (read-only, synthesized) root shows only mount points.
            rules.push(rule("/", PathAccess::ListDir));
            rules.push(rule("/tmp", PathAccess::Full));
            rules.push(rule("/dev/shm", PathAccess::Full));
            rules.push(rule("/dev", PathAccess::ReadWriteFiles));
            rules.push(rule("/proc", PathAccess::ReadWriteFiles));
        }
        None => {
            // Process level: the host tree is visible, so Landlock is the
            // filesystem boundary.
            for dir in [
                "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
            ] {
                rules.push(rule(dir, PathAccess::ReadExec));
            }
            for name in crate::etc::HOST_ETC {
                rules.push(PathRule {
                    path: Path::new("/etc").join(name),
                    access: PathAccess::ReadExec,
                });
            }
            for b in &ctx.spec.binds {
                rules.push(PathRule {
                    path: b.path.clone(),
                    access: if b.writable {
                        PathAccess::Full
                    } else {
                        PathAccess::ReadExec
                    },
                });
            }
            for node in [
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
            ] {
                rules.push(rule(node, PathAccess::ReadWriteFiles));
            }
            rules.push(rule("/proc/self", PathAccess::ReadWriteFiles));
            if let Some((_, tmp)) = ctx.spec.env.iter().find(|(k, _)| k == "TMPDIR") {
                rules.push(PathRule {
                    path: PathBuf::from(tmp),
                    access: PathAccess::Full,
                });
            }
        }
    }
    rules
}

fn set_rlimit(resource: sys::RlimitResource, soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit with a valid rlimit struct.
    if unsafe { libc::setrlimit(resource, &lim) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A limit as it is now.
fn get_rlimit(resource: sys::RlimitResource) -> std::io::Result<libc::rlimit> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a valid rlimit struct.
    if unsafe { libc::getrlimit(resource, &mut cur) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cur)
}

/// The processes and threads of this process's real user on the host,
/// as RLIMIT_NPROC counts them outside a user namespace: `Threads:` summed
/// over every `/proc/PID/status` whose real uid is ours. A moment's count:
/// the user's processes that start or end later move what is left for the
/// sandbox. 0 when /proc cannot be read (the limit is then the bare one).
fn tasks_of_this_user() -> u64 {
    let uid = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0u64;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        // A process that ended meanwhile has no status to read.
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            tasks += field("Threads:").unwrap_or(1);
        }
    }
    tasks
}

/// Lower a limit, never raising it above what we were given.
fn lower_rlimit(resource: sys::RlimitResource, value: u64) -> std::io::Result<()> {
    let value = value.min(get_rlimit(resource)?.rlim_max);
    set_rlimit(resource, value, value)
}

fn apply_rlimits(ctx: &ChildContext<'_>) -> std::io::Result<()> {
    let l = &ctx.spec.limits;
    // RLIMIT_CORE=1 disables core files and piped core handlers alike.
    lower_rlimit(libc::RLIMIT_CORE, 1)?;
    if let Some(cpu) = l.cpu {
        // Soft limit: SIGXCPU (reported as cpu_limit); one second later the
        // hard limit kills a process that catches or ignores it.
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills a valid rlimit struct.
        if unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut cur) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let soft = cpu.as_secs().max(1).min(cur.rlim_max);
        set_rlimit(
            libc::RLIMIT_CPU,
            soft,
            soft.saturating_add(1).min(cur.rlim_max),
        )?;
    }
    if let Some(n) = l.open_files {
        lower_rlimit(libc::RLIMIT_NOFILE, n)?;
    }
    if let Some(n) = l.file_size {
        lower_rlimit(libc::RLIMIT_FSIZE, n)?;
    }
    if let Some(n) = l.pids {
        // Counted per user in the sandbox's own user namespace; a second
        // layer under the cgroup, the only one without it. Under a cgroup
        // it sits one above, so that the cgroup refuses first and the
        // breach is counted (fork checks the rlimit before the cgroup).
        if ctx.rlimit_pids {
            // Without a user namespace of the sandbox's own (the process
            // level) the kernel counts every process and thread of the
            // caller's user on the host against it: the sandbox gets the
            // limit on top of what the user runs now, or a user with more
            // than the limit running elsewhere could not fork at all.
            let others = match ctx.spec.isolation.level {
                IsolationLevel::Namespaces => 0,
                IsolationLevel::Process => tasks_of_this_user(),
            };
            lower_rlimit(libc::RLIMIT_NPROC, n.saturating_add(others))?;
        } else if ctx.spec.isolation.level == IsolationLevel::Namespaces {
            lower_rlimit(libc::RLIMIT_NPROC, n.saturating_add(1))?;
        }
    }
    if let (Some(m), true) = (l.memory, ctx.rlimit_memory) {
        lower_rlimit(libc::RLIMIT_AS, m)?;
    }
    // An exec's own limits come on top and only tighten: below the
    // session's rlimits whatever its cgroup allows.
    if let Some(n) = ctx.exec_limits.pids {
        tighten_rlimit(libc::RLIMIT_NPROC, n)?;
    }
    if let Some(m) = ctx.exec_limits.memory {
        tighten_rlimit(libc::RLIMIT_AS, m)?;
    }
    crate::budgets::apply_rlimits(&l.kernel, lower_rlimit)
}

/// Set a soft limit (at most the hard one), leaving the hard limit as
/// it is, so that a later call may raise it again.
pub(crate) fn set_soft_rlimit(resource: sys::RlimitResource, value: u64) -> std::io::Result<()> {
    let cur = get_rlimit(resource)?;
    set_rlimit(resource, value.min(cur.rlim_max), cur.rlim_max)
}

/// Lower both the soft and the hard limit to at most `value`, never
/// raising either.
fn tighten_rlimit(resource: sys::RlimitResource, value: u64) -> std::io::Result<()> {
    let cur = get_rlimit(resource)?;
    set_rlimit(resource, value.min(cur.rlim_cur), value.min(cur.rlim_max))
}
