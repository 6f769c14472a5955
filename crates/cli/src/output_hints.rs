//! The hints `cordon run` ends with when the command's output says what
//! a first run commonly runs into ([`cordon_plan::said`]): a write refused
//! as read-only (which paths are writable, and `--rw` / `--stage`) and a
//! failed name lookup without network (`--allow-net`).

use std::path::{Path, PathBuf};

use cordon_jail::{NetworkMode, Outcome};
use cordon_plan::said::{OutputWatch, Said};

/// The hints the output calls for in the sandbox `spec` describes, whose
/// run ended as `outcome` says.
pub fn hints(watch: &OutputWatch, spec: &cordon_jail::Spec, outcome: &Outcome) -> Vec<String> {
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
    // With a pids cgroup the run's end already says when the limit refused
    // a fork; an rlimit counts nothing, so the command's words are the sign.
    if let (true, None, Some(limit)) = (
        watch.said(Said::NoProcess),
        outcome.breaches.pids_limit_hits,
        spec.limits.pids,
    ) {
        out.push(format!(
            "cordon: hint: the command could not start a process or thread: this sandbox allows \
             {limit} processes and threads (held by RLIMIT_NPROC, as no pids cgroup is \
             delegated here); give a larger --pids if it needs more"
        ));
    }
    // Likewise memory: RLIMIT_AS fails the allocation and counts nothing
    // (a memory cgroup's OOM kill is said by the run's end).
    if let (true, None, Some(limit)) = (
        watch.said(Said::NoMemory),
        outcome.breaches.oom_kills,
        spec.limits.memory,
    ) {
        out.push(format!(
            "cordon: hint: the command ran out of memory: this sandbox allows {} MiB of address \
             space per process (held by RLIMIT_AS, as no memory cgroup is delegated here; \
             runtimes reserve more address space than they use); give a larger --memory",
            limit >> 20
        ));
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

/// A hint of `cordon serve`'s exec reply (`kind`, `message`) in the words
/// of `cordon sandbox`: the flag of `cordon sandbox create` that changes
/// what the sandbox allows. A kind this client does not know is shown as
/// the server wrote it.
pub fn sandbox_hint(kind: &str, message: &str) -> String {
    let text = match kind {
        "read_only" => {
            "a write was refused as \"read-only file system\": in a sandbox only its working \
             directory, /tmp, /dev/shm and the paths given to `cordon sandbox create --rw PATH` \
             are writable"
        }
        "no_network" => {
            "the command could not resolve or reach a host: a sandbox has no DNS and reaches \
             only the hosts given to `cordon sandbox create --allow-net HOST`, through cordon's \
             egress proxy (which HTTPS_PROXY and ALL_PROXY name inside)"
        }
        "no_process" => {
            "the command could not start a process or thread: the sandbox's process limit was \
             reached; create the sandbox with a larger --pids if it needs more"
        }
        "no_memory" => {
            "an allocation was refused: the sandbox's memory limit may be too small for this \
             command; create the sandbox with a larger --memory"
        }
        // The proxy's own words name the flag (`cordon sandbox create
        // --allow-net` too); the API's field is not for this client.
        "egress_refused" => message
            .strip_suffix(cordon_server::hints::OVER_THE_API)
            .unwrap_or(message),
        _ => message,
    };
    format!("cordon: hint: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_hint_names_the_create_flag_and_shows_an_unknown_kind_as_written() {
        for (kind, flag) in [
            ("read_only", "--rw"),
            ("no_network", "--allow-net"),
            ("no_process", "--pids"),
            ("no_memory", "--memory"),
        ] {
            let h = sandbox_hint(kind, "server words");
            assert!(h.starts_with("cordon: hint: ") && h.contains(flag), "{h}");
        }
        assert_eq!(
            sandbox_hint("new_kind", "server words"),
            "cordon: hint: server words"
        );
        let refused = format!(
            "the proxy said: use --allow-net x.{}",
            cordon_server::hints::OVER_THE_API
        );
        assert_eq!(
            sandbox_hint("egress_refused", &refused),
            "cordon: hint: the proxy said: use --allow-net x."
        );
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
