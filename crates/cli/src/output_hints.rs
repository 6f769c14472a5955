//! Hints for the commonest surprises of a first run, which the command's
//! own message names but does not explain: a write refused because the
//! path is read-only in the sandbox, and a host name that cannot be
//! resolved because the sandbox has no network. cordon watches the output
//! it relays for those messages and, at the end, says what the sandbox
//! allows and which flag changes it.
//!
//! Only messages that mean one thing inside the sandbox are watched:
//! EROFS (a path mounted read-only) and a failed name lookup (no DNS in
//! a sandbox without network), not "Permission denied" or "No such file",
//! which have many causes. Each needle leaves out its first letter, whose
//! case differs between runtimes ("Read-only file system" from C
//! libraries, "EROFS: read-only file system" from Node).

use std::path::{Path, PathBuf};

use cordon_jail::{NetworkMode, Stream};
use memchr::memmem;

/// What a command may say that deserves a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// A write refused with EROFS.
    ReadOnly,
    /// A host name that could not be resolved, or no route anywhere.
    NoNetwork,
}

const NEEDLES: &[(&[u8], Said)] = &[
    (b"ead-only file system", Said::ReadOnly),
    // curl; glibc's EAI_NONAME, EAI_AGAIN, EAI_NODATA; musl's EAI_NONAME;
    // Node's lookups; wget.
    (b"ould not resolve host", Said::NoNetwork),
    (b"ame or service not known", Said::NoNetwork),
    (b"emporary failure in name resolution", Said::NoNetwork),
    (b"o address associated with hostname", Said::NoNetwork),
    (b"ame does not resolve", Said::NoNetwork),
    (b"etaddrinfo ENOTFOUND", Said::NoNetwork),
    (b"etaddrinfo EAI_AGAIN", Said::NoNetwork),
    (b"nable to resolve host address", Said::NoNetwork),
    (b"etwork is unreachable", Said::NoNetwork),
];

/// The longest needle, less one: what a chunk's end must keep for a
/// message split between two reads.
fn tail_len() -> usize {
    NEEDLES.iter().map(|(n, _)| n.len()).max().unwrap_or(1) - 1
}

/// What the relayed output said, across chunk boundaries.
#[derive(Debug, Default)]
pub struct OutputWatch {
    read_only: bool,
    no_network: bool,
    /// The end of the previous chunk of each stream.
    tails: [Vec<u8>; 2],
}

impl OutputWatch {
    /// Look at one chunk of a stream.
    pub fn look(&mut self, stream: Stream, data: &[u8]) {
        if self.read_only && self.no_network {
            return;
        }
        let idx = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        let keep = tail_len();
        let mut tail = std::mem::take(&mut self.tails[idx]);
        if !tail.is_empty() {
            // The previous end joined to this start: only a message split
            // between them can be found here.
            tail.extend_from_slice(&data[..data.len().min(keep)]);
            self.find(&tail);
        }
        self.find(data);
        tail.clear();
        tail.extend_from_slice(&data[data.len().saturating_sub(keep)..]);
        self.tails[idx] = tail;
    }

    fn find(&mut self, text: &[u8]) {
        for (needle, said) in NEEDLES {
            if memmem::find(text, needle).is_some() {
                match said {
                    Said::ReadOnly => self.read_only = true,
                    Said::NoNetwork => self.no_network = true,
                }
            }
        }
    }

    pub fn said(&self, what: Said) -> bool {
        match what {
            Said::ReadOnly => self.read_only,
            Said::NoNetwork => self.no_network,
        }
    }
}

/// The hints the output calls for in the sandbox `spec` describes.
pub fn hints(watch: &OutputWatch, spec: &cordon_jail::Spec) -> Vec<String> {
    let mut out = Vec::new();
    if watch.said(Said::ReadOnly) {
        if let Some(writable) = writable_paths(spec) {
            out.push(read_only_hint(&writable));
        }
    }
    if watch.said(Said::NoNetwork) && spec.network != NetworkMode::Proxy {
        out.push(
            "cordon: hint: the command could not resolve or reach a host: this sandbox has no \
             network; give --allow-net HOST for each host it needs (reached through cordon's \
             egress proxy, which HTTPS_PROXY and ALL_PROXY name inside)"
                .to_owned(),
        );
    }
    out
}

