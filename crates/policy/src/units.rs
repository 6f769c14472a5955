//! Sizes and durations as people write them: `512MiB`, `1.5G`, `30s`, `1h30m`.
//!
//! Sizes: a number (integer or decimal) and an optional unit, case-insensitive.
//! `K`, `M`, `G`, `T` (and `KiB`, `MiB`, `GiB`, `TiB`, `Ki`, `Mi`, ...) are binary
//! (powers of 1024); `KB`, `MB`, `GB`, `TB` are decimal (powers of 1000);
//! `B` or no unit means bytes. In TOML a plain integer is also accepted (bytes).
//!
//! Durations: one or more `<integer><unit>` parts, units `ms`, `s`, `m`, `h`,
//! `d` (lower case), e.g. `250ms`, `30s`, `5m`, `1h30m`. A plain integer is
//! seconds (also as a TOML integer).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that could not be parsed. `Display` gives one line:
/// what was wrong, then `; ` and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}; {hint}")]
pub struct ValueError {
    /// What was wrong, e.g. `'512XB' is not a size`.
    pub message: String,
    /// What is allowed instead.
    pub hint: String,
}

impl ValueError {
    pub(crate) fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        ValueError {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// A host pattern's error has the same two parts.
impl From<cordon_hostpattern::PatternError> for ValueError {
    fn from(e: cordon_hostpattern::PatternError) -> Self {
        ValueError {
            message: e.message,
            hint: e.hint,
        }
    }
}

const SIZE_HINT: &str = "write a number with a unit such as 512MiB or 2GiB";
const DURATION_HINT: &str =
    "write a number with a unit such as 250ms, 30s, 5m or 1h30m (a plain number is seconds)";

/// A number of bytes. Parses `512MiB`, `2GiB`, `64k`, `1.5G`, `1000000`;
/// displays the shortest exact form (`512MiB`, `1536B` stays `1536B` unless a
/// unit divides it: `1.5KiB` is written `1536B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const KIB: u64 = 1024;
    pub const MIB: u64 = 1024 * 1024;
    pub const GIB: u64 = 1024 * 1024 * 1024;
    pub const TIB: u64 = 1024 * 1024 * 1024 * 1024;

    /// `n` bytes.
    pub const fn bytes(n: u64) -> Self {
        ByteSize(n)
    }
    /// `n` KiB.
    pub const fn kib(n: u64) -> Self {
        ByteSize(n * Self::KIB)
    }
    /// `n` MiB.
    pub const fn mib(n: u64) -> Self {
        ByteSize(n * Self::MIB)
    }
    /// `n` GiB.
    pub const fn gib(n: u64) -> Self {
        ByteSize(n * Self::GIB)
    }
    /// The number of bytes.
    pub const fn as_u64(self) -> u64 {
        self.0
    }
}

/// Parses a size such as `512MiB`, `2GiB`, `64k`, `1.5G` or `4096` (bytes).
pub fn parse_size(text: &str) -> Result<ByteSize, ValueError> {
    let bad = || ValueError::new(format!("'{text}' is not a size"), SIZE_HINT);
    let s = text.trim();
    if s.is_empty() {
        return Err(ValueError::new("an empty string is not a size", SIZE_HINT));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let unit = unit.trim();
    if num.is_empty() {
        if s.starts_with('-') {
            return Err(ValueError::new(
                format!("'{text}' is negative"),
                "a size must be zero or more, such as 512MiB",
            ));
        }
        return Err(bad());
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        "t" | "ti" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    let too_big = || {
        ValueError::new(
            format!("'{text}' is too large"),
            "a size must fit in 64 bits (at most 16EiB)",
        )
    };
    if let Some((int, frac)) = num.split_once('.') {
        if frac.contains('.') || frac.is_empty() {
            return Err(bad());
        }
        let int_v: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| too_big())?
        };
        let whole = int_v.checked_mul(mult).ok_or_else(too_big)?;
        // Fractional part, computed exactly with integers (up to 18 digits).
        let frac = &frac[..frac.len().min(18)];
        let frac_v: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| bad())?
        };
        let scale = 10u128.pow(frac.len() as u32);
        let part = (frac_v * u128::from(mult) + scale / 2) / scale;
        let part = u64::try_from(part).map_err(|_| too_big())?;
        let total = whole.checked_add(part).ok_or_else(too_big)?;
        if mult == 1 && frac_v != 0 {
            return Err(ValueError::new(
                format!("'{text}' is not a whole number of bytes"),
                SIZE_HINT,
            ));
        }
        Ok(ByteSize(total))
    } else {
        let v: u64 = num.parse().map_err(|_| too_big())?;
        v.checked_mul(mult).map(ByteSize).ok_or_else(too_big)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n == 0 {
            return f.write_str("0B");
        }
        for (unit, m) in [
            ("TiB", Self::TIB),
            ("GiB", Self::GIB),
            ("MiB", Self::MIB),
            ("KiB", Self::KIB),
        ] {
            if n.is_multiple_of(m) {
                return write!(f, "{}{unit}", n / m);
            }
        }
        for (unit, m) in [
            ("TB", 1_000_000_000_000u64),
            ("GB", 1_000_000_000),
            ("MB", 1_000_000),
            ("KB", 1_000),
        ] {
            if n.is_multiple_of(m) {
                return write!(f, "{}{unit}", n / m);
            }
        }
        write!(f, "{n}B")
    }
}

