//! File work done as the sandbox's user.
//!
//! A sandbox started by root runs as a host uid that is no one's; its
//! filesystems (the tmpfs root, /tmp) belong to its user namespace, where
//! host root is not mapped: the kernel refuses to create a file there for
//! root (EOVERFLOW), and root would bypass every permission the sandbox
//! has. So each operation runs on a thread of its own that drops to the
//! sandbox's ids first (Linux credentials are per thread; the thread ends
//! with the operation, so no other work ever runs with them). A server
//! that is not root shares its uid with the sandbox and works in place.

use rustix::fs::{Gid, Uid};
use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};

use super::{FilesError, FilesErrorKind};

/// Run `f` as the sandbox's user (`ids`: `Session::host_ids`), off the
/// async runtime's threads.
pub async fn as_sandbox_user<R, F>(ids: Option<(u32, u32)>, f: F) -> Result<R, FilesError>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R, FilesError> + Send + 'static,
{
    let Some((uid, gid)) = ids else {
        return tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(lost(e)));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cordon-files".into())
        .spawn(move || {
            let _ = tx.send(become_user(uid, gid).and_then(|()| f()));
        })
        .map_err(|e| {
            FilesError::new(
                FilesErrorKind::Io,
                format!("cannot start a files thread: {e}"),
            )
        })?;
    rx.await.unwrap_or_else(|_| {
        Err(FilesError::new(
            FilesErrorKind::Io,
            "the files thread ended early",
        ))
    })
}

/// This thread becomes `uid`/`gid` with no supplementary groups, for good.
fn become_user(uid: u32, gid: u32) -> Result<(), FilesError> {
    let fail = |what: &str, e: rustix::io::Errno| {
        FilesError::new(
            FilesErrorKind::Io,
            format!("cannot take the sandbox's {what} for a file operation: {e}"),
        )
    };
    set_thread_groups(&[]).map_err(|e| fail("groups", e))?;
    let g = Gid::from_raw(gid);
    set_thread_res_gid(g, g, g).map_err(|e| fail("gid", e))?;
    let u = Uid::from_raw(uid);
    set_thread_res_uid(u, u, u).map_err(|e| fail("uid", e))
}

fn lost(e: tokio::task::JoinError) -> FilesError {
    FilesError::new(FilesErrorKind::Io, format!("a file operation failed: {e}"))
}
