//! `/v1/sandboxes`: create, list, show, delete.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use cordon_session::{CreateSession, EndCause, Session};
use serde_json::json;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiJson;
use crate::planning;
use crate::state::{AppState, SandboxMeta};
use crate::wire::{word, CreateSandbox, LimitsView, SandboxList, SandboxView, UsageView};

/// The API's view of a session.
pub fn view(state: &AppState, session: &Session) -> SandboxView {
    let info = session.info();
    let spec = session.spec();
    let (preset, allow_net) = state
        .with_meta(session.id(), |m| (m.preset.clone(), m.allow_net.clone()))
        .unwrap_or_default();
    let l = &spec.limits;
    // Raised by live grants while they last.
    let (memory, pids) = session.limits_in_force();
    SandboxView {
        id: info.id.clone(),
        state: word(&info.state),
        owner: info.owner.clone(),
        preset,
        created_unix_ms: info.created_unix_ms,
        ended: info.ended.as_ref().map(word),
        limits: LimitsView {
            memory_bytes: memory,
            pids,
            cpu_seconds: l.cpu.map(|d| d.as_secs()),
            open_files: l.open_files,
            file_size_bytes: l.file_size,
            output_bytes: l.output,
            network: format!("{:?}", spec.network).to_ascii_lowercase(),
            allow_net,
        },
        usage: UsageView::from(&info.usage),
    }
}