/// The paths a command may write in the sandbox `spec` describes: its
/// private /tmp and /dev/shm (unless a declared path of the host is bound
/// there), the writable and staged binds, the workspace. None at the
/// `process` level, where nothing is mounted read-only (Landlock refuses
/// with EACCES) and the message came from the host's own mounts.
fn writable_paths(spec: &cordon_jail::Spec) -> Option<Vec<PathBuf>> {
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

/// Which paths are writable here, and how to make another so.
fn read_only_hint(writable: &[PathBuf]) -> String {
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

    fn watch(chunks: &[(Stream, &[u8])]) -> OutputWatch {
        let mut w = OutputWatch::default();
        for (stream, data) in chunks {
            w.look(*stream, data);
        }
        w
    }

    #[test]
    fn every_runtimes_wording_of_a_read_only_write_is_seen() {
        for said in [
            &b"sh: 1: cannot create out.txt: Read-only file system\n"[..],
            b"OSError: [Errno 30] Read-only file system: 'out.txt'\n",
            b"Error: EROFS: read-only file system, open 'out.txt'\n",
            b"Read-only file system (os error 30)",
        ] {
            let text = String::from_utf8_lossy(said);
            assert!(watch(&[(ERR, said)]).said(Said::ReadOnly), "{text}");
            assert!(
                watch(&[(OUT, said)]).said(Said::ReadOnly),
                "on stdout: {text}"
            );
            assert!(!watch(&[(ERR, said)]).said(Said::NoNetwork), "{text}");
        }
        let w = watch(&[(ERR, b"Permission denied\n"), (OUT, b"read-only\n")]);
        assert!(!w.said(Said::ReadOnly) && !w.said(Said::NoNetwork));
    }

    #[test]
    fn every_runtimes_wording_of_a_failed_lookup_is_seen() {
        for said in [
            &b"curl: (6) Could not resolve host: example.com\n"[..],
            b"urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>",
            b"socket.gaierror: [Errno -3] Temporary failure in name resolution",
            b"ssh: Could not resolve hostname example.com: No address associated with hostname",
            b"wget: bad address 'x': Name does not resolve",
            b"Error: getaddrinfo ENOTFOUND example.com",
            b"Error: getaddrinfo EAI_AGAIN registry.npmjs.org",
            b"wget: unable to resolve host address 'example.com'",
            b"connect: Network is unreachable",
        ] {
            let text = String::from_utf8_lossy(said);
            assert!(watch(&[(ERR, said)]).said(Said::NoNetwork), "{text}");
            assert!(!watch(&[(ERR, said)]).said(Said::ReadOnly), "{text}");
        }
    }

    #[test]
    fn a_message_split_between_reads_is_seen_but_not_one_made_of_two_streams() {
        let msg = b"cannot create x: Read-only file system\n";
        for cut in 1..msg.len() {
            let w = watch(&[(ERR, &msg[..cut]), (ERR, &msg[cut..])]);
            assert!(w.said(Said::ReadOnly), "cut at {cut}");
        }
        assert!(!watch(&[(ERR, &msg[..20]), (OUT, &msg[20..])]).said(Said::ReadOnly));
        // A long chunk between the halves: only the last bytes are kept.
        let mut long = b"Read-only".to_vec();
        long.extend(std::iter::repeat_n(b'x', 100));
        assert!(!watch(&[(ERR, &long), (ERR, b" file system")]).said(Said::ReadOnly));
        // Both, in one run.
        let w = watch(&[(ERR, msg), (OUT, b"Could not resolve host: x")]);
        assert!(w.said(Said::ReadOnly) && w.said(Said::NoNetwork));
    }

    #[test]
    fn the_read_only_hint_names_the_writable_paths_and_the_flags() {
        let h = read_only_hint(&["/tmp", "/dev/shm", "/srv/out"].map(PathBuf::from));
        assert!(
            h.contains("only /tmp, /dev/shm, /srv/out are writable"),
            "{h}"
        );
        assert!(h.contains("--rw .") && h.contains("--stage"), "{h}");
        assert!(read_only_hint(&[PathBuf::from("/dev/shm")]).contains("only /dev/shm is writable"));
        assert!(read_only_hint(&[]).contains("no path is writable"));
    }
}
