//! `cordon sandbox`: create, list, show, exec in, copy to and from, and
//! remove the sandboxes of a running `cordon serve`, through its API over
//! the unix socket.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::{json, Value};

use crate::api_client::{check, socket_path, Client};
use crate::approval_notice::{while_waiting, Asked};

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// The server's socket [default: $CORDON_SOCKET, else the server's default].
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print JSON (the API's answers) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: SandboxCommand,
}

#[derive(Debug, Subcommand)]
enum SandboxCommand {
    /// Make a sandbox; prints its id.
    #[command(
        after_help = "Examples:\n  SB=$(cordon sandbox create --preset low)\n  cordon sandbox create --preset medium --allow-net pypi.org --allow-net files.pythonhosted.org --memory 1G --ttl 1h"
    )]
    Create(CreateArgs),
    /// List the sandboxes.
    #[command(
        visible_alias = "ls",
        after_help = "Examples:\n  cordon sandbox list\n  cordon sandbox list --json"
    )]
    List,
    /// Show one sandbox (state, limits, usage).
    #[command(after_help = "Examples:\n  cordon sandbox show $SB --json")]
    Show {
        /// The sandbox's id (`cordon sandbox list`).
        id: String,
    },
    /// Run a command in a sandbox; prints its output and exits with its code.
    #[command(
        after_help = "Examples:\n  cordon sandbox exec $SB -- pip install requests\n  cordon sandbox exec $SB --timeout 30s --cwd /tmp -- python3 -c 'print(6*7)'\n  echo hi | cordon sandbox exec $SB --stdin -- cat"
    )]
    Exec(ExecArgs),
    /// Copy a file into or out of a sandbox, or a directory out of one
    /// (SB:/path names the sandbox side). A directory is copied to a new
    /// local path, never merged into an existing one.
    #[command(
        after_help = "Examples:\n  cordon sandbox cp ./data.csv $SB:/tmp/data.csv\n  cordon sandbox cp $SB:/tmp/out.json ./out.json\n  cordon sandbox cp $SB:/workspace/results ./results\n\nA directory into a sandbox, as a tar stream:\n  tar -C ./src -cf - . | cordon sandbox exec $SB --stdin -- tar -C /workspace -xf -"
    )]
    Cp {
        /// What to copy: a local path, or SB:/path in a sandbox.
        from: String,
        /// Where to: SB:/path in a sandbox, or a local path.
        to: String,
    },
    /// Tear sandboxes down.
    #[command(
        visible_alias = "delete",
        after_help = "Examples:\n  cordon sandbox rm $SB"
    )]
    Rm {
        /// The sandboxes' ids (repeat).
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// untrusted (default), low, medium, high.
    #[arg(long)]
    preset: Option<String>,
    /// Memory for the whole sandbox (512MiB, 2G); at most the token's
    /// ceiling. Where no memory cgroup is delegated it is each process's
    /// address space (RLIMIT_AS): Node and the JVM need 1 GiB or more.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Most processes and threads at once.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// A host the sandbox may reach through its proxy (repeat).
    #[arg(long = "allow-net", value_name = "HOST")]
    allow_net: Vec<String>,
    /// A host path bound writable (absolute; repeat).
    #[arg(long, value_name = "PATH")]
    rw: Vec<String>,
    /// A host path bound read-only (absolute; repeat).
    #[arg(long, value_name = "PATH")]
    ro: Vec<String>,
    /// KEY=VALUE in every exec's environment (repeat).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Torn down after this long without an exec or file operation
    /// (30s, 10m, 1h).
    #[arg(long, value_name = "DURATION")]
    idle_timeout: Option<String>,
    /// Torn down this long after it was made, busy or not.
    #[arg(long, value_name = "DURATION")]
    ttl: Option<String>,
}

#[derive(Debug, Args)]
struct ExecArgs {
    /// The sandbox's id (`cordon sandbox list`).
    id: String,
    /// The command's working directory inside the sandbox
    /// [default: the sandbox's, /workspace].
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// KEY=VALUE added to the command's environment (repeat).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Kill the command and everything it started after this long
    /// (30s, 10m; exit 124); the sandbox lives on [default: none; the
    /// sandbox's CPU time and lifetime still bound it].
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Send this command's standard input to the command (without it
    /// the command reads nothing, as with `docker exec` without `-i`;
    /// piped input left unsent is pointed out).
    #[arg(long)]
    stdin: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

fn env_map(pairs: &[String]) -> anyhow::Result<Value> {
    let mut map = serde_json::Map::new();
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .with_context(|| format!("--env {p}: expected KEY=VALUE"))?;
        map.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    Ok(Value::Object(map))
}

fn url_id(id: &str) -> anyhow::Result<&str> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        bail!("'{id}' is not a sandbox id (`cordon sandbox list` shows them)");
    }
    Ok(id)
}

