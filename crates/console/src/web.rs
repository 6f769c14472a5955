//! The browser-facing rules: the cookie, the headers every console page
//! carries, and the cross-site check.
//!
//! The `Cookie` header is parsed here by hand: it is a list of
//! `name=value` pairs split by `;`, and the one cookie the console reads
//! does not justify a cookie-jar crate.

/// The console session cookie's name.
pub const COOKIE: &str = "cordon_console";

/// The header the page sends its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The Content-Security-Policy of every console response: scripts, styles
/// and connections only from the server itself, no inline script or
/// style, no plugins, no framing, forms post only back to the server.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The headers every console response carries.
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("content-security-policy", CSP),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
    ("cache-control", "no-store"),
];

/// `Set-Cookie` for a new session. No `Secure`: `cordon serve` speaks
/// plain HTTP (a TLS-terminating proxy in front should add it).
pub fn set_cookie(value: &str, max_age_secs: u64) -> String {
    format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_secs}")
}

/// `Set-Cookie` that removes the session cookie (logout).
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// The session cookie's value among the request's `Cookie` headers.
pub fn cookie_value<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    headers
        .into_iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// Is this a browser's request from another site (or a sandboxed frame)
/// that wants to change something? Such requests are refused whatever
/// credentials they carry: SameSite=Strict already keeps the cookie off
/// them, and this also covers the unix socket (no cookie needed there)
/// when someone forwards it to a port a browser can reach.
///
/// `safe`: the method is GET, HEAD or OPTIONS. `sec_fetch_site`: the
/// `Sec-Fetch-Site` header (every current browser sends it). `origin` and
/// `host`: the `Origin` and `Host` headers.
pub fn cross_site(
    safe: bool,
    sec_fetch_site: Option<&str>,
    origin: Option<&str>,
    host: Option<&str>,
) -> bool {
    if safe {
        return false;
    }
    // A browser says where a request comes from in Sec-Fetch-Site; only
    // without it (an older browser, or not a browser) is Origin compared
    // with Host. (Origin alone misleads: under `Referrer-Policy:
    // no-referrer` a same-origin form post says `Origin: null`.)
    if let Some(site) = sec_fetch_site {
        return !matches!(site.trim(), "same-origin" | "none");
    }
    match origin.map(str::trim) {
        None => false,
        Some("null") => true,
        Some(o) => {
            let authority = o.split_once("://").map_or(o, |(_, rest)| rest);
            host.map(str::trim) != Some(authority.trim_end_matches('/'))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_httponly_strict_and_found_among_others() {
        let c = set_cookie("abc", 60);
        for part in [
            "cordon_console=abc",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=60",
        ] {
            assert!(c.contains(part), "{c} has {part}");
        }
        assert!(clear_cookie().contains("Max-Age=0"));
        assert_eq!(cookie_value(["a=1; cordon_console=xyz; b=2"]), Some("xyz"));
        assert_eq!(cookie_value(["a=1", "cordon_console=q"]), Some("q"));
        assert_eq!(cookie_value(["xcordon_console=1; cordon_consolex=2"]), None);
        assert_eq!(cookie_value(["cordon_console="]), None);
        assert_eq!(cookie_value([]), None);
    }

    #[test]
    fn cross_site_writes_are_recognised() {
        let host = Some("127.0.0.1:8080");
        assert!(!cross_site(false, None, None, host), "a non-browser client");
        assert!(!cross_site(
            false,
            Some("same-origin"),
            Some("http://127.0.0.1:8080"),
            host
        ));
        assert!(!cross_site(false, Some("none"), None, host));
        assert!(
            !cross_site(false, Some("same-origin"), Some("null"), host),
            "Sec-Fetch-Site decides"
        );
        assert!(cross_site(false, Some("cross-site"), None, host));
        assert!(cross_site(false, Some("same-site"), None, host));
        assert!(cross_site(false, None, Some("http://evil.example"), host));
        assert!(cross_site(false, None, Some("null"), host));
        assert!(cross_site(false, None, Some("http://127.0.0.1:8080"), None));
        assert!(
            !cross_site(true, Some("cross-site"), Some("http://evil.example"), host),
            "reads are not refused here"
        );
    }
}
