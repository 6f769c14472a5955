#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Run a command in a default sandbox: `cargo run --example try_run -- CMD...`
use cordon_jail::*;
fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cwd = std::env::current_dir().unwrap();
    let mut spec = Spec::new(argv, cwd.clone());
    spec.binds.push(Bind {
        path: cwd,
        writable: false,
    });
    spec.limits.wall = Some(std::time::Duration::from_secs(10));
    spec.limits.memory = Some(256 << 20);
    spec.limits.pids = Some(64);
    match run(&spec, &mut StdioSink, RunOptions::default()) {
        Ok(o) => {
            eprintln!("{}", serde_json::to_string_pretty(&o).unwrap());
            std::process::exit(o.exit_code)
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            std::process::exit(125)
        }
    }
}
