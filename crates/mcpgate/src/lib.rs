//! cordon-mcpgate: the gateway of `cordon mcp wrap`. It stands between an
//! MCP client and an MCP server that runs inside a cordon sandbox, speaks
//! MCP's stdio transport on both sides, and polices what passes:
//!
//! * [`policy`]: per-tool allow/deny/ask and argument rules; a denied tool
//!   is absent from `tools/list`, a refused call is a tool error naming the
//!   rule. With a Cedar policy (`--cedar`, `cordon_authz`) each call is
//!   also an `Action::ToolCall` whose decision names its rule; the tool
//!   policy's verdict is its default and its denials a ceiling.
//! * [`ask`]: an "ask" is put to the person behind the client as an MCP
//!   elicitation (approve once / for the session, or deny) when the client
//!   declared that capability; otherwise, or unanswered in time, the call
//!   is refused with what would allow it.
//! * [`pins`]: the first `tools/list` is pinned; a changed or new tool is
//!   blocked until approved (the "rug pull").
//! * [`poison`]: descriptions with instructions aimed at the model are
//!   flagged (and hidden by default).
//! * results are redacted (secrets of the sandbox, well-known formats,
//!   canaries), and every call is an audit record.
//!
//! The JSON-RPC framing is written here rather than with an MCP SDK: a
//! gateway must pass every message it does not police unchanged (server
//! requests, notifications, fields of protocol revisions it does not
//! know), while an SDK parses into its own types and drops or rejects
//! what they lack. Newline-delimited JSON objects are all MCP's stdio
//! transport is, and serde_json parses them.
//!
//! # Policy file
//!
//! ```toml
//! default = "deny"          # tools not named: allow | deny | ask
//! record_args = false       # store raw arguments in the audit store
//! poisoning = "hide"        # hide | flag
//! canaries = ["CANARY-7f3a"]
//!
//! [tools.read_file]
//! decision = "allow"
//! [[tools.read_file.args]]
//! name = "path"
//! under = ["/srv/docs"]
//!
//! [tools.fetch]
//! decision = "allow"
//! [[tools.fetch.args]]
//! name = "url"
//! hosts = ["example.com", "*.example.org"]
//! max_size = 2048
//! ```

#![forbid(unsafe_code)]

pub mod ask;
pub mod gate;
pub mod io;
pub mod pins;
pub mod poison;
pub mod policy;
pub mod rules;

pub use gate::{Gate, Routed, ASK_TIMEOUT};
pub use io::{Gateway, UpstreamSink};
pub use pins::{pin_path, PinFile, Pins};
pub use policy::{Decision, Policy, PolicyFile, Verdict};
