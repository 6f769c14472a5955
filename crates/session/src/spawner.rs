//! The spawner: a single-threaded process, forked before the caller
//! starts any thread, that makes sandboxes on request and tears them down.
//!
//! Protocol (a unix stream socket; one request at a time): each message is
//! a 4-byte little-endian length and that much JSON. Replies to `Create`
//! carry the sandbox's pidfd, the init's control socket and, in proxy
//! mode, the proxy listener as SCM_RIGHTS on their first byte.

use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cordon_jail::session::{start_session, GroupSweeper, LiveBind, LiveSandbox};
use cordon_jail::{Enforcement, JailError, Layer, Spec};
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{Result, SessionError};

/// Largest message on the spawner's socket (a spec with file overlays
/// such as a CA bundle fits easily).
const MAX_FRAME: usize = 16 << 20;

/// How often the spawner looks for sandboxes whose init died.
const REAP_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    Create {
        id: String,
        spec: Box<Spec>,
        max_execs: u64,
    },
    Destroy {
        id: String,
    },
    /// Give a pooled sandbox its request's binds and limits.
    Claim {
        id: String,
        spec: Box<Spec>,
    },
    /// Bind a host path into a running sandbox (a widening).
    AttachLive {
        id: String,
        bind: LiveBind,
    },
    /// Take a live bind out again.
    DetachLive {
        id: String,
        path: PathBuf,
    },
    /// Set the sandbox's cgroup limits (`None`: unlimited).
    SetLimits {
        id: String,
        memory: Option<u64>,
        pids: Option<u64>,
    },
}

/// A sandbox the spawner built, as the engine receives it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Created {
    pub(crate) pid: i32,
    pub(crate) proxy: bool,
    pub(crate) enforcement: Enforcement,
    /// Memory is RLIMIT_AS, no memory cgroup.
    pub(crate) memory_by_rlimit: bool,
    pub(crate) cgroup_dirs: Vec<PathBuf>,
    pub(crate) pipe_owner: Option<(u32, u32)>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// Followed by the fds: pidfd, control socket, proxy listener (when
    /// `proxy`).
    Created(Box<Created>),
    Failed {
        layer: Option<Layer>,
        message: String,
        fix: Option<String>,
    },
    Destroyed {
        groups_removed: bool,
    },
    Claimed {
        config: cordon_jail::session::LateConfig,
    },
    /// A live bind is attached; later execs' Landlock must know `bind`.
    Attached {
        bind: cordon_jail::session::LateBind,
    },
    /// A detach or a limit change is done.
    Done,
}

/// Handle to the spawner process: the engine's end of its socket.
#[derive(Debug)]
pub struct Spawner {
    pub(crate) socket: UnixStream,
    pub(crate) pid: i32,
}

impl Spawner {
    /// Fork the spawner. Call this before any other thread exists (before
    /// the tokio runtime is built): the kernel refuses user namespaces to
    /// a multi-threaded process, and a fork of one may deadlock.
    pub fn fork() -> Result<Spawner> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| SessionError::io("socketpair", e))?;
        let parent = std::process::id() as i32;
        // The helper keeps only its end (ours is closed there, so the
        // spawner sees end-of-file when the engine's process is gone).
        let pid = cordon_jail::session::fork_helper(&[theirs.as_fd()], || serve(&theirs, parent))?;
        drop(theirs);
        Ok(Spawner { socket: ours, pid })
    }

    /// The spawner's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// The spawner's main loop. Returns the exit status.
fn serve(socket: &UnixStream, parent: i32) -> i32 {
    if !cordon_jail::session::die_with_parent(parent) {
        return 0;
    }
    // stdin onto /dev/null, so no descriptor received later can land on 0.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
    }
    // Removes every group this process made if it dies, even by SIGKILL.
    let _sweeper = match GroupSweeper::start() {
        Ok(sweeper) => Some(sweeper),
        Err(e) => {
            // Not silent: without it, a SIGKILL of the server leaves the
            // sandboxes' cgroups until the next start sweeps stale ones.
            eprintln!(
                "cordon: cannot start the cgroup sweeper ({e}); if this server is killed, its sandboxes' cgroups stay until the next start removes them"
            );
            None
        }
    };
    let mut live: HashMap<String, LiveSandbox> = HashMap::new();
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &socket,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec::try_from(REAP_INTERVAL).ok();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => {
                reap_dead(&mut live);
                continue;
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
        let request: Request = match read_frame(socket) {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => break,
        };
        if handle(socket, request, &mut live).is_err() {
            break;
        }
    }
    // The engine is gone: nothing of ours may outlive it.
    for (_, mut sandbox) in live.drain() {
        sandbox.end();
    }
    0
}

