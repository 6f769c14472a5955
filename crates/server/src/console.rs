//! The web console's routes (`/ui`): the page and its assets (compiled
//! in, see `cordon_console::assets`), login and logout, and the session's
//! CSRF token; and the cookie side of authentication (`caller`, used by
//! [`crate::auth`]).
//!
//! A login (`POST /ui/login`, a form with a token; on the unix socket an
//! empty token logs in as the owner) makes a console session and sets its
//! cookie: HttpOnly, SameSite=Strict, Path=/. With the cookie the browser
//! calls the same /v1 API as any client; a request that changes something
//! must also carry the session's CSRF token as `X-CSRF-Token`. A session is
//! good only on the listener it was made on, and ends at logout, when idle
//! or old (`cordon_console::ConsoleConfig`), and when its token is revoked.

use axum::extract::{Extension, Form, Path, State};
use axum::http::header::{CONTENT_TYPE, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cordon_console::{assets, web, Active, Login};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::{Caller, Transport};
use crate::error::ApiError;
use crate::state::AppState;
use crate::tokens::OWNER;

/// The console's routes (outside the API's authentication: each checks
/// the session itself).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/session", get(session))
        .route("/ui/assets/{name}", get(asset))
        .layer(map_response(security_headers))
}

async fn security_headers(mut resp: Response) -> Response {
    let headers = resp.headers_mut();
    for (name, value) in web::SECURITY_HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    resp
}

/// The console session cookie's value, if the request carries one.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<String> {
    web::cookie_value(
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    )
    .map(str::to_owned)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// 403 for a browser's cross-site request that would change something.
pub(crate) fn refuse_cross_site(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let cross = web::cross_site(
        is_safe(method),
        header(headers, "sec-fetch-site"),
        headers.get(ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(HOST).and_then(|v| v.to_str().ok()),
    );
    if cross {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            "a browser request from another site may not change anything here",
        )
        .with_fix("use the console at /ui on this server, or a client that is not a browser"));
    }
    Ok(())
}

/// The live console session of `cookie` on this listener, and its caller
/// (a token's ceiling is read again, so a changed or revoked token takes
/// effect at once).
fn active(
    state: &AppState,
    transport: Transport,
    cookie: &str,
) -> Result<(Active, Caller), ApiError> {
    let fix = "log in again at /ui/login";
    let active = state.console().check(cookie).ok_or_else(|| {
        ApiError::unauthorized("the console session has ended or never existed").with_fix(fix)
    })?;
    if active.login.unix != (transport == Transport::Unix) {
        return Err(ApiError::unauthorized(
            "this console session was made on another listener of the server",
        )
        .with_fix(fix));
    }
    let caller = match &active.login.token_digest {
        None => Caller::owner(),
        Some(digest) => {
            let record = state
                .tokens()
                .by_digest(digest)
                .map_err(|e| ApiError::internal(format!("cannot check the token: {e}")))?;
            match record {
                Some(r) => Caller::token(r.name, r.ceiling).with_approver(r.approver),
                None => {
                    state.console().end_token(digest);
                    return Err(ApiError::unauthorized(
                        "the token this console session was made with has been revoked",
                    )
                    .with_fix("log in again with a valid token"));
                }
            }
        }
    };
    Ok((active, caller))
}

/// The caller of an API request made with a console cookie: the session
/// must be live, and a request that changes something must carry the
/// session's CSRF token.
pub(crate) fn caller(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    transport: Transport,
    cookie: String,
) -> Result<Caller, ApiError> {
    let (active, caller) = active(state, transport, &cookie)?;
    if !is_safe(method) && !active.csrf_matches(header(headers, web::CSRF_HEADER)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "a request with a console cookie that changes something needs the session's X-CSRF-Token",
        )
        .with_fix("send the csrf value of GET /ui/session as the X-CSRF-Token header"));
    }
    Ok(caller)
}

fn transport_of(t: Option<Extension<Transport>>) -> Transport {
    t.map_or(Transport::Tcp, |Extension(t)| t)
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to)]).into_response()
}

