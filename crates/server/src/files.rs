//! The files routes (`/v1/sandboxes/{id}/files/{path}`). Placeholder:
//! they answer 501 until the files API is in this build.

use axum::routing::any;
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/v1/sandboxes/{id}/files/{*path}",
        any(|| async { ApiError::not_implemented("the files API is not available in this build") }),
    )
}
