//! Random names: boundaries of code contexts, temporary files of writes.

use std::io;

/// `bytes` random bytes from the kernel, as lowercase hex.
pub(crate) fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    let mut filled = 0;
    while filled < buf.len() {
        filled +=
            rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
