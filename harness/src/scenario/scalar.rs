//! The scalar values of a scenario file: an expected `value:`, a setting, a
//! parameter value (what `${name}` expands to).

use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// An expected scalar: the first column of the first row, compared with
/// PostgreSQL's text output (`true` ↔ `t`, numbers as decimal, `null` ↔ SQL NULL).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// SQL NULL.
    Null,
    /// A boolean (`t`/`f` on the wire).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A floating-point number, compared numerically.
    Float(f64),
    /// Text, compared exactly.
    Text(String),
}

impl Scalar {
    /// Whether the server's text value `actual` (`None` for NULL) equals this.
    pub fn matches(&self, actual: Option<&str>) -> bool {
        match (self, actual) {
            (Scalar::Null, None) => true,
            (_, None) | (Scalar::Null, Some(_)) => false,
            (Scalar::Bool(b), Some(a)) => a == if *b { "t" } else { "f" },
            (Scalar::Int(i), Some(a)) => a.parse::<i128>() == Ok(*i),
            (Scalar::Float(f), Some(a)) => a.parse::<f64>().is_ok_and(|x| x == *f),
            (Scalar::Text(t), Some(a)) => a == t,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("NULL"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(t) => write!(f, "{t:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar (null, boolean, number or string)")
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Scalar {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Scalar".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A value: null, boolean, number or string (compared with PostgreSQL's text output)",
            "type": ["null", "boolean", "number", "string"]
        })
    }
}

impl Scalar {
    /// The value as PostgreSQL text: what `${name}` expands to and what a setting sends
    /// (`true` → `true`, numbers in decimal, `null` → `NULL`).
    pub fn text(&self) -> String {
        match self {
            Scalar::Null => "NULL".into(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Text(t) => t.clone(),
        }
    }
}

/// `value:` present (even as `null`) → `Some`, absent → `None` (via `#[serde(default)]`).
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scalar>, D::Error> {
    Scalar::deserialize(d).map(Some)
}
