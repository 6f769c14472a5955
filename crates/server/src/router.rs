//! The routes, the authentication in front of them, and the bound on
//! requests handled at once.

use axum::extract::{Request, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::auth::authenticate;
use crate::error::ApiError;
use crate::routes::{approvals, exec, meta, sandboxes};
use crate::state::AppState;

/// The whole API.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/v1/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(sandboxes::show).delete(sandboxes::delete),
        )
        .route("/v1/sandboxes/{id}/exec", post(exec::exec))
        .route("/v1/sandboxes/{id}/processes", get(exec::processes))
        .route(
            "/v1/sandboxes/{id}/processes/{pid}/output",
            get(exec::output),
        )
        .route(
            "/v1/sandboxes/{id}/processes/{pid}/signal",
            post(exec::signal),
        )
        .route(
            "/v1/sandboxes/{id}/processes/{pid}/stdin",
            post(exec::stdin),
        )
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/events", get(approvals::events))
        .route(
            "/v1/approvals/{id}",
            get(approvals::show).post(approvals::answer),
        )
        .merge(crate::files::router())
        .merge(crate::contexts::router())
        .merge(crate::timeline::router())
        .merge(crate::grants::router())
        .route_layer(from_fn_with_state(state.clone(), authenticate))
        .route("/v1/health", get(meta::health))
        .route("/v1/openapi.json", get(meta::openapi))
        .merge(crate::console::router())
        .fallback(|| async {
            ApiError::not_found("no such route").with_fix("see GET /v1/openapi.json for the routes")
        })
        .layer(from_fn_with_state(state.clone(), bounded))
        .with_state(state)
}

/// At most `max_requests` requests in handlers at once; the next is 429.
async fn bounded(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Ok(_permit) = state.requests().clone().try_acquire_owned() else {
        return ApiError::at_capacity("the server is handling as many requests as it may")
            .into_response();
    };
    next.run(req).await
}