pub fn run(args: SandboxArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(dispatch(args))
}

async fn dispatch(args: SandboxArgs) -> anyhow::Result<u8> {
    let socket = socket_path(args.socket.as_deref());
    let mut client = Client::connect(&socket).await?;
    let json_out = args.json;
    match args.command {
        SandboxCommand::Create(c) => {
            let mut body = json!({
                "allow_net": c.allow_net, "rw": c.rw, "ro": c.ro, "env": env_map(&c.env)?,
            });
            for (k, v) in [
                ("preset", c.preset),
                ("memory", c.memory),
                ("idle_timeout", c.idle_timeout),
                ("ttl", c.ttl),
            ] {
                if let Some(v) = v {
                    body[k] = Value::String(v);
                }
            }
            if let Some(p) = c.pids {
                body["pids"] = json!(p);
            }
            let asked = Asked {
                session: None,
                kinds: &["create", "secret"],
            };
            let create = client.json(Method::POST, "/v1/sandboxes", Some(&body));
            let sb = while_waiting(&socket, asked, create).await?;
            print_or(json_out, &sb, || sb["id"].as_str().unwrap_or("").to_owned());
        }
        SandboxCommand::List => {
            let list = client.json(Method::GET, "/v1/sandboxes", None).await?;
            print_or(json_out, &list, || {
                let rows: Vec<String> = list["sandboxes"]
                    .as_array()
                    .map(|a| a.iter().map(summary).collect())
                    .unwrap_or_default();
                if rows.is_empty() {
                    "no sandboxes".into()
                } else {
                    rows.join("\n")
                }
            });
        }
        SandboxCommand::Show { id } => {
            let sb = client
                .json(
                    Method::GET,
                    &format!("/v1/sandboxes/{}", url_id(&id)?),
                    None,
                )
                .await?;
            print_or(json_out, &sb, || {
                serde_json::to_string_pretty(&sb).unwrap_or_default()
            });
        }
        SandboxCommand::Rm { ids } => {
            for id in ids {
                client
                    .json(
                        Method::DELETE,
                        &format!("/v1/sandboxes/{}", url_id(&id)?),
                        None,
                    )
                    .await?;
                if !json_out {
                    eprintln!("removed {id}");
                }
            }
        }
        SandboxCommand::Exec(e) => return exec(&mut client, &socket, e, json_out).await,
        SandboxCommand::Cp { from, to } => {
            let sandbox = remote(&from).or(remote(&to)).map(|(id, _)| id);
            let asked = Asked {
                session: sandbox,
                kinds: &["path"],
            };
            while_waiting(&socket, asked, copy(&mut client, &from, &to)).await?
        }
    }
    Ok(0)
}

fn print_or(json_out: bool, v: &Value, text: impl FnOnce() -> String) {
    if json_out {
        println!("{v}");
    } else {
        println!("{}", text());
    }
}

fn summary(sb: &Value) -> String {
    format!(
        "{}\t{}\t{}\towner={}\texecs={}",
        sb["id"].as_str().unwrap_or(""),
        sb["state"].as_str().unwrap_or(""),
        sb["preset"].as_str().unwrap_or(""),
        sb["owner"].as_str().unwrap_or(""),
        sb["usage"]["execs_total"]
    )
}

/// Whether input waits on this process's standard input that an exec
/// without `--stdin` leaves unsent (as `docker exec` without `-i` does):
/// bytes in a pipe or socket now, or a regular file not read to its end.
/// A terminal, `/dev/null` and a pipe nothing was written to yet say
/// nothing.
fn input_left_unsent() -> bool {
    use rustix::fs::FileType;
    let stdin = rustix::stdio::stdin();
    let Ok(st) = rustix::fs::fstat(stdin) else {
        return false;
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo | FileType::Socket => rustix::io::ioctl_fionread(stdin).is_ok_and(|n| n > 0),
        FileType::RegularFile => rustix::fs::seek(stdin, rustix::fs::SeekFrom::Current(0))
            .is_ok_and(|at| u64::try_from(st.st_size).is_ok_and(|size| size > at)),
        _ => false,
    }
}