fn html(status: StatusCode, body: String) -> Response {
    (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// `GET /ui`: the console, or the login page when not logged in.
async fn page(
    State(state): State<AppState>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
) -> Response {
    let logged_in = session_cookie(&headers)
        .is_some_and(|c| active(&state, transport_of(transport), &c).is_ok());
    if !logged_in {
        return see_other("/ui/login");
    }
    html(StatusCode::OK, assets::INDEX_HTML.to_owned())
}

async fn login_page() -> Response {
    html(StatusCode::OK, assets::LOGIN_HTML.to_owned())
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

/// `POST /ui/login`: a token (or, on the unix socket, nothing: the owner)
/// for a console session and its cookie.
async fn login(
    State(state): State<AppState>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Err(e) = refuse_cross_site(&Method::POST, &headers) {
        return e.into_response();
    }
    let transport = transport_of(transport);
    let unix = transport == Transport::Unix;
    let secret = form.token.trim();
    let (login, caller) = if secret.is_empty() && unix {
        (
            Login {
                name: OWNER.to_owned(),
                token_digest: None,
                unix,
            },
            Caller::owner(),
        )
    } else {
        match state.tokens().authenticate(secret) {
            Ok(Some(r)) if !secret.is_empty() => (
                Login {
                    name: r.name.clone(),
                    token_digest: Some(r.sha256.clone()),
                    unix,
                },
                Caller::token(r.name, r.ceiling).with_approver(r.approver),
            ),
            Ok(_) => return html(StatusCode::UNAUTHORIZED, assets::login_failed_html()),
            Err(e) => {
                return ApiError::internal(format!("cannot check the token: {e}")).into_response()
            }
        }
    };
    let issued = match state.console().login(login) {
        Ok(i) => i,
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    state.audit().record(
        &caller,
        "console_login",
        None,
        json!({"transport": if unix { "unix" } else { "tcp" }}),
    );
    let mut resp = see_other("/ui");
    if let Ok(v) = HeaderValue::from_str(&web::set_cookie(&issued.cookie, issued.max_age_secs)) {
        resp.headers_mut().insert(SET_COOKIE, v);
    }
    resp
}

/// `POST /ui/logout` (with the CSRF token): the session ends, the cookie
/// is removed.
async fn logout(
    State(state): State<AppState>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = refuse_cross_site(&Method::POST, &headers) {
        return e.into_response();
    }
    if let Some(cookie) = session_cookie(&headers) {
        match caller(
            &state,
            &Method::POST,
            &headers,
            transport_of(transport),
            cookie.clone(),
        ) {
            Ok(c) => {
                state.console().logout(&cookie);
                state.audit().record(&c, "console_logout", None, json!({}));
            }
            Err(e) if e.status == StatusCode::FORBIDDEN => return e.into_response(),
            Err(_) => {}
        }
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&web::clear_cookie()) {
        resp.headers_mut().insert(SET_COOKIE, v);
    }
    resp
}

/// What the page learns about its session.
#[derive(Debug, Serialize)]
struct SessionView {
    name: String,
    owner: bool,
    /// May answer other tokens' approvals (the owner, `--approver` tokens).
    approver: bool,
    csrf: String,
    expires_unix_ms: u64,
}

/// `GET /ui/session`: who is logged in, and the CSRF token the page sends.
/// Another site cannot read it: no CORS headers are ever sent, and the
/// cookie is SameSite=Strict.
async fn session(
    State(state): State<AppState>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
) -> Result<Json<SessionView>, ApiError> {
    let cookie = session_cookie(&headers)
        .ok_or_else(|| ApiError::unauthorized("not logged in").with_fix("log in at /ui/login"))?;
    let (active, caller) = active(&state, transport_of(transport), &cookie)?;
    let expires_unix_ms = active
        .expires_at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    Ok(Json(SessionView {
        name: caller.name().to_owned(),
        owner: caller.is_owner(),
        approver: caller.is_approver(),
        csrf: active.csrf().to_owned(),
        expires_unix_ms,
    }))
}

async fn asset(Path(name): Path<String>) -> Response {
    match assets::asset(&name) {
        Some(a) => ([(CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => ApiError::not_found(format!("no console asset '{name}'")).into_response(),
    }
}
