//! Where the server keeps its socket and its state.

use std::path::PathBuf;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The default socket: `/run/cordon/cordon.sock` for root; else
/// `$XDG_RUNTIME_DIR/cordon/cordon.sock`, else `/run/user/UID/cordon/`
/// when that runtime directory exists, else `~/.local/state/cordon/`.
pub fn default_socket() -> PathBuf {
    if is_root() {
        return PathBuf::from("/run/cordon/cordon.sock");
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return p.join("cordon").join("cordon.sock");
        }
    }
    let uid = rustix::process::getuid().as_raw();
    let run_user = PathBuf::from(format!("/run/user/{uid}"));
    if run_user.is_dir() {
        return run_user.join("cordon").join("cordon.sock");
    }
    state_dir().join("cordon.sock")
}

/// The state directory: `$XDG_STATE_HOME/cordon`, else
/// `~/.local/state/cordon` (root: `/var/lib/cordon`). `CORDON_STATE_DIR`
/// overrides it.
pub fn state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("CORDON_STATE_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(x);
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return p.join("cordon");
        }
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("cordon");
    }
    if is_root() {
        return PathBuf::from("/var/lib/cordon");
    }
    PathBuf::from("/tmp").join(format!("cordon-{}", rustix::process::getuid().as_raw()))
}

/// The token file.
pub fn tokens_file() -> PathBuf {
    state_dir().join("tokens.json")
}

/// The approvals store.
pub fn approvals_file() -> PathBuf {
    state_dir().join("approvals.db")
}
