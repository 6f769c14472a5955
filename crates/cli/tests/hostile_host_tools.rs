//! Hostile suite, writes the host acts on later: with the repository
//! writable (`--cwd rw`), the workload plants what the caller's next host
//! `git status` / `git commit` would run on its own (core.fsmonitor,
//! core.hooksPath, a hook, a filter driver, a file the config includes,
//! a submodule's or a linked
//! worktree's git directory, a `.git` moved aside and replaced). Then the
//! test runs the real host git and checks that no marker appeared.
//!
//! Layer: the mount layer built by `crates/plan/src/host_tools.rs` —
//! read-only binds over the files git reads, and every directory on the
//! way pinned as its own mount point (which the kernel refuses to rename
//! or remove). Each plant is also run with `protect_host_tools = false`,
//! where its marker must appear: that proves the plant works and that
//! this layer alone stops it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) || skip_unless(
        Command::new("git").arg("--version").output().is_ok(),
        "git is not installed",
    )
}

/// The host's git, isolated from the caller's own configuration.
fn git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .output()
        .expect("run git")
}

fn git_ok(dir: &Path, home: &Path, args: &[&str]) {
    let o = git(dir, home, args);
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A repository with one tracked file, a submodule and a linked worktree
/// inside its work tree, all within `root/repo`.
struct Fixture {
    _dir: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
    markers: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("cordon-hosttools-")
            .tempdir()
            .expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let home = root.join("home");
        let markers = root.join("markers");
        let repo = root.join("repo");
        for d in [&home, &markers, &repo] {
            std::fs::create_dir(d).expect("mkdir");
        }
        let lib = root.join("lib");
        std::fs::create_dir(&lib).expect("mkdir");
        git_ok(&lib, &home, &["init", "-q"]);
        std::fs::write(lib.join("lib.txt"), "lib\n").expect("write");
        git_ok(&lib, &home, &["add", "."]);
        git_ok(&lib, &home, &["commit", "-q", "-m", "lib"]);

        git_ok(&repo, &home, &["init", "-q"]);
        std::fs::write(repo.join("a.txt"), "one\n").expect("write");
        git_ok(&repo, &home, &["add", "."]);
        git_ok(&repo, &home, &["commit", "-q", "-m", "one"]);
        git_ok(
            &repo,
            &home,
            &["submodule", "add", "-q", lib.to_str().unwrap(), "sub"],
        );
        git_ok(&repo, &home, &["commit", "-q", "-m", "sub"]);
        git_ok(&repo, &home, &["worktree", "add", "-q", "wt"]);
        // The caller's own config includes a file from the work tree.
        std::fs::write(repo.join("shared.gitconfig"), "[user]\n\tname = shared\n").expect("write");
        git_ok(
            &repo,
            &home,
            &["config", "include.path", "../shared.gitconfig"],
        );
        std::fs::write(repo.join(".gitignore"), "wt/\n.report.json\n").expect("write");
        git_ok(&repo, &home, &["add", ".gitignore"]);
        git_ok(&repo, &home, &["commit", "-q", "-m", "ignore"]);
        Fixture {
            _dir: dir,
            home,
            repo,
            markers,
        }
    }

    /// Run `script` in the sandbox with the repository as a writable cwd.
    fn plant(&self, flags: &[&str], script: &str) -> Outcome {
        let w = Workdir::new();
        let mut all = vec!["--cwd", "rw", "--setenv"];
        let m = format!("M={}", self.markers.display());
        all.push(&m);
        all.extend_from_slice(flags);
        w.run_with(&all, &["/bin/sh", "-c", script], |c| {
            c.current_dir(&self.repo);
        })
    }

    /// What the caller does next on the host: status and a commit, in the
    /// repository and in its linked worktree.
    fn host_git(&self) {
        for dir in [self.repo.clone(), self.repo.join("wt")] {
            let _ = git(&dir, &self.home, &["status"]);
            std::fs::write(dir.join("a.txt"), "changed on the host\n").expect("write");
            let _ = git(&dir, &self.home, &["commit", "-q", "-a", "-m", "host"]);
        }
    }

    fn markers(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.markers)
            .expect("markers")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// Each plant writes only to the repository (the marker directory is not
/// visible inside); a marker named after the plant appears only if the
/// host's git ran what was planted.
const PLANTS: &[(&str, &str)] = &[
    (
        "fsmonitor",
        r#"printf '[core]\n\tfsmonitor = "touch %s/fsmonitor; false"\n' "$M" >> .git/config"#,
    ),
    (
        "hookspath",
        r#"mkdir -p evilhooks && printf '#!/bin/sh\ntouch %s/hookspath\n' "$M" > evilhooks/pre-commit &&
           chmod +x evilhooks/pre-commit && printf '[core]\n\thooksPath = evilhooks\n' >> .git/config"#,
    ),
    (
        "hook",
        r#"for h in pre-commit post-commit; do printf '#!/bin/sh\ntouch %s/hook\n' "$M" > .git/hooks/$h; chmod +x .git/hooks/$h; done"#,
    ),
    (
        "filter",
        r#"echo '*.txt filter=evil' > .gitattributes; echo 'edited' >> a.txt;
           printf '[filter "evil"]\n\tclean = "touch %s/filter; cat"\n' "$M" >> .git/config"#,
    ),
    (
        "include",
        r#"printf '[core]\n\tfsmonitor = "touch %s/include; false"\n' "$M" >> shared.gitconfig"#,
    ),
    (
        "moved-aside",
        r#"mv .git .git-real && mkdir .git && cp -a .git-real/. .git/ &&
           printf '[core]\n\tfsmonitor = "touch %s/moved-aside; false"\n' "$M" >> .git/config"#,
    ),
    (
        "submodule-config",
        r#"printf '[core]\n\tfsmonitor = "touch %s/submodule-config; false"\n' "$M" >> .git/modules/sub/config"#,
    ),
    (
        "submodule-pointer",
        r#"cp -a .git/modules/sub .git/modules/evil &&
           printf '[core]\n\tfsmonitor = "touch %s/submodule-pointer; false"\n' "$M" >> .git/modules/evil/config &&
           echo "gitdir: ../.git/modules/evil" > sub/.git"#,
    ),
    (
        "worktree-commondir",
        r#"cp -a .git evilcommon &&
           printf '[core]\n\tfsmonitor = "touch %s/worktree-commondir; false"\n' "$M" >> evilcommon/config &&
           echo "$PWD/evilcommon" > .git/worktrees/wt/commondir"#,
    ),
];

fn run_plant(name: &str, script: &str, protect: bool) -> Vec<String> {
    let f = Fixture::new();
    let profile = f.home.join("p.toml");
    std::fs::write(
        &profile,
        format!("[filesystem]\nprotect_host_tools = {protect}\n"),
    )
    .expect("profile");
    let o = f.plant(&["--profile", profile.to_str().unwrap()], script);
    assert_eq!(o.reason(), "exited", "{name}: {}", o.stderr);
    f.host_git();
    f.markers()
}

#[test]
fn host_git_runs_nothing_the_workload_planted() {
    if ready() {
        return;
    }
    for (name, script) in PLANTS {
        let markers = run_plant(name, script, true);
        assert!(
            markers.is_empty(),
            "{name}: the host's git ran what the workload planted: {markers:?}"
        );
    }
}

#[test]
fn with_protect_host_tools_off_every_plant_runs_on_the_host() {
    if ready() {
        return;
    }
    for (name, script) in PLANTS {
        let markers = run_plant(name, script, false);
        assert!(
            markers.contains(&name.to_string()),
            "{name}: the plant did not fire without the protection, so the test above proves nothing for it: {markers:?}"
        );
    }
}

#[test]
fn a_nested_repository_cannot_be_moved_aside() {
    if ready() {
        return;
    }
    let f = Fixture::new();
    let parent = f.repo.parent().unwrap().to_path_buf();
    let nested = parent.join("a/b");
    std::fs::create_dir_all(&nested).expect("mkdir");
    git_ok(&nested, &f.home, &["init", "-q"]);
    std::fs::write(nested.join("a.txt"), "one\n").expect("write");
    git_ok(&nested, &f.home, &["add", "."]);
    git_ok(&nested, &f.home, &["commit", "-q", "-m", "one"]);
    // Every directory between the writable path and the repository: move
    // it aside and rebuild the repository with a config of its own.
    let script = r#"
        for d in a a/b a/b/.git; do
          if mv "$d" "$d.aside" 2>/dev/null; then echo "MOVED $d"; mv "$d.aside" "$d"; fi
          if rmdir "$d" 2>/dev/null; then echo "REMOVED $d"; fi
        done
        mv a a2; mkdir -p a/b/.git && cp -a a2/b/.git/. a/b/.git/ 2>/dev/null
        printf '[core]\n\tfsmonitor = "touch %s/nested; false"\n' "$M" >> a/b/.git/config
        exit 0"#;
    let w = Workdir::new();
    let m = format!("M={}", f.markers.display());
    let o = w.run_with(
        &["--rw", parent.to_str().unwrap(), "--setenv", &m],
        &["/bin/sh", "-c", script],
        |c| {
            c.current_dir(&parent);
        },
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.contains("MOVED"), "{}", o.stdout);
    assert!(!o.stdout.contains("REMOVED"), "{}", o.stdout);
    let _ = git(&nested, &f.home, &["status"]);
    assert!(f.markers().is_empty(), "{:?}", f.markers());
}

#[test]
fn editor_and_hook_manager_files_are_read_only() {
    if ready() {
        return;
    }
    let f = Fixture::new();
    std::fs::create_dir(f.repo.join(".vscode")).expect("mkdir");
    std::fs::write(f.repo.join(".vscode/tasks.json"), "{}\n").expect("write");
    std::fs::write(f.repo.join(".pre-commit-config.yaml"), "repos: []\n").expect("write");
    let o = f.plant(
        &[],
        r#"for p in .vscode/tasks.json .vscode/settings.json .pre-commit-config.yaml .git/info/exclude .git/info/attributes; do
             if echo evil >> "$p" 2>/dev/null; then echo "WROTE $p"; fi
           done
           echo fine > a.txt && echo "WORK TREE WRITABLE""#,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.contains("WROTE"), "{}", o.stdout);
    assert!(o.stdout.contains("WORK TREE WRITABLE"), "{}", o.stdout);
    assert_eq!(
        std::fs::read_to_string(f.repo.join(".vscode/tasks.json")).unwrap(),
        "{}\n"
    );
    let protected = o.report["host_tools"]["read_only"].to_string();
    assert!(protected.contains(".pre-commit-config.yaml"), "{protected}");
}

#[test]
fn what_cannot_be_bound_is_named_after_the_run() {
    if ready() {
        return;
    }
    let f = Fixture::new();
    let o = f.plant(
        &[],
        r#"echo /nonexistent > .git/commondir; mkdir .vscode; mkdir -p new && git init -q new"#,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let created: Vec<String> = o.report["host_tools"]["created"]
        .as_array()
        .expect("created")
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    for want in [".git/commondir", ".vscode", "new/.git"] {
        let path = f.repo.join(want).display().to_string();
        assert!(created.contains(&path), "{want} not named: {created:?}");
        assert!(
            o.stderr
                .contains(&format!("warning: the run created {path},")),
            "{}",
            o.stderr
        );
    }
    // Once it exists it is bound like the rest: the next run cannot
    // remove it. The caller does, as the warning says; then a legitimate
    // git commit inside works with the protection on.
    let o = f.plant(&[], "rm .git/commondir || echo KEPT");
    assert!(o.stdout.contains("KEPT"), "{} {}", o.stdout, o.stderr);
    std::fs::remove_file(f.repo.join(".git/commondir")).expect("rm commondir");
    let o = f.plant(
        &[],
        "echo two > a.txt && git -c user.name=s -c user.email=s@s commit -q -a -m two && echo COMMITTED",
    );
    assert!(o.stdout.contains("COMMITTED"), "{} {}", o.stdout, o.stderr);
}

/// With the home directory writable: plant a git config that every host
/// repository obeys, shell and ssh start-up files, and a `git` early on
/// the PATH. Returns the markers the host's git left and the run.
fn plant_in_home(protect: bool) -> (Vec<String>, Outcome, Fixture) {
    let f = Fixture::new();
    std::fs::write(f.home.join(".bashrc"), "# rc\n").unwrap();
    std::fs::write(f.home.join(".gitconfig"), "[user]\n\tname = t\n").unwrap();
    std::fs::create_dir(f.home.join(".ssh")).unwrap();
    std::fs::write(f.home.join(".ssh/authorized_keys"), "").unwrap();
    let profile = f.repo.parent().unwrap().join("p.toml");
    std::fs::write(
        &profile,
        format!("[filesystem]\nprotect_host_tools = {protect}\n"),
    )
    .unwrap();
    let script = r#"
        cd "$HOME"
        printf '[core]\n\tfsmonitor = "touch %s/home-gitconfig; false"\n' "$M" >> .gitconfig || echo "REFUSED gitconfig"
        echo 'touch /tmp/x' >> .bashrc || echo "REFUSED bashrc"
        echo 'ssh-ed25519 AAAA planted' >> .ssh/authorized_keys || echo "REFUSED ssh"
        mv .ssh .ssh-aside 2>/dev/null || echo "REFUSED ssh-move"
        mkdir -p .local/bin && printf '#!/bin/sh\n' > .local/bin/git
        exit 0"#;
    let w = Workdir::new();
    let m = format!("M={}", f.markers.display());
    let home = f.home.to_str().unwrap().to_owned();
    let o = w.run_with(
        &[
            "--profile",
            profile.to_str().unwrap(),
            "--rw",
            &home,
            "--setenv",
            &m,
            "--setenv",
            &format!("HOME={home}"),
        ],
        &["/bin/sh", "-c", script],
        |c| {
            c.env("HOME", &home);
        },
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let _ = git(&f.repo, &f.home, &["status"]);
    let markers = f.markers();
    (markers, o, f)
}

#[test]
fn a_writable_home_keeps_its_start_up_files() {
    if ready() {
        return;
    }
    let (markers, o, f) = plant_in_home(true);
    assert!(markers.is_empty(), "{markers:?}");
    for what in ["gitconfig", "bashrc", "ssh", "ssh-move"] {
        assert!(
            o.stdout.contains(&format!("REFUSED {what}\n")),
            "{what}: {}",
            o.stdout
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.home.join(".bashrc")).unwrap(),
        "# rc\n"
    );
    // What did not exist is named after the run.
    let bin = f.home.join(".local/bin").display().to_string();
    assert!(
        o.stderr
            .contains(&format!("warning: the run created {bin},")),
        "{}",
        o.stderr
    );

    // Control: without the protection the same plant reaches the host's git.
    let (markers, o, _f) = plant_in_home(false);
    assert_eq!(markers, vec!["home-gitconfig".to_string()], "{}", o.stdout);
    assert!(!o.stdout.contains("REFUSED"), "{}", o.stdout);
}
