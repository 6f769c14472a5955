//! The OpenAPI 3.1 document, generated from the handlers and types
//! (committed as docs/openapi.json; a test keeps the two equal).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
use crate::routes::{approvals, exec, meta, sandboxes};
use crate::wire;
use crate::{contexts, files, grants, timeline};

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cordon serve",
        version = "1",
        description = "Long-lived sandboxes over HTTP. The unix socket's caller is the owner; over TCP every request needs `Authorization: Bearer TOKEN` (or the web console's session cookie, with `X-CSRF-Token` on every request that changes something). See docs/api.md."
    ),
    paths(
        sandboxes::create, sandboxes::list, sandboxes::show, sandboxes::delete,
        exec::exec, exec::processes, exec::output, exec::signal, exec::stdin,
        files::read, files::write, files::delete,
        contexts::create, contexts::list, contexts::run, contexts::remove,
        timeline::timeline, timeline::verify,
        grants::create, grants::list, grants::remove,
        approvals::list, approvals::events, approvals::show, approvals::answer,
        meta::health, meta::openapi,
    ),
    components(schemas(
        ErrorBody, ErrorDetail,
        wire::CreateSandbox, wire::DurationValue, wire::SizeValue, wire::SandboxView,
        wire::SandboxList, wire::LimitsView, wire::UsageView, wire::ExecBody, wire::ExecReply, wire::ExecLimitsView,
        wire::ExitView, wire::ExecUsageView, crate::hints::HintView, wire::Started, wire::ProcessView,
        wire::ProcessList, wire::OutputReply, wire::SignalBody, wire::SignalValue, wire::Health,
        files::ListingView, files::EntryView,
        contexts::CreateContext, contexts::ContextView, contexts::ContextList, contexts::RunCell,
        contexts::CellReply, contexts::CellErrorView,
        timeline::Timeline, timeline::TimelineEntry, timeline::VerifyView, timeline::ProblemView,
        grants::GrantRequest, grants::GrantView, grants::GrantList,
        approvals::ApprovalList, approvals::AnswerBody, approvals::ConfirmReply,
        cordon_approvals::Approval, cordon_approvals::ApprovalState,
    )),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
struct ApiDoc;

/// The document as pretty JSON (what `cordon serve --print-openapi`
/// prints and docs/openapi.json holds).
pub fn document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