/// Stream the exec's events: output as it comes, the exit code at the end.
async fn exec(
    client: &mut Client,
    socket: &Path,
    e: ExecArgs,
    json_out: bool,
) -> anyhow::Result<u8> {
    let mut body = json!({"argv": e.argv, "env": env_map(&e.env)?});
    if let Some(c) = e.cwd {
        body["cwd"] = Value::String(c);
    }
    if let Some(t) = e.timeout {
        body["timeout"] = Value::String(t);
    }
    if e.stdin {
        let mut input = String::new();
        std::io::stdin()
            .read_to_string(&mut input)
            .context("reading stdin (--stdin sends text)")?;
        body["stdin"] = Value::String(input);
    } else if input_left_unsent() {
        eprintln!(
            "cordon: hint: this command's standard input is not sent to the sandbox; \
             add --stdin to send it (... | cordon sandbox exec {} --stdin -- {})",
            e.id,
            e.argv.first().map(String::as_str).unwrap_or("CMD")
        );
    }
    let path = format!("/v1/sandboxes/{}/exec", url_id(&e.id)?);
    let send = client.send(
        Method::POST,
        &path,
        Some("application/json"),
        Some("application/x-ndjson"),
        serde_json::to_vec(&body)?,
    );
    // Until the answer's head: a policy's ask holds it there.
    let asked = Asked {
        session: Some(&e.id),
        kinds: &["exec"],
    };
    let resp = while_waiting(socket, asked, send).await?;
    let status = resp.status();
    if !status.is_success() {
        let data = resp.into_body().collect().await?.to_bytes();
        check(status, &data)?;
        bail!("the server answered {status}");
    }
    // While it runs, a connection its command makes may wait on an ask.
    let asked = Asked {
        session: Some(&e.id),
        kinds: &["egress"],
    };
    while_waiting(socket, asked, relay(resp.into_body(), json_out)).await
}

/// Relay the stream's events as they come; the exit code at the end.
async fn relay(mut body: hyper::body::Incoming, json_out: bool) -> anyhow::Result<u8> {
    let mut pending = Vec::new();
    let mut code = 0u8;
    while let Some(frame) = body.frame().await {
        let frame = frame.context("the stream broke off")?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let event: Value =
                serde_json::from_slice(&line).context("a line of the stream is not JSON")?;
            if json_out {
                println!("{event}");
            }
            if let Some(c) = handle_event(&event, json_out)? {
                code = c;
            }
        }
    }
    Ok(code)
}

/// Print one event; the exit code when it is the last.
fn handle_event(event: &Value, json_out: bool) -> anyhow::Result<Option<u8>> {
    let data = || -> Vec<u8> {
        let text = event["data"].as_str().unwrap_or("");
        if event["encoding"] == "base64" {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_default()
        } else {
            text.as_bytes().to_vec()
        }
    };
    match event["event"].as_str() {
        Some("stdout") if !json_out => {
            let mut out = std::io::stdout().lock();
            out.write_all(&data())?;
            out.flush()?;
        }
        Some("stderr") if !json_out => {
            std::io::stderr().write_all(&data())?;
        }
        Some("exited") => {
            let code = event["exit_code"].as_i64().unwrap_or(1);
            if !json_out {
                if let Some(msg) = event["message"].as_str() {
                    eprintln!("cordon: {msg}");
                }
                if event["timed_out"] == true {
                    eprintln!("cordon: the command timed out");
                }
                for hint in event["hints"].as_array().into_iter().flatten() {
                    let (kind, message) = (
                        hint["kind"].as_str().unwrap_or(""),
                        hint["message"].as_str().unwrap_or(""),
                    );
                    eprintln!("{}", crate::output_hints::sandbox_hint(kind, message));
                }
            }
            return Ok(Some(u8::try_from(code.clamp(0, 255)).unwrap_or(1)));
        }
        _ => {}
    }
    Ok(None)
}

/// `SB:/path` -> (SB, /path)
fn remote(spec: &str) -> Option<(&str, &str)> {
    let (id, path) = spec.split_once(':')?;
    (!id.is_empty() && !id.contains('/') && path.starts_with('/')).then_some((id, path))
}

fn files_path(id: &str, path: &str) -> anyhow::Result<String> {
    let mut out = format!("/v1/sandboxes/{}/files", url_id(id)?);
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        for b in seg.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    Ok(out)
}