fn reap_dead(live: &mut HashMap<String, LiveSandbox>) {
    for sandbox in live.values_mut() {
        if sandbox.exited() {
            // Idempotent: removes the groups now; the entry stays until
            // the engine's Destroy.
            sandbox.end();
        }
    }
}

fn handle(
    socket: &UnixStream,
    request: Request,
    live: &mut HashMap<String, LiveSandbox>,
) -> io::Result<()> {
    match request {
        Request::Create {
            id,
            spec,
            max_execs,
        } => match start_session(&spec, max_execs) {
            Ok(mut sandbox) => {
                let pidfd = rustix::io::fcntl_dupfd_cloexec(sandbox.pidfd(), 3)?;
                let control = sandbox
                    .take_control()
                    .ok_or_else(|| io::Error::other("no control socket"))?;
                let proxy = sandbox.take_proxy_listener();
                let reply = Reply::Created(Box::new(Created {
                    pid: sandbox.pid(),
                    proxy: proxy.is_some(),
                    enforcement: sandbox.enforcement().clone(),
                    memory_by_rlimit: sandbox.memory_by_rlimit(),
                    cgroup_dirs: sandbox.cgroup_dirs(),
                    pipe_owner: sandbox.pipe_owner(),
                }));
                let mut fds: Vec<BorrowedFd<'_>> = vec![pidfd.as_fd(), control.as_fd()];
                if let Some(p) = &proxy {
                    fds.push(p.as_fd());
                }
                let sent = write_frame(socket, &reply, &fds);
                live.insert(id, sandbox);
                sent
            }
            Err(e) => write_frame(socket, &failed(e), &[]),
        },
        Request::Claim { id, spec } => {
            let reply = on_live(live, &id, |s| {
                s.claim(&spec).map(|config| Reply::Claimed { config })
            });
            write_frame(socket, &reply, &[])
        }
        Request::AttachLive { id, bind } => {
            let reply = on_live(live, &id, |s| {
                s.attach_live(&bind).map(|bind| Reply::Attached { bind })
            });
            write_frame(socket, &reply, &[])
        }
        Request::DetachLive { id, path } => {
            let reply = on_live(live, &id, |s| s.detach_live(&path).map(|()| Reply::Done));
            write_frame(socket, &reply, &[])
        }
        Request::SetLimits { id, memory, pids } => {
            let reply = on_live(live, &id, |s| {
                s.set_limits(memory, pids).map(|()| Reply::Done)
            });
            write_frame(socket, &reply, &[])
        }
        Request::Destroy { id } => {
            let groups_removed = live.remove(&id).is_none_or(|mut s| s.end().groups_removed);
            write_frame(socket, &Reply::Destroyed { groups_removed }, &[])
        }
    }
}

/// Do `f` to sandbox `id`; its error, or a missing sandbox, as a reply.
fn on_live(
    live: &mut HashMap<String, LiveSandbox>,
    id: &str,
    f: impl FnOnce(&mut LiveSandbox) -> std::result::Result<Reply, JailError>,
) -> Reply {
    match live.get_mut(id) {
        Some(sandbox) => f(sandbox).unwrap_or_else(failed),
        None => Reply::Failed {
            layer: None,
            message: format!("no sandbox {id}"),
            fix: None,
        },
    }
}

fn failed(e: JailError) -> Reply {
    match e {
        JailError::Setup {
            layer,
            message,
            fix,
        } => Reply::Failed {
            layer: Some(layer),
            message,
            fix,
        },
        other => Reply::Failed {
            layer: None,
            message: other.to_string(),
            fix: None,
        },
    }
}

/// Write one frame; `fds` ride on its first byte.
pub(crate) fn write_frame(
    socket: &UnixStream,
    message: &impl Serialize,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "message too large",
        ));
    }
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors"));
    }
    let sent = loop {
        match sendmsg(
            socket,
            &[IoSlice::new(&frame)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut writer = socket;
    writer.write_all(&frame[sent..])
}

/// Read one frame and the descriptors on it; `None` at end-of-file.
pub(crate) fn read_frame_with_fds<T: DeserializeOwned>(
    socket: &UnixStream,
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < header.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let msg = match recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut header[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => other?,
        };
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if msg.bytes == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += msg.bytes;
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut body = vec![0u8; len];
    let mut reader = socket;
    reader.read_exact(&mut body)?;
    let message =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((message, fds)))
}

fn read_frame<T: DeserializeOwned>(socket: &UnixStream) -> io::Result<Option<T>> {
    Ok(read_frame_with_fds(socket)?.map(|(m, _)| m))
}
