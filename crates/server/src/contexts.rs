//! The code-context routes (`/v1/sandboxes/{id}/contexts...`).
//! Placeholder: they answer 501 until code contexts are in this build.

use axum::routing::any;
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    let unavailable =
        || async { ApiError::not_implemented("code contexts are not available in this build") };
    Router::new()
        .route("/v1/sandboxes/{id}/contexts", any(unavailable))
        .route("/v1/sandboxes/{id}/contexts/{*rest}", any(unavailable))
}
