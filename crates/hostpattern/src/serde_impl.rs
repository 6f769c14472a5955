//! A pattern (de)serializes as its text form; with the `schemars` feature it
//! is a string in a JSON Schema.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::HostPattern;

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HostPattern;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a host pattern such as \"api.example.com\" or \"*.example.com:443\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HostPattern, E> {
                HostPattern::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(feature = "schemars")]
impl schemars::JsonSchema for HostPattern {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HostPattern".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "An exact host (api.example.com, 203.0.113.7, [2001:db8::1]) or *.domain (every name below domain, not domain itself), optionally with :port. A bare * or *.tld is refused.",
            "minLength": 1
        })
    }
}