impl FromStr for ByteSize {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"512MiB\" or \"2GiB\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| {
                    E::custom(ValueError::new(
                        format!("{v} is negative"),
                        "a size must be zero or more, such as 512MiB",
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A size: a number with an optional unit. K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000; no unit means bytes. Examples: \"512MiB\", \"2GiB\", \"64k\", \"1.5G\".",
            "anyOf": [
                { "type": "string", "pattern": "^\\s*([0-9][0-9_]*(\\.[0-9]+)?|\\.[0-9]+)\\s*([bB]|[kKmMgGtT]([iI][bB]?|[bB])?)?\\s*$" },
                { "type": "integer", "minimum": 0 }
            ]
        })
    }
}

/// A duration written as `30s`, `250ms`, `5m`, `1h30m`, `2h` or a plain number
/// of seconds. Kept at millisecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationSpec(Duration);

impl DurationSpec {
    /// `n` milliseconds.
    pub const fn millis(n: u64) -> Self {
        DurationSpec(Duration::from_millis(n))
    }
    /// `n` seconds.
    pub const fn secs(n: u64) -> Self {
        DurationSpec(Duration::from_secs(n))
    }
    /// `n` minutes.
    pub const fn mins(n: u64) -> Self {
        DurationSpec(Duration::from_secs(n * 60))
    }
    /// `n` hours.
    pub const fn hours(n: u64) -> Self {
        DurationSpec(Duration::from_secs(n * 3600))
    }
    /// The duration.
    pub const fn as_duration(self) -> Duration {
        self.0
    }
    /// Whole milliseconds.
    pub fn as_millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

impl From<Duration> for DurationSpec {
    /// Truncates to whole milliseconds.
    fn from(d: Duration) -> Self {
        DurationSpec(Duration::from_millis(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        ))
    }
}

impl From<DurationSpec> for Duration {
    fn from(d: DurationSpec) -> Self {
        d.0
    }
}

/// Parses a duration such as `30s`, `250ms`, `5m`, `1h30m`, `2h`, `1d` or a plain
/// number of seconds (`90`).
pub fn parse_duration(text: &str) -> Result<DurationSpec, ValueError> {
    let bad = || ValueError::new(format!("'{text}' is not a duration"), DURATION_HINT);
    let too_big = || {
        ValueError::new(
            format!("'{text}' is too long"),
            "a duration must be less than about 584 million years",
        )
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(ValueError::new(
            "an empty string is not a duration",
            DURATION_HINT,
        ));
    }
    if s.starts_with('-') {
        return Err(ValueError::new(
            format!("'{text}' is negative"),
            "a duration must be zero or more, such as 30s",
        ));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().map_err(|_| too_big())?;
        let ms = secs.checked_mul(1000).ok_or_else(too_big)?;
        return Ok(DurationSpec::millis(ms));
    }
    let mut total_ms: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| too_big())?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let mult: u64 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(ValueError::new(
                    format!("'{text}' has a number without a unit"),
                    DURATION_HINT,
                ))
            }
            _ => return Err(bad()),
        };
        let part = n.checked_mul(mult).ok_or_else(too_big)?;
        total_ms = total_ms.checked_add(part).ok_or_else(too_big)?;
    }
    Ok(DurationSpec::millis(total_ms))
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ms = self.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        let h = ms / 3_600_000;
        ms %= 3_600_000;
        let m = ms / 60_000;
        ms %= 60_000;
        let s = ms / 1000;
        ms %= 1000;
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        if s > 0 {
            write!(f, "{s}s")?;
        }
        if ms > 0 {
            write!(f, "{ms}ms")?;
        }
        Ok(())
    }
}

impl FromStr for DurationSpec {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s)
    }
}

