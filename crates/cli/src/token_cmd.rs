//! `cordon token`: the bearer tokens of `cordon serve --listen`.

use clap::{Args, Subcommand};
use cordon_policy::TrustLevel;
use cordon_server::tokens::{Ceiling, TokenStore};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it (once: only its hash is kept).
    #[command(
        after_help = "Examples:\n  cordon token create --name ci-agent --preset low --max-sandboxes 20\n  cordon token create --name scraper --preset medium --allow-net pypi.org --allow-net '*.pythonhosted.org' --memory 1G\n  cordon token create --name reviewer --approver     # may answer other tokens' approvals\n\nThe token is printed on stdout once; send it as `Authorization: Bearer TOKEN`."
    )]
    Create(CreateArgs),
    /// List the tokens and their ceilings (never the secrets).
    #[command(after_help = "Examples:\n  cordon token list\n  cordon token list --json")]
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: requests with it fail from now on (also on a running server).
    #[command(after_help = "Examples:\n  cordon token revoke ci-agent")]
    Revoke {
        /// The token's name (`cordon token list`).
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The token's name (shown as the owner of its sandboxes and in the audit store).
    #[arg(long)]
    name: String,
    /// The most permissive preset it may use: untrusted, low, medium, high.
    #[arg(long, default_value = "low")]
    preset: TrustLevel,
    /// Most sandboxes it may have at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    max_sandboxes: usize,
    /// Largest memory limit per sandbox (e.g. 512M).
    #[arg(long, value_name = "SIZE", value_parser = crate::serve_cmd::parse_memory_ceiling)]
    memory: Option<u64>,
    /// Largest pids limit per sandbox.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pids: Option<u64>,
    /// A host pattern its sandboxes may be allowed to reach (repeat).
    #[arg(long = "allow-net", value_name = "HOST")]
    allow_net: Vec<String>,
    /// The token may answer approvals of other tokens (never its own):
    /// `cordon approvals`, `POST /v1/approvals/{id}`, the console.
    #[arg(long)]
    approver: bool,
    /// Print {"name", "token", "ceiling"} as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: TokenCommand) -> anyhow::Result<u8> {
    let store = TokenStore::new(cordon_server::paths::tokens_file());
    match cmd {
        TokenCommand::Create(a) => {
            for h in &a.allow_net {
                cordon_policy::HostPattern::parse(h)
                    .map_err(|e| anyhow::anyhow!("--allow-net {h}: {e}"))?;
            }
            let ceiling = Ceiling {
                preset: a.preset,
                memory: a.memory,
                pids: a.pids,
                allow_net: a.allow_net,
                max_sandboxes: a.max_sandboxes,
            };
            let secret = store.create_with(&a.name, ceiling.clone(), a.approver)?;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"name": a.name, "token": secret, "ceiling": ceiling, "approver": a.approver})
                );
            } else {
                println!("{secret}");
                eprintln!(
                    "token '{}' created (stored hashed in {}); keep it now: it is not shown again",
                    a.name,
                    store.path().display()
                );
            }
        }
        TokenCommand::List { json } => {
            let tokens = store.list()?;
            if json {
                let list: Vec<_> = tokens
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "created_unix_ms": t.created_unix_ms, "ceiling": t.ceiling, "approver": t.approver}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if tokens.is_empty() {
                println!("no tokens (cordon token create --name NAME)");
            } else {
                for t in tokens {
                    let c = &t.ceiling;
                    println!(
                        "{}\tpreset<={}\tmax_sandboxes={}\tmemory={}\tpids={}\thosts={}{}",
                        t.name,
                        c.preset,
                        c.max_sandboxes,
                        c.memory.map_or("-".into(), |m| m.to_string()),
                        c.pids.map_or("-".into(), |p| p.to_string()),
                        if c.allow_net.is_empty() {
                            "-".into()
                        } else {
                            c.allow_net.join(",")
                        },
                        if t.approver { "\tapprover" } else { "" }
                    );
                }
            }
        }
        TokenCommand::Revoke { name } => {
            store.revoke(&name)?;
            eprintln!("token '{name}' revoked");
        }
    }
    Ok(0)
}
