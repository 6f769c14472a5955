//! `cordon profile`: show the resolved profile, the JSON Schema, lint.

use std::path::PathBuf;

use clap::Subcommand;
use cordon_policy::{Profile, TrustLevel};

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print a profile with every setting resolved (TOML, or JSON with --json).
    #[command(
        after_help = "Examples:\n  cordon profile show\n  cordon profile show --preset medium\n  cordon profile show profiles/python.toml --json"
    )]
    Show {
        /// Profile file; the default profile when omitted.
        file: Option<PathBuf>,
        #[arg(long, conflicts_with = "file")]
        preset: Option<TrustLevel>,
        #[arg(long)]
        json: bool,
    },
    /// Check a profile and warn about risky combinations; exit 1 on errors.
    #[command(after_help = "Examples:\n  cordon profile lint profiles/api-client.toml")]
    Lint {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of profile files.
    Schema,
}

pub fn run(cmd: ProfileCommand) -> anyhow::Result<u8> {
    match cmd {
        ProfileCommand::Show { file, preset, json } => {
            let profile = match (file, preset) {
                (Some(f), _) => Profile::load(&f).map_err(|e| anyhow::anyhow!("{e}"))?,
                (None, Some(level)) => Profile::preset(level),
                (None, None) => Profile::default(),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&profile)?);
            } else {
                print!("{}", profile.to_toml_string());
            }
            Ok(0)
        }
        ProfileCommand::Lint { file, json } => {
            let profile = match Profile::load(&file) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(1);
                }
            };
            let warnings = profile.lint();
            if json {
                let list: Vec<serde_json::Value> = warnings
                    .iter()
                    .map(|w| {
                        serde_json::json!({"code": w.code, "key": w.key, "message": w.message, "hint": w.hint, "severity": format!("{:?}", w.severity).to_lowercase()})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if warnings.is_empty() {
                println!("{}: ok", file.display());
            } else {
                for w in &warnings {
                    println!("{}: {w}", file.display());
                }
            }
            Ok(0)
        }
        ProfileCommand::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&cordon_policy::json_schema())?
            );
            Ok(0)
        }
    }
}
