//! docs/openapi.json is the document the code generates. After changing
//! the API, regenerate it with
//! `CORDON_UPDATE_OPENAPI=1 cargo test -p cordon-server --test openapi`
//! (or `cordon serve --print-openapi > docs/openapi.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn committed_openapi_document_matches_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let generated = cordon_server::openapi::document();
    if std::env::var_os("CORDON_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json differs from the API in the code; regenerate it with \
         CORDON_UPDATE_OPENAPI=1 cargo test -p cordon-server --test openapi"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for route in [
        "/v1/sandboxes",
        "/v1/sandboxes/{id}/exec",
        "/v1/sandboxes/{id}/processes/{pid}/output",
        "/v1/approvals",
        "/v1/approvals/{id}",
        "/v1/approvals/events",
    ] {
        assert!(
            doc["paths"].get(route).is_some(),
            "{route} is in the document"
        );
    }
}
