//! Write the seccomp program of a run without network (the default
//! presets) to a file, refusing in the kernel (no user notification), as
//! `bwrap --seccomp FD` reads it: the same-layers bwrap baseline of
//! `benches/startup/layers.sh`.
//!
//! `cargo run --release -p cordon-jail --example seccomp_dump -- FILE`

use cordon_jail::seccomp::{compile, FilterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args_os().nth(1) else {
        return Err("usage: seccomp_dump FILE".into());
    };
    let program = compile(FilterOptions {
        unix_sockets: false,
        inet_sockets: false,
        notify: false,
        observe: false,
    })?;
    std::fs::write(&path, program.to_bytes())?;
    println!("{} instructions", program.len());
    Ok(())
}
