//! A hint for the commonest surprise of a first run: a write refused
//! because the path is read-only in the sandbox. The command says
//! "Read-only file system" (EROFS) and nothing says which paths are
//! writable or how to make one so; cordon watches the output it relays
//! for that message and, at the end, names the writable paths and the flag.
//!
//! Only EROFS is watched: inside the sandbox it means one thing (a path
//! mounted read-only), where "Permission denied" or "No such file" have
//! many causes. Matched without the first letter's case: C libraries say
//! "Read-only file system", Node "EROFS: read-only file system".

use std::path::{Path, PathBuf};

use cordon_jail::Stream;
use memchr::memmem;

const NEEDLE: &[u8] = b"ead-only file system";

/// Whether the relayed output ever said "read-only file system", across
/// chunk boundaries.
#[derive(Debug, Default)]
pub struct ReadOnlyWatch {
    seen: bool,
    /// The end of the previous chunk of each stream, for a message split
    /// between two reads.
    tails: [Vec<u8>; 2],
}

impl ReadOnlyWatch {
    /// Look at one chunk of a stream.
    pub fn look(&mut self, stream: Stream, data: &[u8]) {
        if self.seen {
            return;
        }
        let idx = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        let tail = &mut self.tails[idx];
        let keep = NEEDLE.len() - 1;
        if !tail.is_empty() {
            let mut joined = std::mem::take(tail);
            joined.extend_from_slice(&data[..data.len().min(keep)]);
            if memmem::find(&joined, NEEDLE).is_some() {
                self.seen = true;
                return;
            }
        }
        if memmem::find(data, NEEDLE).is_some() {
            self.seen = true;
            return;
        }
        tail.clear();
        tail.extend_from_slice(&data[data.len().saturating_sub(keep)..]);
    }

    pub fn seen(&self) -> bool {
        self.seen
    }
}

/// The paths a command may write in the sandbox `spec` describes: its
/// private /tmp and /dev/shm (unless a declared path of the host is bound
/// there), the writable and staged binds, the workspace. None at the
/// `process` level, where nothing is mounted read-only (Landlock refuses
/// with EACCES) and the message came from the host's own mounts.
pub fn writable_paths(spec: &cordon_jail::Spec) -> Option<Vec<PathBuf>> {
    if spec.isolation.level != cordon_jail::IsolationLevel::Namespaces {
        return None;
    }
    let bound = |path: &str| spec.binds.iter().any(|b| b.path == Path::new(path));
    let scratch = ["/tmp", "/dev/shm"]
        .into_iter()
        .filter(|p| !bound(p))
        .map(PathBuf::from);
    let binds = spec
        .binds
        .iter()
        .filter(|b| b.writable)
        .map(|b| b.path.clone());
    let staged = spec.staged.iter().map(|s| s.lower.clone());
    Some(
        scratch
            .chain(binds)
            .chain(staged)
            .chain(spec.workspace.clone())
            .collect(),
    )
}

/// The hint: which paths are writable here, and how to make another so.
pub fn hint(writable: &[PathBuf]) -> String {
    let paths: Vec<String> = writable.iter().map(|p| p.display().to_string()).collect();
    let paths = match paths.as_slice() {
        [] => "no path is writable in this sandbox".to_owned(),
        [one] => format!("only {one} is writable in this sandbox"),
        _ => format!("only {} are writable in this sandbox", paths.join(", ")),
    };
    format!(
        "cordon: hint: a write was refused as \"read-only file system\": {paths}; give --rw PATH \
         to make a host path writable (--rw . for the working directory), or --stage DIR to keep \
         the writes aside for review"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: Stream = Stream::Stdout;
    const ERR: Stream = Stream::Stderr;

    fn watch(chunks: &[(Stream, &[u8])]) -> bool {
        let mut w = ReadOnlyWatch::default();
        for (stream, data) in chunks {
            w.look(*stream, data);
        }
        w.seen()
    }

    #[test]
    fn every_runtimes_wording_is_seen() {
        for said in [
            &b"sh: 1: cannot create out.txt: Read-only file system\n"[..],
            b"OSError: [Errno 30] Read-only file system: 'out.txt'\n",
            b"Error: EROFS: read-only file system, open 'out.txt'\n",
            b"Read-only file system (os error 30)",
        ] {
            assert!(watch(&[(ERR, said)]), "{}", String::from_utf8_lossy(said));
            assert!(watch(&[(OUT, said)]), "on stdout too");
        }
        assert!(!watch(&[
            (ERR, b"Permission denied\n"),
            (OUT, b"read-only\n")
        ]));
    }

    #[test]
    fn a_message_split_between_reads_is_seen_but_not_one_made_of_two_streams() {
        let msg = b"cannot create x: Read-only file system\n";
        for cut in 1..msg.len() {
            assert!(
                watch(&[(ERR, &msg[..cut]), (ERR, &msg[cut..])]),
                "cut at {cut}"
            );
        }
        assert!(!watch(&[(ERR, &msg[..20]), (OUT, &msg[20..])]));
        // A long chunk between the halves: only the last bytes are kept.
        let mut long = b"Read-only".to_vec();
        long.extend(std::iter::repeat_n(b'x', 100));
        assert!(!watch(&[(ERR, &long), (ERR, b" file system")]));
    }

    #[test]
    fn the_hint_names_the_writable_paths_and_the_flags() {
        let h = hint(&["/tmp", "/dev/shm", "/srv/out"].map(PathBuf::from));
        assert!(
            h.contains("only /tmp, /dev/shm, /srv/out are writable"),
            "{h}"
        );
        assert!(hint(&[PathBuf::from("/dev/shm")]).contains("only /dev/shm is writable"));
        assert!(hint(&[]).contains("no path is writable"));
        assert!(h.contains("--rw .") && h.contains("--stage"), "{h}");
    }
}
