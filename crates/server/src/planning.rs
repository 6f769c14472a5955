//! From a create request to a sandbox spec: the preset (or the owner's
//! profile), the request's overrides, the caller's ceiling, then
//! `cordon-plan` as for `cordon run`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_policy::{CwdAccess, HostPattern, Overrides, Profile, TrustLevel};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::tokens::Ceiling;
use crate::wire::CreateSandbox;

/// Every sandbox's writable scratch tree and default working directory.
pub const WORKSPACE: &str = "/workspace";

/// A create request, checked and resolved.
#[derive(Debug)]
pub struct Plan {
    pub profile: Profile,
    /// `low`, `medium`, ... or `profile` when the owner sent one.
    pub profile_name: String,
    pub spec: cordon_jail::Spec,
    pub idle_timeout: Option<Duration>,
    pub ttl: Option<Duration>,
    /// The secrets' identity (per-sandbox CA, bindings) for the proxy's TLS
    /// interception; `None` without secrets.
    pub identity: Option<cordon_egress::Identity>,
}

fn absolute(paths: &[String], field: &str) -> Result<Vec<PathBuf>, ApiError> {
    paths
        .iter()
        .map(|p| {
            let path = PathBuf::from(p);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(
                    ApiError::bad_request(format!("{field}: '{p}' is not an absolute host path"))
                        .with_fix("name host paths from the root, e.g. /home/me/project"),
                )
            }
        })
        .collect()
}

fn host_patterns(hosts: &[String]) -> Result<Vec<HostPattern>, ApiError> {
    hosts
        .iter()
        .map(|h| {
            HostPattern::parse(h)
                .map_err(|e| ApiError::bad_request(format!("allow_net: '{h}': {e}")))
        })
        .collect()
}

/// The base profile: the preset named, or the owner's profile document.
fn base_profile(req: &CreateSandbox, caller: &Caller) -> Result<(Profile, String), ApiError> {
    if let Some(doc) = &req.profile {
        if !caller.is_owner() {
            return Err(ApiError::forbidden(
                "a token may not send a profile; use a preset and its overrides",
            )
            .with_fix(
                "send \"preset\" instead of \"profile\", or use the unix socket as the owner",
            ));
        }
        if req.preset.is_some() {
            return Err(ApiError::bad_request(
                "give \"preset\" or \"profile\", not both",
            ));
        }
        let profile = Profile::from_json_str(&doc.to_string(), "request")
            .map_err(|e| ApiError::unprocessable(format!("profile: {e}")))?;
        return Ok((profile, "profile".into()));
    }
    let level: TrustLevel = match &req.preset {
        Some(p) => p.parse().map_err(|e: cordon_policy::ValueError| {
            ApiError::bad_request(format!("preset: {e}"))
        })?,
        None => TrustLevel::Untrusted,
    };
    Ok((Profile::preset(level), level.as_str().to_owned()))
}

/// Refuse what is beyond a token's ceiling (403, saying which limit).
fn check_ceiling(
    req: &CreateSandbox,
    profile: &Profile,
    ceiling: &Ceiling,
    name: &str,
) -> Result<(), ApiError> {
    let beyond = |what: String| {
        ApiError::forbidden(format!("token '{name}': {what}"))
            .with_fix("ask within the token's ceiling (`cordon token list` shows it), or ask the owner for a wider token")
    };
    if profile.extends > ceiling.preset {
        return Err(beyond(format!(
            "preset {} is beyond this token's ceiling ({})",
            profile.extends, ceiling.preset
        )));
    }
    if !req.rw.is_empty() || !req.ro.is_empty() {
        return Err(beyond(
            "binding host paths (rw, ro) is for the owner only".into(),
        ));
    }
    if let Some(max) = ceiling.memory {
        if profile.limits.memory.0 == 0 || profile.limits.memory.0 > max {
            return Err(beyond(format!(
                "memory {} is beyond the ceiling of {max} bytes",
                profile.limits.memory.0
            )));
        }
    }
    if let Some(max) = ceiling.pids {
        if profile.limits.pids == 0 || profile.limits.pids > max {
            return Err(beyond(format!(
                "pids {} is beyond the ceiling of {max}",
                profile.limits.pids
            )));
        }
    }
    let allowed = host_patterns(&ceiling.allow_net)?;
    for asked in &profile.network.allow {
        if !allowed.iter().any(|a| a.covers(asked)) {
            return Err(beyond(format!(
                "host {asked} is not among the hosts this token may allow"
            )));
        }
    }
    Ok(())
}

/// The spec a warm pool for `preset` is built from: what a create naming
/// only that preset gets (a create that adds paths, limits, hosts or
/// environment is still served by it; see cordon_session's pool).
pub fn pool_base(preset: &str) -> Result<cordon_jail::Spec, ApiError> {
    let req = CreateSandbox {
        preset: Some(preset.to_owned()),
        ..CreateSandbox::default()
    };
    Ok(plan(&req, &Caller::owner())?.spec)
}

