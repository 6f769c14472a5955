//! API tokens: created once (the secret is shown once), stored as the
//! SHA-256 of the secret in `tokens.json` (0600, replaced atomically) in
//! the state directory. Each token carries a ceiling: the most a request
//! made with it may ask for.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use cordon_policy::TrustLevel;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The name the unix socket's caller has in records and `owner` fields.
/// No token may take it.
pub const OWNER: &str = "owner";

/// What a token may ask for at most.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    /// The most permissive preset the token may use (untrusted < low <
    /// medium < high).
    pub preset: TrustLevel,
    /// Largest memory limit per sandbox, bytes (also the default when the
    /// preset allows more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Largest pids limit per sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Host patterns a sandbox of this token may be allowed to reach.
    #[serde(default)]
    pub allow_net: Vec<String>,
    /// Sandboxes alive at once.
    pub max_sandboxes: usize,
}

/// One stored token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRecord {
    pub name: String,
    /// Hex SHA-256 of the secret.
    pub sha256: String,
    pub created_unix_ms: u64,
    pub ceiling: Ceiling,
    /// May answer approvals of other tokens (`cordon token create --approver`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approver: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<TokenRecord>,
}

/// Errors of the token store.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a token file ({reason}); move it away and create the tokens again")]
    Corrupt { path: PathBuf, reason: String },
    #[error("a token named '{0}' exists; revoke it first or choose another name")]
    Exists(String),
    #[error("no token named '{0}'; `cordon token list` shows the names")]
    Missing(String),
    #[error(
        "'{0}' is not a token name: use 1-64 letters, digits, '-', '_' or '.' (and not 'owner')"
    )]
    BadName(String),
    #[error("cannot read random bytes for a token: {0}")]
    Random(String),
}

fn io<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> TokenError + 'a {
    move |source| TokenError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

/// The hex SHA-256 of a presented secret.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != OWNER
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn now_ms() -> u64 {
    SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The token file, read again whenever it changed on disk (so `cordon
/// token revoke` takes effect on a running server).
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    cache: Mutex<Option<Cached>>,
}

/// The file's modification time and length when it was read, and what it held.
type Cached = (Option<SystemTime>, u64, Vec<TokenRecord>);

impl TokenStore {
    pub fn new(path: PathBuf) -> TokenStore {
        TokenStore {
            path,
            cache: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Vec<TokenRecord>, TokenError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path, "read the token file")(e)),
        };
        let file: TokenFile = serde_json::from_slice(&text).map_err(|e| TokenError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(file.tokens)
    }

    /// Every token (without secrets), re-read when the file changed.
    pub fn list(&self) -> Result<Vec<TokenRecord>, TokenError> {
        let meta = std::fs::metadata(&self.path).ok();
        let key = (
            meta.as_ref().and_then(|m| m.modified().ok()),
            meta.as_ref().map_or(0, |m| m.len()),
        );
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| TokenError::Random("token cache poisoned".into()))?;
        if let Some((mtime, len, tokens)) = cache.as_ref() {
            if (*mtime, *len) == key && key.0.is_some() {
                return Ok(tokens.clone());
            }
        }
        let tokens = self.read()?;
        *cache = Some((key.0, key.1, tokens.clone()));
        Ok(tokens)
    }

    /// The token whose secret this is.
    pub fn authenticate(&self, secret: &str) -> Result<Option<TokenRecord>, TokenError> {
        let hash = digest(secret);
        Ok(self.list()?.into_iter().find(|t| t.sha256 == hash))
    }

    /// The token whose secret has this digest (a console session holds the
    /// digest of the token it was made with, never the secret).
    pub fn by_digest(&self, sha256: &str) -> Result<Option<TokenRecord>, TokenError> {
        Ok(self.list()?.into_iter().find(|t| t.sha256 == sha256))
    }

    /// Make a token; returns the secret (shown once, never stored).
    pub fn create(&self, name: &str, ceiling: Ceiling) -> Result<String, TokenError> {
        self.create_with(name, ceiling, false)
    }

    /// Make a token that may (`approver`) answer other tokens' approvals.
    pub fn create_with(
        &self,
        name: &str,
        ceiling: Ceiling,
        approver: bool,
    ) -> Result<String, TokenError> {
        if !valid_name(name) {
            return Err(TokenError::BadName(name.to_owned()));
        }
        let mut tokens = self.read()?;
        if tokens.iter().any(|t| t.name == name) {
            return Err(TokenError::Exists(name.to_owned()));
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| TokenError::Random(e.to_string()))?;
        let secret = format!("cordon_{}", hex::encode(raw));
        tokens.push(TokenRecord {
            name: name.to_owned(),
            sha256: digest(&secret),
            created_unix_ms: now_ms(),
            ceiling,
            approver,
        });
        self.write(&tokens)?;
        Ok(secret)
    }

    /// Remove a token; requests with it fail from now on.
    pub fn revoke(&self, name: &str) -> Result<(), TokenError> {
        let mut tokens = self.read()?;
        let before = tokens.len();
        tokens.retain(|t| t.name != name);
        if tokens.len() == before {
            return Err(TokenError::Missing(name.to_owned()));
        }
        self.write(&tokens)
    }

    /// Write the whole file: a 0600 temporary file beside it, synced, then
    /// renamed over it.
    fn write(&self, tokens: &[TokenRecord]) -> Result<(), TokenError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io(dir, "create the state directory"))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let tmp = dir.join(format!(".tokens.json.{}.tmp", std::process::id()));
        let body = serde_json::to_vec_pretty(&TokenFile {
            tokens: tokens.to_vec(),
        })
        .map_err(|e| TokenError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io(&self.path, "write the token file"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceiling() -> Ceiling {
        Ceiling {
            preset: TrustLevel::Low,
            memory: None,
            pids: None,
            allow_net: vec![],
            max_sandboxes: 2,
        }
    }

    #[test]
    fn create_authenticate_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::new(dir.path().join("tokens.json"));
        let secret = store.create("ci", ceiling()).unwrap();
        let text = std::fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains(&secret), "the secret itself is never stored");
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(store.authenticate(&secret).unwrap().unwrap().name, "ci");
        assert!(store.authenticate("cordon_wrong").unwrap().is_none());
        assert!(matches!(
            store.create("ci", ceiling()),
            Err(TokenError::Exists(_))
        ));
        assert!(matches!(
            store.create("owner", ceiling()),
            Err(TokenError::BadName(_))
        ));
        store.revoke("ci").unwrap();
        assert!(store.authenticate(&secret).unwrap().is_none());
        assert!(matches!(store.revoke("ci"), Err(TokenError::Missing(_))));
    }
}