impl Serialize for DurationSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\", \"5m\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationSpec, E> {
                parse_duration(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationSpec, E> {
                v.checked_mul(1000)
                    .map(DurationSpec::millis)
                    .ok_or_else(|| {
                        E::custom(ValueError::new(
                            format!("{v} seconds is too long"),
                            DURATION_HINT,
                        ))
                    })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationSpec, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(ValueError::new(
                        format!("{v} is negative"),
                        "a duration must be zero or more, such as 30s",
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for DurationSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration: one or more parts <number><unit> with units ms, s, m, h, d, e.g. \"250ms\", \"30s\", \"5m\", \"1h30m\". A plain number is seconds.",
            "anyOf": [
                { "type": "string", "pattern": "^\\s*([0-9]+|([0-9]+\\s*(ms|s|m|h|d)\\s*)+)$" },
                { "type": "integer", "minimum": 0 }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("512B", 512),
            ("64k", 64 * 1024),
            ("64K", 64 * 1024),
            ("64KiB", 64 * 1024),
            ("64kb", 64_000),
            ("512MiB", 512 << 20),
            ("512Mi", 512 << 20),
            ("512mb", 512_000_000),
            ("2GiB", 2 << 30),
            ("2G", 2 << 30),
            ("1.5G", 3 << 29),
            ("1.5 GiB", 3 << 29),
            ("0.5k", 512),
            (".5k", 512),
            ("1T", 1 << 40),
            ("1_000", 1000),
            (" 8MiB ", 8 << 20),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text), Ok(ByteSize(*want)), "{text}");
        }
    }

    #[test]
    fn sizes_refused() {
        let e = parse_size("512XB").unwrap_err();
        assert_eq!(
            e.to_string(),
            "'512XB' is not a size; write a number with a unit such as 512MiB or 2GiB"
        );
        for bad in [
            "", "MiB", "1..5G", "1.G", ".", "1.5", "-1G", "12 34", "1e9", "0x10", "G5", "5GiBs",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_size("100000000T")
            .unwrap_err()
            .message
            .contains("too large"));
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn sizes_display_round_trip() {
        for (n, text) in [
            (0u64, "0B"),
            (1, "1B"),
            (1024, "1KiB"),
            (1536, "1536B"),
            (512 << 20, "512MiB"),
            (3 << 29, "1536MiB"),
            (1 << 40, "1TiB"),
            (1_000_000, "1MB"),
            (1001, "1001B"),
        ] {
            assert_eq!(ByteSize(n).to_string(), text);
            assert_eq!(parse_size(text), Ok(ByteSize(n)));
        }
    }

    #[test]
    fn durations_parse() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("90", 90_000),
            ("30s", 30_000),
            ("250ms", 250),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1h 30m", 5_400_000),
            ("30 s", 30_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("1m30s500ms", 90_500),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_duration(text),
                Ok(DurationSpec::millis(*want)),
                "{text}"
            );
        }
    }

    #[test]
    fn durations_refused() {
        let e = parse_duration("5 minutes").unwrap_err();
        assert!(e.to_string().starts_with("'5 minutes' is not a duration; "));
        for bad in ["", "s", "5M", "1.5h", "-3s", "5x", "h5", "5 min", "5 5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_duration("99999999999999999999s").is_err());
        assert!(parse_duration("18446744073709551615h").is_err());
    }

    #[test]
    fn durations_display_round_trip() {
        for (ms, text) in [
            (0u64, "0s"),
            (250, "250ms"),
            (30_000, "30s"),
            (300_000, "5m"),
            (5_400_000, "1h30m"),
            (90_500, "1m30s500ms"),
            (86_400_000, "24h"),
        ] {
            assert_eq!(DurationSpec::millis(ms).to_string(), text);
            assert_eq!(parse_duration(text), Ok(DurationSpec::millis(ms)));
        }
    }

    #[test]
    fn serde_accepts_strings_and_integers() {
        #[derive(Deserialize, Serialize)]
        struct T {
            s: ByteSize,
            d: DurationSpec,
        }
        let t: T = toml::from_str("s = \"1GiB\"\nd = \"1h30m\"").unwrap();
        assert_eq!(t.s, ByteSize::gib(1));
        assert_eq!(t.d, DurationSpec::mins(90));
        let t: T = toml::from_str("s = 4096\nd = 30").unwrap();
        assert_eq!(t.s, ByteSize(4096));
        assert_eq!(t.d, DurationSpec::secs(30));
        assert_eq!(
            toml::to_string(&t).unwrap(),
            "s = \"4KiB\"\nd = \"30s\"\n".to_string()
        );
        assert!(toml::from_str::<T>("s = -1\nd = 1").is_err());
        assert!(toml::from_str::<T>("s = 1\nd = -1").is_err());
    }
}
