//! What `cordon run` scans before it starts a command: the command line
//! itself (as a shell command, so `sh -c`, `python3 -c` and `node -e`
//! arguments are followed into their languages) and the script files named
//! on it.

use std::path::{Path, PathBuf};

use crate::lang::Language;

/// Largest script file read for scanning.
const MAX_SCRIPT_BYTES: u64 = 4 << 20;

/// One text to scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Name in findings: `<command line>` or the script's path.
    pub name: String,
    /// Its language.
    pub language: Language,
    /// The text.
    pub text: String,
    /// The file it was read from, if any.
    pub path: Option<PathBuf>,
}

/// The texts a command line runs: the command line as a shell command, and
/// each script it names (an interpreter's first operand, or the program
/// itself when it is a script file in `cwd`). Files that cannot be read as
/// text are left out; the sandbox still applies to them.
pub fn units_for_argv(argv: &[String], cwd: &Path) -> Vec<Unit> {
    let mut units = Vec::new();
    if argv.is_empty() {
        return units;
    }
    let line = shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_else(|_| argv.join(" "));
    units.push(Unit {
        name: "<command line>".into(),
        language: Language::Bash,
        text: line,
        path: None,
    });
    if let Some(script) = script_of(argv) {
        if let Some(unit) = read_script(&cwd.join(script), script, None) {
            units.push(unit);
        }
    }
    // The program itself may be a script (`./tool.sh`, `./tool.py`).
    if argv[0].contains('/') {
        if let Some(unit) = read_script(&cwd.join(&argv[0]), &argv[0], None) {
            units.push(unit);
        }
    }
    units
}

/// The script operand of an interpreter's command line, if it has one and
/// no inline code (`-c`, `-e` are scanned through the command line).
fn script_of(argv: &[String]) -> Option<&str> {
    let program = Path::new(argv.first()?).file_name()?.to_str()?;
    Language::from_interpreter(program)?;
    let mut args = argv[1..].iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-c" | "-e" | "--eval" | "-p" | "--print" | "-m" => return None,
            // Options of python and node that take a value.
            "-W" | "-X" | "-r" | "--require" | "--import" | "-o" | "-O" if a.len() == 2 => {
                args.next();
            }
            "--" => return args.next().map(String::as_str),
            s if s.starts_with('-') => continue,
            file => return Some(file),
        }
    }
    None
}

fn read_script(path: &Path, name: &str, lang: Option<Language>) -> Option<Unit> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    let language = lang.or_else(|| Language::detect(path, &bytes))?;
    let text = String::from_utf8(bytes).ok()?;
    Some(Unit {
        name: name.to_owned(),
        language,
        text,
        path: Some(path.to_path_buf()),
    })
}