#[utoipa::path(post, path = "/v1/sandboxes", tag = "sandboxes",
    request_body = CreateSandbox,
    responses(
        (status = 201, description = "The sandbox runs", body = SandboxView),
        (status = 400, description = "Bad request", body = ErrorBody),
        (status = 403, description = "Beyond the token's ceiling, or refused by the policy or an approver", body = ErrorBody),
        (status = 422, description = "The sandbox cannot be built as asked", body = ErrorBody),
        (status = 429, description = "At capacity; see Retry-After", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the sandbox's record (`audit_unavailable`); nothing is left of it", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateSandbox>,
) -> Result<(StatusCode, Json<SandboxView>), ApiError> {
    let asked = cordon_authz::Action::CreateSandbox {
        profile: if req.profile.is_some() {
            "profile".to_owned()
        } else {
            req.preset.clone().unwrap_or_else(|| "untrusted".into())
        },
    };
    let mut plan = match planning::plan(&req, &caller) {
        Ok(p) => p,
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            return Err(state.ceiling_refused(&caller, None, asked, e).await)
        }
        Err(e) => return Err(e),
    };
    let allowed = state.check(&caller, None, asked).await?;
    if let Some(l) = allowed.limits {
        plan.spec.limits.tighten(l.memory, l.pids);
    }
    for secret in &plan.profile.secrets {
        let name = secret.name.clone();
        state
            .check(&caller, None, cordon_authz::Action::UseSecret { name })
            .await?;
    }
    let engine = state.engine()?.clone();
    let _slot = state.reserve(&caller)?;
    let proxied = plan.spec.network == cordon_jail::NetworkMode::Proxy;
    let session = engine
        .create(CreateSession {
            spec: plan.spec,
            idle_timeout: plan.idle_timeout,
            ttl: plan.ttl,
            owner: caller.name().to_owned(),
        })
        .await?;
    let id = session.id().to_owned();
    let allow_net: Vec<String> = plan
        .profile
        .network
        .allow
        .iter()
        .map(|h| h.to_string())
        .collect();
    state.audit().sandbox_created(
        &caller,
        &id,
        &plan.profile_name,
        json!({
            "preset": plan.profile_name,
            "allow_net": allow_net,
            "memory": session.spec().limits.memory,
            "secrets": plan.profile.secrets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        }),
    );
    let proxy_stop = match (proxied, session.take_proxy_listener()) {
        (true, Some(listener)) => {
            match crate::egress::start(
                &plan.profile,
                &id,
                listener,
                crate::egress::Recorders {
                    audit: state.audit().clone(),
                    notes: state.egress_notes().clone(),
                },
                plan.identity.clone(),
                session.live_grants(),
                Some(crate::egress::GateApprover {
                    state: state.clone(),
                    principal: caller.principal(),
                }),
            ) {
                Ok(stop) => Some(stop),
                Err(e) => {
                    let _ = engine.destroy(&id, EndCause::Deleted).await;
                    state
                        .audit()
                        .sandbox_ended("server", &id, "setup_failed", false);
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    state.insert_meta(
        id.clone(),
        SandboxMeta {
            owner: caller.name().to_owned(),
            preset: plan.profile_name,
            allow_net,
            proxy_stop,
        },
    );
    // The sandbox's run is in the store before anyone hears of the
    // sandbox: a server killed right after still has it recorded, and the
    // next start ends it as lost. (A power loss takes the sandbox too; the
    // sync for it follows at once.) A sandbox whose run cannot be
    // recorded is not handed out: it goes at once.
    if let Err(error) = state.audit().committed().await {
        let clean = engine
            .destroy(&id, EndCause::Deleted)
            .await
            .is_ok_and(|t| t.clean);
        forget(&state, &id);
        state
            .audit()
            .sandbox_ended("server", &id, "audit_failed", clean);
        return Err(ApiError::audit_unavailable(
            &error,
            state.audit().store_path(),
        ));
    }
    Ok((StatusCode::CREATED, Json(view(&state, &session))))
}

#[utoipa::path(get, path = "/v1/sandboxes", tag = "sandboxes",
    responses((status = 200, description = "The caller's sandboxes", body = SandboxList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<SandboxList>, ApiError> {
    let sessions: Vec<Arc<Session>> = state.engine()?.sessions();
    let sandboxes = sessions
        .iter()
        .filter(|s| caller.may_see(s.owner()))
        .map(|s| view(&state, s))
        .collect();
    Ok(Json(SandboxList { sandboxes }))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "The sandbox id")),
    responses(
        (status = 200, description = "The sandbox", body = SandboxView),
        (status = 404, description = "No such sandbox (or another token's)", body = ErrorBody),
    ))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SandboxView>, ApiError> {
    let session = state.session_for(&caller, &id)?;
    Ok(Json(view(&state, &session)))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "The sandbox id")),
    responses(
        (status = 204, description = "Torn down; nothing of it is left"),
        (status = 404, description = "No such sandbox (or another token's)", body = ErrorBody),
    ))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = state.session_for(&caller, &id)?;
    let teardown = state
        .engine()?
        .destroy(session.id(), EndCause::Deleted)
        .await?;
    ended(&state, &id);
    state.audit().record(
        &caller,
        "delete",
        Some(&id),
        json!({"clean": teardown.clean}),
    );
    state
        .audit()
        .sandbox_ended(caller.name(), &id, "deleted", teardown.clean);
    if !teardown.clean {
        return Err(ApiError::internal(format!(
            "sandbox {id} was torn down but something of it is left (see the server's log)"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// A sandbox was deleted or ended on its own: forget it, and expire the
/// approvals still pending for it (no approver is asked about a sandbox
/// that is gone). At shutdown only [`forget`]: pending approvals outlive
/// a restart.
pub fn ended(state: &AppState, id: &str) {
    forget(state, id);
    if let Err(e) = state.gate().approvals().expire_pending_of_session(id) {
        tracing::warn!("approvals: expiring those pending for {id}: {e}");
    }
}

/// Drop the server's record of a sandbox (its files quota and code
/// contexts too) and stop its proxy.
pub fn forget(state: &AppState, id: &str) {
    if let Err(e) = state.gate().approvals().session_ended(id) {
        tracing::warn!("approvals: ending the grants of {id}: {e}");
    }
    state.files().forget(id);
    state.contexts().forget(id);
    state.egress_notes().forget(id);
    if let Some(meta) = state.remove_meta(id) {
        if let Some(stop) = meta.proxy_stop {
            let _ = stop.send(());
        }
    }
}

/// Sandboxes that ended on their own (idle timeout, ttl, death): stop
/// their proxies and record their end. Run periodically.
pub fn reap(state: &AppState) {
    let Ok(engine) = state.engine() else { return };
    for id in state.meta_ids() {
        let end_cause = match engine.session(&id) {
            None => Some("gone".to_owned()),
            Some(s) => s.ended().map(|cause| word(&cause)),
        };
        if let Some(cause) = end_cause {
            ended(state, &id);
            state.audit().sandbox_ended("server", &id, &cause, true);
        }
    }
}
