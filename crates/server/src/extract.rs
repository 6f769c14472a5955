//! Reading request bodies: bounded in size and in time (a client that
//! trickles its body is cut off with 408), JSON decoded with an error the
//! caller can act on.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, Limited};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// Bytes a JSON request body may have.
pub const JSON_BODY_LIMIT: usize = 1 << 20;
/// Bytes one stdin write may have.
pub const STDIN_BODY_LIMIT: usize = 8 << 20;

/// Read a whole body, at most `limit` bytes, within `timeout`.
pub async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    let read = Limited::new(body, limit).collect();
    match tokio::time::timeout(timeout, read).await {
        Err(_) => Err(ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {}s",
                timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::too_large(format!(
                    "the request body is larger than {limit} bytes"
                )))
            } else {
                Err(ApiError::bad_request(format!(
                    "cannot read the request body: {e}"
                )))
            }
        }
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// Decode a JSON request body; the message says where it went wrong.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(
            ApiError::bad_request("the request body is empty; send a JSON object")
                .with_fix("send at least `{}`"),
        );
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error(de)
}

fn serde_path_to_error<'de, T: DeserializeOwned>(
    de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
) -> Result<T, ApiError> {
    let value = T::deserialize(&mut *de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| {
        let status = if e.is_data() {
            ApiError::unprocessable(format!("the request does not fit: {e}"))
        } else {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        };
        status.with_fix("see docs/api.md or GET /v1/openapi.json for the fields")
    })
}

/// A JSON request body (at most [`JSON_BODY_LIMIT`] bytes).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("");
            let essence = ct.split(';').next().unwrap_or("").trim();
            // `curl -d` labels every body form-urlencoded; such a body is
            // still decoded as JSON (and refused if it is not).
            let json = essence.eq_ignore_ascii_case("application/json")
                || essence.to_ascii_lowercase().ends_with("+json")
                || essence.eq_ignore_ascii_case("application/x-www-form-urlencoded");
            if !json {
                return Err(ApiError::new(
                    axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("the body is {ct}, not application/json"),
                )
                .with_fix("send Content-Type: application/json"));
            }
        }
        let bytes = read_body(
            req.into_body(),
            JSON_BODY_LIMIT,
            state.limits().body_timeout,
        )
        .await?;
        decode_json(&bytes).map(ApiJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CreateSandbox, ExecBody};

    #[test]
    fn malformed_bodies_are_4xx_with_a_message() {
        for body in [
            &b"{"[..],
            b"[1,2",
            b"\x00\xff",
            b"{\"argv\": 3}",
            b"null",
            b"",
            b"{} x",
        ] {
            let e = decode_json::<ExecBody>(body).unwrap_err();
            assert!(e.status.is_client_error(), "{body:?} -> {e}");
            assert!(!e.message.is_empty());
        }
        assert_eq!(
            decode_json::<ExecBody>(b"{\"argv\": 3}")
                .unwrap_err()
                .status
                .as_u16(),
            422
        );
        assert!(decode_json::<CreateSandbox>(b"{}").is_ok());
    }
}
