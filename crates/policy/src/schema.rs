//! The JSON Schema of profile files, for editors and for checking profiles
//! outside cordon. `schema/profile.schema.json` holds a copy; a test fails
//! when it is stale (regenerate with `UPDATE_SCHEMA=1 cargo test -p cordon-policy`).

use schemars::generate::SchemaSettings;
use serde_json::Value;

use crate::file::ProfileFile;

/// The JSON Schema (draft 2020-12) of the profile file layer.
pub fn json_schema() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    let schema = generator.into_root_schema_for::<ProfileFile>();
    let mut v = schema.to_value();
    drop_null(&mut v);
    if let Value::Object(m) = &mut v {
        m.insert(
            "$id".into(),
            Value::String("https://cordon.invalid/schema/profile.schema.json".into()),
        );
    }
    v
}

/// TOML has no null: remove the `null` alternatives that optional fields get.
fn drop_null(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types.remove(0);
                    m.insert("type".into(), t);
                }
            }
            for key in ["anyOf", "oneOf"] {
                let mut collapse = None;
                if let Some(Value::Array(alts)) = m.get_mut(key) {
                    alts.retain(|a| a.get("type").and_then(Value::as_str) != Some("null"));
                    if alts.len() == 1 {
                        collapse = Some(alts.remove(0));
                    }
                }
                if let Some(only) = collapse {
                    m.remove(key);
                    if let Value::Object(inner) = only {
                        for (k, val) in inner {
                            m.entry(k).or_insert(val);
                        }
                    }
                }
            }
            for (_, child) in m.iter_mut() {
                drop_null(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn schema_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schema/profile.schema.json")
    }

    #[test]
    fn checked_in_schema_is_fresh() {
        let mut want = serde_json::to_string_pretty(&json_schema()).unwrap();
        want.push('\n');
        let path = schema_path();
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
            return;
        }
        // Compared as JSON values: the order of an object's keys depends on
        // whether serde_json's `preserve_order` is on in this build (a
        // workspace build unifies it on), not on the schema.
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        let have: serde_json::Value = serde_json::from_str(&have).unwrap_or_default();
        let want: serde_json::Value = serde_json::from_str(&want).unwrap();
        assert!(
            have == want,
            "schema/profile.schema.json is stale: run `UPDATE_SCHEMA=1 cargo test -p cordon-policy` and commit it"
        );
    }

    #[test]
    fn schema_has_no_nulls_and_denies_unknown_keys() {
        let s = serde_json::to_string(&json_schema()).unwrap();
        assert!(!s.contains("\"null\""), "{s}");
        let v = json_schema();
        assert_eq!(v["additionalProperties"], Value::Bool(false));
        assert!(v["properties"]["limits"].is_object());
    }
}
