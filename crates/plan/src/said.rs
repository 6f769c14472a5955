//! What a sandboxed command's output says that its caller should explain:
//! a write refused because the path is read-only in the sandbox, a host
//! name that cannot be resolved because the sandbox has no network (or the
//! client ignores the egress proxy), and a process or thread that could
//! not be started at the process limit, and an allocation refused at the
//! memory limit. `cordon run` and `cordon mcp`
//! watch the output they relay for these messages and add a hint that
//! says what the sandbox allows and how to change it.
//!
//! Only messages that mean one thing inside a sandbox are watched: EROFS
//! (a path mounted read-only), a failed name lookup (no DNS in a
//! sandbox), a refused fork or thread, not "Permission denied" or "No such
//! file", which have many causes. Each needle leaves out its first letter,
//! whose case differs between runtimes ("Read-only file system" from C
//! libraries, "EROFS: read-only file system" from Node).

use cordon_jail::Stream;
use memchr::memmem;

/// What a command may say that deserves a hint. Its serde spelling
/// (`read_only`, `no_network`, `no_process`, `no_memory`) is the `kind`
/// of a hint in `cordon serve`'s API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Said {
    /// A write refused with EROFS.
    ReadOnly,
    /// A host name that could not be resolved, or no route anywhere.
    NoNetwork,
    /// A fork or a thread refused (EAGAIN): the process limit.
    NoProcess,
    /// An allocation refused (ENOMEM): the memory limit.
    NoMemory,
}

impl Said {
    const ALL: usize = 4;
    const EACH: [Said; Said::ALL] = [
        Said::ReadOnly,
        Said::NoNetwork,
        Said::NoProcess,
        Said::NoMemory,
    ];

    fn index(self) -> usize {
        match self {
            Said::ReadOnly => 0,
            Said::NoNetwork => 1,
            Said::NoProcess => 2,
            Said::NoMemory => 3,
        }
    }
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
    // dash's "Cannot fork"; bash, busybox and C's "fork: Resource
    // temporarily unavailable" (EAGAIN); Python's threads; the JVM's;
    // Go's runtime.
    (b"annot fork", Said::NoProcess),
    (b"ork: Resource temporarily unavailable", Said::NoProcess),
    (
        b"ork: retry: Resource temporarily unavailable",
        Said::NoProcess,
    ),
    (b"an't fork", Said::NoProcess),
    (b"an't start new thread", Said::NoProcess),
    (b"nable to create native thread", Said::NoProcess),
    (b"nable to create new native thread", Said::NoProcess),
    (b"ailed to create new OS thread", Said::NoProcess),
    // Python; C's ENOMEM; Node's and Go's "out of memory"; C++; the
    // dynamic loader when RLIMIT_AS leaves no room to map a library.
    (b"emoryError", Said::NoMemory),
    (b"ailed to map segment from shared object", Said::NoMemory),
    (b"annot allocate memory", Said::NoMemory),
    (b"ut of memory", Said::NoMemory),
    (b"td::bad_alloc", Said::NoMemory),
];

/// The longest needle, less one: what a chunk's end must keep for a
/// message split between two reads.
fn tail_len() -> usize {
    NEEDLES.iter().map(|(n, _)| n.len()).max().unwrap_or(1) - 1
}

/// What the relayed output said, across chunk boundaries.
#[derive(Debug, Default)]
pub struct OutputWatch {
    seen: [bool; Said::ALL],
    /// The end of the previous chunk of each stream.
    tails: [Vec<u8>; 2],
}

impl OutputWatch {
    /// Look at one chunk of a stream.
    pub fn look(&mut self, stream: Stream, data: &[u8]) {
        if self.seen.iter().all(|s| *s) {
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
            if !self.seen[said.index()] && memmem::find(text, needle).is_some() {
                self.seen[said.index()] = true;
            }
        }
    }

    pub fn said(&self, what: Said) -> bool {
        self.seen[what.index()]
    }

    /// Everything said so far, in a fixed order.
    pub fn all(&self) -> Vec<Said> {
        Said::EACH.into_iter().filter(|s| self.said(*s)).collect()
    }
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
    fn every_runtimes_wording_of_a_refused_fork_or_thread_is_seen() {
        for said in [
            &b"sh: 1: Cannot fork\n"[..],
            b"bash: fork: retry: Resource temporarily unavailable",
            b"bash: fork: Resource temporarily unavailable",
            b"sh: can't fork: Resource temporarily unavailable",
            b"RuntimeError: can't start new thread",
            b"java.lang.OutOfMemoryError: unable to create native thread: possibly out of memory or process/resource limits reached",
            b"java.lang.OutOfMemoryError: unable to create new native thread",
            b"runtime: failed to create new OS thread (have 5 already; errno=11)",
        ] {
            let text = String::from_utf8_lossy(said);
            let w = watch(&[(ERR, said)]);
            assert!(w.said(Said::NoProcess), "{text}");
            assert!(!w.said(Said::ReadOnly) && !w.said(Said::NoNetwork), "{text}");
        }
        assert!(!watch(&[(ERR, b"read: Resource temporarily unavailable")]).said(Said::NoProcess));
    }

    #[test]
    fn every_runtimes_wording_of_a_refused_allocation_is_seen() {
        for said in [
            &b"Traceback (most recent call last):\nMemoryError\n"[..],
            b"python3: error while loading shared libraries: libm.so.6: cannot map: Cannot allocate memory",
            b"python3: error while loading shared libraries: libc.so.6: failed to map segment from shared object",
            b"FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory",
            b"fatal error: runtime: out of memory",
            b"terminate called after throwing an instance of 'std::bad_alloc'",
        ] {
            let text = String::from_utf8_lossy(said);
            let w = watch(&[(ERR, said)]);
            assert!(w.said(Said::NoMemory), "{text}");
            assert!(!w.said(Said::NoProcess) && !w.said(Said::ReadOnly), "{text}");
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
        assert_eq!(w.all(), vec![Said::ReadOnly, Said::NoNetwork]);
        assert!(watch(&[(OUT, b"fine\n")]).all().is_empty());
    }
}
