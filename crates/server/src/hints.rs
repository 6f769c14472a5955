//! The hints an exec's reply carries when its output said what a first
//! command in a sandbox commonly runs into ([`cordon_plan::said`]): what
//! the sandbox allows and which field of `POST /v1/sandboxes` changes it.
//! A hint only informs; the command's own output is returned unchanged.

use cordon_session::Said;
use serde::Serialize;
use utoipa::ToSchema;

/// One hint: a stable `kind` for programs and a sentence for people (and
/// models).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct HintView {
    /// `read_only`, `no_network`, `no_process`, `no_memory`, or
    /// `egress_refused` (the proxy's answer to a connection while the
    /// command ran: refused, or an allowed host that could not be reached).
    pub kind: String,
    pub message: String,
}

impl From<Said> for HintView {
    fn from(said: Said) -> HintView {
        HintView {
            kind: crate::wire::word(&said),
            message: message(said).to_owned(),
        }
    }
}

fn message(said: Said) -> &'static str {
    match said {
        Said::ReadOnly => {
            "a write was refused as read-only: in a sandbox only its working directory \
             (/workspace unless the profile says otherwise), /tmp, /dev/shm and the paths \
             given as \"rw\" when it was created are writable"
        }
        Said::NoNetwork => {
            "a host name could not be resolved or reached: a sandbox has no DNS and reaches \
             only the hosts in its \"allow_net\" (or approved by a policy's ask), through \
             cordon's egress proxy, which HTTPS_PROXY and ALL_PROXY name inside; a client \
             that ignores those variables reaches no host"
        }
        Said::NoProcess => {
            "a process or thread could not be started: the sandbox's process limit was \
             reached; create the sandbox with a larger \"pids\" if the command needs more"
        }
        Said::NoMemory => {
            "an allocation was refused: the sandbox's memory limit may be too small for this \
             command; create the sandbox with a larger \"memory\""
        }
    }
}

/// The hints for what an exec's output said.
pub fn of(said: &[Said]) -> Vec<HintView> {
    said.iter().copied().map(HintView::from).collect()
}

/// Added to the proxy's answer for a host in no rule: its words name
/// `cordon run`'s flag.
pub const OVER_THE_API: &str = " (Over the API: \"allow_net\" when the sandbox is created.)";

/// The hints for the proxy's answers while an exec ran
/// ([`crate::egress_notes`]), kind `egress_refused`: what the proxy said
/// (why, and how to allow the host) and, for a host in no rule, the
/// field that allows it through the API.
pub fn egress(answers: Vec<crate::egress_notes::Answer>) -> Vec<HintView> {
    answers
        .into_iter()
        .map(|a| {
            let said = a.message.strip_prefix("cordon: ").unwrap_or(&a.message);
            let api = if a.rule == "unlisted" {
                OVER_THE_API
            } else {
                ""
            };
            HintView {
                kind: "egress_refused".into(),
                message: format!(
                    "the sandbox's egress proxy answered a connection while the command ran: \
                     {said}{api}"
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_spelt_as_the_api_documents() {
        let kinds: Vec<String> = of(&[
            Said::ReadOnly,
            Said::NoNetwork,
            Said::NoProcess,
            Said::NoMemory,
        ])
        .into_iter()
        .map(|h| h.kind)
        .collect();
        assert_eq!(
            kinds,
            ["read_only", "no_network", "no_process", "no_memory"]
        );
    }
}
