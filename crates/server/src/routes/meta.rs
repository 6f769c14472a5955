//! `/v1/health` and `/v1/openapi.json`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::state::AppState;
use crate::wire::Health;

#[utoipa::path(get, path = "/v1/health", tag = "meta",
    responses((status = 200, description = "The server is up", body = Health)))]
pub async fn health(State(state): State<AppState>) -> Json<Health> {
    let sessions = state.engine().map(|e| e.sessions().len()).unwrap_or(0);
    let pool = state
        .engine()
        .map(|e| {
            let total = e.pool_stats();
            json!({
                "ready": total.ready,
                "target": total.target,
                "hits": total.hits,
                "misses": total.misses,
                "discarded": total.discarded,
                "pools": e.pools_stats(),
            })
        })
        .unwrap_or_else(|_| json!({"ready": 0}));
    Json(Health {
        status: "ok".into(),
        sessions,
        pool,
    })
}

#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API")))]
pub async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}
