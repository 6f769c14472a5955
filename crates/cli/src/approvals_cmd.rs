//! `cordon approvals`: list the approvals of a running `cordon serve` and
//! answer them, through its API over the unix socket (as the owner).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::{json, Value};

use crate::api_client::{check, socket_path, Client};

#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// The server's socket [default: $CORDON_SOCKET, else the server's default].
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print JSON (the API's answers) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// List approvals (pending ones by default).
    #[command(
        after_help = "Examples:\n  cordon approvals list\n  cordon approvals list --state all --json\n\nColumns: id, kind, what is asked, who asked, sandbox, seconds left, the rule that asked."
    )]
    List {
        /// pending, approved, denied, expired or all.
        #[arg(long, default_value = "pending")]
        state: String,
    },
    /// Approve: the action runs; the scope says what else the grant covers.
    #[command(
        after_help = "Examples:\n  cordon approvals approve ap_1f2e3d4c5b6a7988                        # this one call\n  cordon approvals approve ap_1f2e3d4c5b6a7988 --scope session        # the narrowed subject, until the sandbox ends\n  cordon approvals approve ap_1f2e3d4c5b6a7988 --scope duration --for 10m\n  cordon approvals approve ap_1f2e3d4c5b6a7988 --scope persistent     # shows the rule, asks to confirm\n\nA grant longer than once is narrowed: host:port (not the domain), an argv\nprefix (not the program), a subtree (not a root); `list --json` shows it as\ngrant_subject. Persistent appends a Cedar rule to the server's --policy file\nafter a confirmation (--yes confirms without asking)."
    )]
    Approve {
        id: String,
        #[arg(long, value_enum, default_value_t = ScopeArg::Once)]
        scope: ScopeArg,
        /// How long a duration grant holds (e.g. 10m, 1h).
        #[arg(long = "for", value_name = "DURATION")]
        duration: Option<String>,
        /// Confirm a persistent rule without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Deny: the waiting action fails with `approval_denied`.
    #[command(after_help = "Examples:\n  cordon approvals deny ap_1f2e3d4c5b6a7988")]
    Deny { id: String },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ScopeArg {
    Once,
    Session,
    Duration,
    Persistent,
}

pub fn run(args: ApprovalsArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(dispatch(args))
}

fn approval_path(id: &str) -> anyhow::Result<String> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("'{id}' is not an approval id (`cordon approvals list` shows them)");
    }
    Ok(format!("/v1/approvals/{id}"))
}

async fn dispatch(args: ApprovalsArgs) -> anyhow::Result<u8> {
    let socket = socket_path(args.socket.as_deref());
    let mut client = Client::connect(&socket).await?;
    match args.command {
        ApprovalsCommand::List { state } => {
            let path = format!("/v1/approvals?state={state}");
            let list = client.json(Method::GET, &path, None).await?;
            if args.json {
                println!("{list}");
                return Ok(0);
            }
            let rows: Vec<String> = list["approvals"]
                .as_array()
                .map(|a| a.iter().map(row).collect())
                .unwrap_or_default();
            if rows.is_empty() {
                println!("no {state} approvals");
            } else {
                println!("{}", rows.join("\n"));
            }
        }
        ApprovalsCommand::Deny { id } => {
            let a = answer(&mut client, &id, json!({"decision": "deny"})).await?;
            let a = a.map_err(|_| anyhow::anyhow!("the server asked to confirm a denial"))?;
            done(args.json, &a, "denied");
        }
        ApprovalsCommand::Approve {
            id,
            scope,
            duration,
            yes,
        } => {
            let mut body = json!({"decision": "approve"});
            match scope {
                ScopeArg::Once => body["scope"] = json!("once"),
                ScopeArg::Session => body["scope"] = json!("session"),
                ScopeArg::Persistent => body["scope"] = json!("persistent"),
                ScopeArg::Duration => {
                    let Some(d) = duration else {
                        bail!("--scope duration needs --for DURATION (e.g. --for 10m)");
                    };
                    body["scope"] = json!("duration");
                    body["duration"] = json!(d);
                }
            }
            let first = answer(&mut client, &id, body.clone()).await?;
            let a = match first {
                Ok(a) => a,
                Err(confirm) => {
                    if !confirmed(&confirm, yes)? {
                        eprintln!("not confirmed; approval {id} is still pending");
                        return Ok(1);
                    }
                    body["confirm"] = confirm["confirm"].clone();
                    answer(&mut client, &id, body)
                        .await?
                        .map_err(|_| anyhow::anyhow!("the server asked for confirmation again"))?
                }
            };
            done(args.json, &a, "approved");
        }
    }
    Ok(0)
}

/// POST an answer: the approval, or (Err) the 409 asking to confirm a
/// persistent rule.
async fn answer(
    client: &mut Client,
    id: &str,
    body: Value,
) -> anyhow::Result<Result<Value, Value>> {
    let resp = client
        .send(
            Method::POST,
            &approval_path(id)?,
            Some("application/json"),
            None,
            serde_json::to_vec(&body)?,
        )
        .await?;
    let status = resp.status();
    let data = resp.into_body().collect().await?.to_bytes();
    if status.as_u16() == 409 {
        let v: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
        if v["confirm"].is_string() {
            return Ok(Err(v));
        }
    }
    check(status, &data)?;
    Ok(Ok(
        serde_json::from_slice(&data).context("the server's answer is not JSON")?
    ))
}

/// Show the rule and ask (on a terminal) whether to append it.
fn confirmed(confirm: &Value, yes: bool) -> anyhow::Result<bool> {
    eprintln!("This rule will be appended to the server's policy file:\n");
    eprintln!("{}", confirm["rule"].as_str().unwrap_or(""));
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!("confirm the persistent rule with --yes (stdin is not a terminal)");
    }
    eprint!("Append it? [y/N] ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn done(json_out: bool, a: &Value, what: &str) {
    if json_out {
        println!("{a}");
    } else {
        let scope = a["scope"]["kind"].as_str().unwrap_or("");
        let extra = a["scope"]["seconds"]
            .as_u64()
            .map(|s| format!(" for {s}s"))
            .unwrap_or_default();
        println!(
            "{} {what}{}",
            a["id"].as_str().unwrap_or(""),
            if scope.is_empty() {
                String::new()
            } else {
                format!(" ({scope}{extra})")
            }
        );
    }
}

pub(crate) fn subject_text(s: &Value) -> String {
    match s["kind"].as_str().unwrap_or("") {
        "exec" => s["argv_prefix"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
        "egress" => format!("{}:{}", s["host"].as_str().unwrap_or(""), s["port"]),
        "path" | "bind" => s["path"]
            .as_str()
            .or(s["host_path"].as_str())
            .unwrap_or("")
            .to_owned(),
        "create" => format!("profile {}", s["profile"].as_str().unwrap_or("")),
        "secret" => s["name"].as_str().unwrap_or("").to_owned(),
        _ => s.to_string(),
    }
}

fn row(a: &Value) -> String {
    let now = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let left = a["expires_unix_ms"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(now)
        / 1000;
    format!(
        "{}\t{}\t{}\tby={}\tsandbox={}\t{}s left\trule={}",
        a["id"].as_str().unwrap_or(""),
        a["kind"].as_str().unwrap_or(""),
        subject_text(&a["subject"]),
        a["principal"].as_str().unwrap_or(""),
        a["session"].as_str().unwrap_or("-"),
        left,
        a["rule"]["id"].as_str().unwrap_or(""),
    )
}
