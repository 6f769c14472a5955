//! Before a run: arguments that name a host path the sandbox will not see.
//! `cordon run -- python3 ~/tools/x.py` from another directory fails with
//! "No such file or directory", which is true inside and false on the
//! host, and says nothing of binds. An argument that names a path existing
//! on the host (by itself, or as `--opt=PATH`) outside everything the
//! sandbox shows is named before the run, with the flag that shows it.
//! The run goes ahead: the command may create the path, or mean it inside.

use std::path::{Path, PathBuf};

use cordon_jail::{IsolationLevel, Spec, SYSTEM_DIRS};

/// Host paths a sandbox shows at their own place, some with its own
/// contents (/proc, /dev, and /etc, of which it keeps a part and writes the
/// rest), so naming one is no mistake worth a note. Not /tmp or /dev/shm:
/// the sandbox's own are empty, so a host file there is not inside unless
/// declared.
const ALWAYS_THERE: &[&str] = &["/proc", "/dev", "/sys", "/etc"];

/// At most this many arguments are named.
const NAMED: usize = 3;

/// The arguments of `spec.argv` (after the program) that name an existing
/// host path the sandbox will not show, each with that path resolved.
pub fn unseen(spec: &Spec, host_cwd: &Path) -> Vec<(String, PathBuf)> {
    if spec.isolation.level != IsolationLevel::Namespaces {
        return Vec::new();
    }
    let shown: Vec<&Path> = spec
        .binds
        .iter()
        .map(|b| b.path.as_path())
        .chain(spec.staged.iter().map(|s| s.lower.as_path()))
        .chain(SYSTEM_DIRS.iter().chain(ALWAYS_THERE).map(Path::new))
        .collect();
    let mut out = Vec::new();
    for arg in spec.argv.iter().skip(1) {
        let Some(text) = path_like(arg) else { continue };
        // Only what exists on the host: the caller meant that file.
        let Ok(real) = std::fs::canonicalize(host_cwd.join(text)) else {
            continue;
        };
        // Inside a shown path, or one of its parents (made inside as the
        // way down to it), the argument names something that is there.
        let there = |s: &&Path| real.starts_with(s) || s.starts_with(&real);
        if !shown.iter().any(there) && out.len() < NAMED {
            out.push((arg.clone(), real));
        }
    }
    out
}

/// The part of an argument that may be a path: the whole, or what follows
/// `=` in `--opt=VALUE`; None for what cannot be one (no `/`).
fn path_like(arg: &str) -> Option<&str> {
    let value = match arg.split_once('=') {
        Some((opt, value)) if opt.starts_with('-') => value,
        _ => arg,
    };
    value.contains('/').then_some(value)
}

/// The note for one such argument.
pub fn note(arg: &str, real: &Path) -> String {
    let real_text = real.display().to_string();
    let names = if arg == real_text {
        format!("the argument {arg} is a host path,")
    } else {
        format!("the argument {arg} names the host path {real_text},")
    };
    let or_dir = if real.is_dir() {
        ""
    } else {
        " (or its directory)"
    };
    format!(
        "cordon: note: {names} which the sandbox does not show (only the working directory, \
         system directories and declared paths are inside); give --ro {real_text}{or_dir}, or \
         --rw to let the command write it"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_arguments_that_can_be_paths_are_looked_at() {
        assert_eq!(path_like("/srv/x.py"), Some("/srv/x.py"));
        assert_eq!(path_like("../x.py"), Some("../x.py"));
        assert_eq!(path_like("--config=/srv/c.toml"), Some("/srv/c.toml"));
        assert_eq!(path_like("-c"), None);
        assert_eq!(path_like("print(1)"), None);
        assert_eq!(
            path_like("a=b/c"),
            Some("a=b/c"),
            "not an option: the whole"
        );
    }

    fn spec_with(binds: &[&str], argv: &[&str]) -> Spec {
        let mut spec = Spec::new(
            argv.iter().map(|s| s.to_string()).collect(),
            PathBuf::from("/"),
        );
        spec.binds = binds
            .iter()
            .map(|p| cordon_jail::Bind {
                path: PathBuf::from(p),
                writable: false,
            })
            .collect();
        spec
    }

    #[test]
    fn a_host_path_outside_every_bind_is_named_and_the_rest_are_not() {
        let host = tempfile::tempdir().unwrap();
        let root = host.path().canonicalize().unwrap();
        for d in ["work", "elsewhere"] {
            std::fs::create_dir(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("x.py"), "").unwrap();
        }
        let work = root.join("work");
        let outside = root.join("elsewhere/x.py");
        let argv = [
            "python3",
            "x.py",
            "../elsewhere/x.py",
            &format!("--in={}", outside.display()),
            "/usr/bin/env",
            "/etc/hostname",
            "/no/such/file",
            "-c",
        ];
        let spec = spec_with(&[work.to_str().unwrap()], &argv);
        let named = unseen(&spec, &work);
        assert_eq!(
            named,
            [
                ("../elsewhere/x.py".to_owned(), outside.clone()),
                (format!("--in={}", outside.display()), outside.clone()),
            ]
        );
        let n = note(&named[0].0, &named[0].1);
        assert!(
            n.contains(&format!(
                "give --ro {} (or its directory)",
                outside.display()
            )),
            "{n}"
        );
        // A parent of a shown path is there too (the way down to it).
        let spec = spec_with(&[work.to_str().unwrap()], &["ls", root.to_str().unwrap()]);
        assert!(unseen(&spec, &work).is_empty());
        // Declared: nothing to say.
        let spec = spec_with(
            &[
                work.to_str().unwrap(),
                root.join("elsewhere").to_str().unwrap(),
            ],
            &argv,
        );
        assert!(unseen(&spec, &work).is_empty());
    }
}
