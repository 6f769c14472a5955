//! The engine's end of a session init's control socket: orders out,
//! replies matched back to the exec that waits for them.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use cordon_jail::session::{recv_message, send_message, InitOrder, InitReply};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use crate::error::{Result, SessionError};

/// Where an order's reply (and the descriptors it carries) goes.
type Waiter = oneshot::Sender<(InitReply, Vec<OwnedFd>)>;

#[derive(Debug)]
pub(crate) struct Control {
    socket: AsyncFd<OwnedFd>,
    waiting: Mutex<HashMap<u64, Waiter>>,
    pub(crate) max_execs: usize,
    /// Ids of orders that are not execs (counting down from the top, far
    /// from the exec ids counting up).
    next_internal_id: std::sync::atomic::AtomicU64,
}

impl Control {
    /// Wrap the socket and start reading replies.
    pub(crate) fn new(socket: OwnedFd, max_execs: usize) -> Result<Arc<Control>> {
        rustix::io::ioctl_fionbio(&socket, true)
            .map_err(|e| SessionError::io("make the control socket non-blocking", e.into()))?;
        // AsyncFd owns the descriptor, so it cannot be closed while
        // registered (the I/O-safety condition of `AsyncFd::register`).
        #[allow(deprecated)]
        let socket = AsyncFd::new(socket);
        let control = Arc::new(Control {
            socket: socket.map_err(|e| SessionError::io("watch the control socket", e))?,
            waiting: Mutex::new(HashMap::new()),
            max_execs,
            next_internal_id: std::sync::atomic::AtomicU64::new(u64::MAX),
        });
        let reader = Arc::downgrade(&control);
        tokio::spawn(async move {
            while let Some(control) = reader.upgrade() {
                if !control.read_one().await {
                    break;
                }
            }
        });
        Ok(control)
    }

    /// Read one reply and hand it to its waiter; false once the socket is
    /// closed.
    async fn read_one(&self) -> bool {
        let Ok(mut guard) = self.socket.readable().await else {
            return false;
        };
        match guard.try_io(|fd| recv_message::<InitReply>(fd.get_ref().as_fd())) {
            Err(_would_block) => true,
            Ok(Ok(Some((reply, fds)))) => {
                let id = match &reply {
                    InitReply::Started { id, .. }
                    | InitReply::Refused { id, .. }
                    | InitReply::Configured { id }
                    | InitReply::Root { id } => *id,
                };
                if let Some(tx) = self.waiting.lock().ok().and_then(|mut w| w.remove(&id)) {
                    let _ = tx.send((reply, fds));
                }
                true
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                // The init is gone: nobody will answer.
                if let Ok(mut w) = self.waiting.lock() {
                    w.clear();
                }
                false
            }
        }
    }

    /// Tell the init the binds and limits later execs follow (a claimed
    /// pooled sandbox's, a widened or narrowed session's).
    pub(crate) async fn configure(&self, config: cordon_jail::session::LateConfig) -> Result<()> {
        let id = self
            .next_internal_id
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        match self.exec(InitOrder::Configure { id, config }, &[]).await? {
            InitReply::Configured { .. } => Ok(()),
            other => Err(SessionError::Invalid(format!(
                "unexpected answer: {other:?}"
            ))),
        }
    }

    /// Have the init start the first exec ahead (a pooled sandbox).
    pub(crate) async fn start_ahead(&self) -> Result<()> {
        let id = self
            .next_internal_id
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        match self.exec(InitOrder::StartAhead { id }, &[]).await? {
            InitReply::Configured { .. } => Ok(()),
            other => Err(SessionError::Invalid(format!(
                "unexpected answer: {other:?}"
            ))),
        }
    }

    /// The sandbox's root, O_PATH, from the init (which opens its `/`).
    pub(crate) async fn open_root(&self) -> Result<OwnedFd> {
        let id = self
            .next_internal_id
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        match self.order(InitOrder::OpenRoot { id }, &[]).await? {
            (InitReply::Root { .. }, fds) => fds.into_iter().next().ok_or_else(|| {
                SessionError::Invalid("the init answered without the root's descriptor".into())
            }),
            (InitReply::Refused { message, .. }, _) => Err(SessionError::Invalid(message)),
            (other, _) => Err(SessionError::Invalid(format!(
                "unexpected answer: {other:?}"
            ))),
        }
    }

    /// Send an order with its descriptors and wait for the answer.
    pub(crate) async fn exec(&self, order: InitOrder, fds: &[BorrowedFd<'_>]) -> Result<InitReply> {
        self.order(order, fds).await.map(|(reply, _)| reply)
    }

    /// Send an order and wait for the answer and the descriptors it carries.
    async fn order(
        &self,
        order: InitOrder,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(InitReply, Vec<OwnedFd>)> {
        let id = match &order {
            InitOrder::Exec { id, .. }
            | InitOrder::Signal { id, .. }
            | InitOrder::Configure { id, .. }
            | InitOrder::OpenRoot { id }
            | InitOrder::StartAhead { id } => *id,
        };
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .map_err(|_| SessionError::Invalid("control state poisoned".into()))?
            .insert(id, tx);
        if let Err(e) = self.send(&order, fds).await {
            if let Ok(mut w) = self.waiting.lock() {
                w.remove(&id);
            }
            return Err(e);
        }
        rx.await
            .map_err(|_| SessionError::Ended("the sandbox's init is gone".into()))
    }

    /// Send an order that gets no answer.
    pub(crate) async fn send(&self, order: &InitOrder, fds: &[BorrowedFd<'_>]) -> Result<()> {
        loop {
            let mut guard = self
                .socket
                .writable()
                .await
                .map_err(|e| SessionError::io("control socket", e))?;
            match guard.try_io(|fd| send_message(fd.get_ref().as_fd(), order, fds)) {
                Err(_would_block) => continue,
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidInput => {
                    return Err(SessionError::Invalid(e.to_string()))
                }
                Ok(Err(e)) => {
                    return Err(SessionError::Ended(format!(
                        "the sandbox's init is gone: {e}"
                    )))
                }
            }
        }
    }

    /// Close the engine's side: the init leaves, ending the sandbox.
    pub(crate) fn close(&self) {
        let _ = rustix::net::shutdown(self.socket.get_ref(), rustix::net::Shutdown::Both);
    }
}
