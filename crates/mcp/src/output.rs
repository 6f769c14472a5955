//! Output cut to what a model's context can take: the head and the tail
//! of a long stream, with a note that says how much was left out and
//! where the whole of it is.

/// Bytes of one stream shown in a tool result.
pub const SHOWN_BYTES: usize = 16 * 1024;

/// Bytes of one stream an exec keeps at all (the rest is counted).
pub const KEPT_BYTES: u64 = 1 << 20;

/// One stream as a tool shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub text: String,
    /// Bytes left out of `text` (0: it is all there).
    pub cut_bytes: usize,
}

/// `data` as text, at most about `cap` bytes of it: the first and the
/// last half, joined by a marker naming what is missing.
pub fn cut(data: &[u8], cap: usize) -> Shown {
    if data.len() <= cap {
        return Shown {
            text: String::from_utf8_lossy(data).into_owned(),
            cut_bytes: 0,
        };
    }
    let half = cap / 2;
    let head = &data[..half];
    let tail = &data[data.len() - half..];
    let cut_bytes = data.len() - 2 * half;
    Shown {
        text: format!(
            "{}\n[... {cut_bytes} bytes cut ...]\n{}",
            String::from_utf8_lossy(head),
            String::from_utf8_lossy(tail)
        ),
        cut_bytes,
    }
}

/// The note for a stream that was cut: how much, where the whole is,
/// how to read it.
pub fn note(stream: &str, total: u64, dropped: u64, kept_at: Option<&str>) -> String {
    let mut note = format!(
        "{stream} was {total} bytes; the first and last {} bytes are shown.",
        SHOWN_BYTES / 2
    );
    match kept_at {
        Some(path) => note.push_str(&format!(
            " The whole {stream} is in the sandbox at {path}: read it in parts with sandbox_read_file (offset, max_bytes) or search it with sandbox_exec (grep, sed -n, tail)."
        )),
        None => note.push_str(" It could not be kept in the sandbox; run the command again with its output redirected to a file."),
    }
    if dropped > 0 {
        note.push_str(&format!(
            " A further {dropped} bytes beyond the {KEPT_BYTES} kept per stream were discarded; redirect the command's output to a file in the sandbox to keep all of it."
        ));
    }
    note
}

/// What an exec's output calls for (`cordon_plan::said`): where a sandbox
/// may write, and how a sandbox reaches a host, for the model to act on.
pub fn hints(said: &[cordon_plan::said::Said]) -> Vec<String> {
    use cordon_plan::said::Said;
    let mut out = Vec::new();
    if said.contains(&Said::ReadOnly) {
        out.push(
            "A write was refused as read-only: in a sandbox only /workspace (the default \
             working directory), /tmp and /dev/shm are writable."
                .to_owned(),
        );
    }
    if said.contains(&Said::NoNetwork) {
        out.push(
            "A host name could not be resolved: sandboxes have no DNS and reach only the hosts \
             given to sandbox_create as allow_net, through cordon's egress proxy (HTTPS_PROXY \
             and ALL_PROXY inside); a client that ignores those variables reaches no host."
                .to_owned(),
        );
    }
    if said.contains(&Said::NoMemory) {
        out.push(
            "An allocation was refused: the sandbox's memory limit may be too small for this \
             command; sandbox_create takes a larger memory (e.g. \"2GiB\", within what this \
             server allows)."
                .to_owned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_whole() {
        let s = cut(b"hello\n", 16);
        assert_eq!(s.text, "hello\n");
        assert_eq!(s.cut_bytes, 0);
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let data: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        let s = cut(&data, 20);
        assert!(s.text.starts_with("abcdefghij\n[... 80 bytes cut ...]\n"));
        assert!(s.text.ends_with(std::str::from_utf8(&data[90..]).unwrap()));
        assert_eq!(s.cut_bytes, 80);
    }
}