async fn copy(client: &mut Client, from: &str, to: &str) -> anyhow::Result<()> {
    match (remote(from), remote(to)) {
        (None, Some((id, path))) => copy_in(client, from, id, path).await,
        (Some((id, path)), None) => copy_out(client, id, path, Path::new(to)).await,
        _ => bail!("name exactly one side as SB:/absolute/path, e.g. `cordon sandbox cp ./a.csv SB:/tmp/a.csv`"),
    }
}

/// A local file into the sandbox (the API writes it atomically).
async fn copy_in(client: &mut Client, from: &str, id: &str, path: &str) -> anyhow::Result<()> {
    if Path::new(from).is_dir() {
        bail!(
            "{from} is a directory; `cordon sandbox cp` copies one file into a sandbox. \
             Send a directory as a tar stream: \
             tar -C {from} -cf - . | cordon sandbox exec {id} --stdin -- \
             sh -c 'mkdir -p \"$1\" && tar -C \"$1\" -xf -' sh {path}"
        );
    }
    let data = std::fs::read(from).with_context(|| format!("cannot read {from}"))?;
    let resp = client
        .send(
            Method::PUT,
            &files_path(id, path)?,
            Some("application/octet-stream"),
            None,
            data,
        )
        .await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    check(status, &body)
}

/// A file out of the sandbox, written atomically; a directory (the API
/// lists it as JSON) as its tar stream, unpacked into a new directory. As
/// with `cp`, a `to` that is a directory receives it under its own name.
async fn copy_out(client: &mut Client, id: &str, path: &str, to: &Path) -> anyhow::Result<()> {
    let into;
    let to = if to.is_dir() {
        let Some(name) = Path::new(path).file_name() else {
            bail!("{path} has no name to copy it under; name the local path, e.g. ./root-copy");
        };
        into = to.join(name);
        into.as_path()
    } else {
        to
    };
    let resp = client
        .send(Method::GET, &files_path(id, path)?, None, None, Vec::new())
        .await?;
    let status = resp.status();
    let listing = resp
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body = resp.into_body().collect().await?.to_bytes();
    check(status, &body)?;
    if listing {
        copy_directory_out(client, id, path, to).await
    } else {
        write_atomically(to, &body)
    }
}

/// The sandbox's directory `path` as a new local directory `to`: its tar
/// stream is spooled to a file and unpacked into a temporary directory
/// beside `to`, which is then renamed into place, so a failed copy leaves
/// nothing. The `tar` crate skips entries with `..` and refuses to write
/// through a symlink out of the directory; set-id bits are dropped.
async fn copy_directory_out(
    client: &mut Client,
    id: &str,
    path: &str,
    to: &Path,
) -> anyhow::Result<()> {
    if to.symlink_metadata().is_ok() {
        bail!(
            "{} exists; a directory is copied to a new path, never merged into an existing one",
            to.display()
        );
    }
    let parent = to
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tar_path = format!("{}?format=tar", files_path(id, path)?);
    let resp = client
        .send(Method::GET, &tar_path, None, None, Vec::new())
        .await?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut spooled = tempfile::tempfile_in(parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    let mut error_body = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if status.is_success() {
                spooled.write_all(&data)?;
            } else {
                error_body.extend_from_slice(&data);
            }
        }
    }
    check(status, &error_body)?;
    spooled.flush()?;
    std::io::Seek::rewind(&mut spooled)?;
    let unpacked = tempfile::Builder::new()
        .prefix(".cordon-cp-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(spooled));
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive
        .unpack(unpacked.path())
        .with_context(|| format!("cannot unpack the copy of {path}"))?;
    // The new directory as mkdir would make it, not the temporary
    // directory's 0700.
    std::fs::set_permissions(
        unpacked.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777 & !current_umask()),
    )?;
    let unpacked = unpacked.keep();
    std::fs::rename(&unpacked, to).map_err(|e| {
        let _ = std::fs::remove_dir_all(&unpacked);
        anyhow::anyhow!("cannot move the copy into {}: {e}", to.display())
    })
}

/// This process's umask, read where reading does not change it
/// (`/proc/self/status`, Linux 4.7+); 022 when it cannot be read.
fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn write_atomically(to: &Path, data: &[u8]) -> anyhow::Result<()> {
    let dir = to
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(data)?;
    tmp.persist(to)
        .with_context(|| format!("cannot write {}", to.display()))?;
    Ok(())
}
