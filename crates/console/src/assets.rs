//! The console's files, compiled into the binary: no CDN, no build step,
//! works offline.

/// One file the console serves under `/ui/assets/`.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static str,
}

/// The console page (`GET /ui`).
pub const INDEX_HTML: &str = include_str!("../assets/index.html");

/// The login page (`GET /ui/login`).
pub const LOGIN_HTML: &str = include_str!("../assets/login.html");

const HIDDEN_ERROR: &str = r#"<p id="login-error" class="error" role="alert" hidden>"#;
const SHOWN_ERROR: &str = r#"<p id="login-error" class="error" role="alert">"#;

/// The login page with its (fixed) error paragraph shown: no text from the
/// request goes into it.
pub fn login_failed_html() -> String {
    LOGIN_HTML.replacen(HIDDEN_ERROR, SHOWN_ERROR, 1)
}

/// The asset called `name` (`app.js`, `app.css`).
pub fn asset(name: &str) -> Option<Asset> {
    let (content_type, body) = match name {
        "app.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../assets/app.js"),
        ),
        "app.css" => ("text/css; charset=utf-8", include_str!("../assets/app.css")),
        "icon.svg" => ("image/svg+xml", include_str!("../assets/icon.svg")),
        _ => return None,
    };
    Some(Asset { content_type, body })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// ` onclick=`, ` onload=`, ...
    fn has_handler_attribute(page: &str) -> bool {
        page.match_indices(" on").any(|(i, _)| {
            let rest = &page[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].starts_with('=')
        })
    }

    #[test]
    fn pages_load_no_inline_script_or_style_and_nothing_from_elsewhere() {
        for page in [INDEX_HTML, LOGIN_HTML] {
            assert!(!page.contains("<script>"), "no inline script");
            assert!(!page.contains("style="), "no inline style");
            assert!(!page.contains("<style"), "no style element");
            assert!(!has_handler_attribute(page), "no event-handler attributes");
            assert!(
                !page.contains("http://") && !page.contains("https://"),
                "nothing from elsewhere"
            );
        }
        assert!(login_failed_html().contains(SHOWN_ERROR));
        assert!(LOGIN_HTML.contains(HIDDEN_ERROR));
        assert!(asset("app.js").is_some() && asset("../lib.rs").is_none());
    }

    #[test]
    fn the_script_never_writes_markup() {
        let js = asset("app.js").unwrap().body;
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ] {
            assert!(!js.contains(sink), "app.js uses {sink}");
        }
    }
}
