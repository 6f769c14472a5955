//! Passing one descriptor over a unix socket (SCM_RIGHTS): the sandbox's
//! init creates the proxy listener inside the sandbox's network namespace
//! and hands it to the supervisor, so the supervisor never needs to enter
//! that namespace (which would take privileges it may not have).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

pub(crate) fn send_fd(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("control buffer too small"));
    }
    sendmsg(
        socket,
        &[IoSlice::new(b"L")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// Receive one descriptor; `None` when the peer closed without sending.
pub(crate) fn recv_fd(socket: impl AsFd) -> io::Result<Option<OwnedFd>> {
    Ok(recv_fd_from(socket)?.0)
}

/// Receive one descriptor and, when the receiving socket has `SO_PASSCRED`
/// set, the sender's pid as the kernel gives it (in this process's PID
/// namespace, whatever the sender claims).
pub(crate) fn recv_fd_from(socket: impl AsFd) -> io::Result<(Option<OwnedFd>, Option<u32>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let msg = loop {
        match recvmsg(
            &socket,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if msg.bytes == 0 {
        return Ok((None, None));
    }
    let (mut fd, mut sender) = (None, None);
    for message in control.drain() {
        match message {
            RecvAncillaryMessage::ScmRights(mut fds) if fd.is_none() => fd = fds.next(),
            RecvAncillaryMessage::ScmCredentials(cred) => {
                sender = u32::try_from(cred.pid.as_raw_nonzero().get()).ok();
            }
            _ => {}
        }
    }
    Ok((fd, sender))
}
