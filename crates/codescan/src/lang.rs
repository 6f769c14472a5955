//! The languages the scanner parses, and telling them from a file.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A language with a tree-sitter grammar in the scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// POSIX sh and bash.
    Bash,
    /// Python 3.
    Python,
    /// JavaScript (and JSX).
    JavaScript,
    /// TypeScript.
    TypeScript,
    /// TypeScript with JSX.
    Tsx,
}

impl Language {
    /// Every language.
    pub const ALL: [Language; 5] = [
        Language::Bash,
        Language::Python,
        Language::JavaScript,
        Language::TypeScript,
        Language::Tsx,
    ];

    /// The name used in rule files and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Bash => "bash",
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
        }
    }

    /// The name of the rule-file key whose query applies to this language:
    /// TypeScript and TSX use the JavaScript query unless a rule has its own.
    pub(crate) fn family(self) -> Language {
        match self {
            Language::Tsx => Language::TypeScript,
            other => other,
        }
    }

    /// The kind of a tree's root node.
    pub(crate) fn top_kind(self) -> &'static str {
        match self {
            Language::Python => "module",
            _ => "program",
        }
    }

    pub(crate) fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Bash => tree_sitter_bash::LANGUAGE.into(),
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        }
    }

    /// The language of a file from its extension, else from its `#!` line.
    pub fn detect(path: &Path, head: &[u8]) -> Option<Language> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let by_ext = match ext {
            "py" | "pyw" | "pyi" => Some(Language::Python),
            "js" | "mjs" | "cjs" | "jsx" => Some(Language::JavaScript),
            "ts" | "mts" | "cts" => Some(Language::TypeScript),
            "tsx" => Some(Language::Tsx),
            "sh" | "bash" | "ksh" | "zsh" | "dash" | "bats" => Some(Language::Bash),
            _ => None,
        };
        by_ext.or_else(|| Language::from_shebang(head))
    }

    /// The language named by a `#!` line (`#!/usr/bin/env python3`).
    pub fn from_shebang(head: &[u8]) -> Option<Language> {
        let line = head.strip_prefix(b"#!")?;
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        let line = std::str::from_utf8(&line[..end]).ok()?;
        let mut words = line.split_whitespace();
        let mut program = words.next()?;
        if program.ends_with("/env") {
            program = words.find(|w| !w.starts_with('-'))?;
        }
        Language::from_interpreter(program)
    }

    /// The language an interpreter runs: `python3.12` → Python, `/bin/sh` →
    /// Bash.
    pub fn from_interpreter(program: &str) -> Option<Language> {
        let name = program.rsplit('/').next().unwrap_or(program);
        match name {
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "busybox" => Some(Language::Bash),
            "node" | "nodejs" | "bun" => Some(Language::JavaScript),
            "deno" | "ts-node" | "tsx" => Some(Language::TypeScript),
            n if n.starts_with("python") || n == "pypy3" || n == "pypy" => Some(Language::Python),
            _ => None,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bash" | "sh" | "shell" => Ok(Language::Bash),
            "python" | "py" => Ok(Language::Python),
            "javascript" | "js" | "node" => Ok(Language::JavaScript),
            "typescript" | "ts" => Ok(Language::TypeScript),
            "tsx" => Ok(Language::Tsx),
            _ => Err(format!(
                "'{s}' is not a language the scanner knows (python, javascript, typescript, tsx, bash)"
            )),
        }
    }
}