/// Resolve and check a create request.
pub fn plan(req: &CreateSandbox, caller: &Caller) -> Result<Plan, ApiError> {
    let (base, profile_name) = base_profile(req, caller)?;
    let mut o = Overrides {
        read_write: absolute(&req.rw, "rw")?,
        read_only: absolute(&req.ro, "ro")?,
        // A sandbox of the server has no working directory of the host.
        cwd: Some(CwdAccess::None),
        pids: req.pids,
        allow_hosts: host_patterns(&req.allow_net)?,
        env_set: req
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..Overrides::default()
    };
    if let Some(m) = &req.memory {
        o.memory = Some(cordon_policy::ByteSize(m.to_bytes("memory")?));
    }
    if !req.secrets.is_empty() && !caller.is_owner() {
        // A secret's value is read from the server's own environment.
        return Err(ApiError::forbidden(
            "secrets are for the owner only: their values come from the server's environment",
        )
        .with_fix("use the unix socket as the owner, or run `cordon run --secret` yourself"));
    }
    for text in &req.secrets {
        let secret = cordon_policy::Secret::parse_flag(text)
            .map_err(|e| ApiError::bad_request(format!("secrets: {e}")))?;
        o.secrets.push(secret);
    }
    if let Some(ceiling) = caller.ceiling() {
        // Unset limits take the ceiling when the preset's is larger.
        if req.memory.is_none() {
            if let Some(max) = ceiling.memory {
                if base.limits.memory.0 == 0 || base.limits.memory.0 > max {
                    o.memory = Some(cordon_policy::ByteSize(max));
                }
            }
        }
        if req.pids.is_none() {
            if let Some(max) = ceiling.pids {
                if base.limits.pids == 0 || base.limits.pids > max {
                    o.pids = Some(max);
                }
            }
        }
    }
    let profile = base
        .with_overrides(&o)
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    if let Some(ceiling) = caller.ceiling() {
        check_ceiling(req, &profile, ceiling, caller.name())?;
    }
    let mut spec = cordon_plan::sandbox_spec(&profile, Path::new("/"))
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    // A writable scratch tree, the working directory of every exec.
    spec.workspace = Some(PathBuf::from(WORKSPACE));
    spec.cwd = PathBuf::from(WORKSPACE);
    cordon_plan::protect_host_tools(&profile, &mut spec);
    // Secrets: a placeholder inside, the value only in the proxy, which
    // intercepts TLS to their hosts with a per-sandbox CA the sandbox trusts.
    let resolved = cordon_plan::secrets::resolve(&profile.secrets)
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let identity = cordon_plan::secrets::arm(&mut spec, &resolved, None)
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    // The session's lifetime is `ttl` (else the profile's timeout), not a
    // per-command deadline.
    let ttl = match &req.ttl {
        Some(t) => Some(t.to_duration("ttl")?),
        None => None,
    };
    let idle_timeout = match &req.idle_timeout {
        Some(t) => Some(t.to_duration("idle_timeout")?),
        None => None,
    };
    Ok(Plan {
        profile,
        profile_name,
        spec,
        idle_timeout,
        ttl,
        identity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(preset: TrustLevel, hosts: &[&str]) -> Caller {
        Caller::token(
            "t".into(),
            Ceiling {
                preset,
                memory: Some(256 << 20),
                pids: None,
                allow_net: hosts.iter().map(|h| h.to_string()).collect(),
                max_sandboxes: 1,
            },
        )
    }

    fn req(json: &str) -> CreateSandbox {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_token_cannot_widen_beyond_its_ceiling() {
        let low = token(TrustLevel::Low, &["pypi.org"]);
        let err = |r: &str| plan(&req(r), &low).unwrap_err();
        assert_eq!(err(r#"{"preset":"high"}"#).status.as_u16(), 403);
        assert_eq!(err(r#"{"memory":"1G"}"#).status.as_u16(), 403);
        assert_eq!(err(r#"{"rw":["/tmp"]}"#).status.as_u16(), 403);
        assert_eq!(err(r#"{"profile":{}}"#).status.as_u16(), 403);
        assert_eq!(
            err(r#"{"allow_net":["evil.example"]}"#).status.as_u16(),
            403
        );
        let ok = plan(&req(r#"{"preset":"low"}"#), &low).unwrap();
        assert_eq!(
            ok.spec.limits.memory,
            Some(256 << 20),
            "the ceiling's memory is the default"
        );
    }

    #[test]
    fn the_owner_has_no_ceiling() {
        let p = plan(&req(r#"{"preset":"high","memory":"1G"}"#), &Caller::owner()).unwrap();
        assert_eq!(p.spec.limits.memory, Some(1 << 30));
        assert_eq!(p.profile_name, "high");
        assert_eq!(
            plan(&req(r#"{"rw":["relative"]}"#), &Caller::owner())
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
    }
}
