//! `--keys FILE`: names for advisory keys, and the allow-list of expected
//! long holders. A hash cannot be inverted, so a rule says which ids to try;
//! each id's key is computed the way the application computes it.
//!
//! ```yaml
//! keys:                      # literal keys
//!   - { key: 42, name: nightly-rollup }
//!   - { key: [7, 1], name: billing-batch }   # pg_advisory_lock(7, 1)
//! rules:                     # a namespace and the ids to try; the hashed text is prefix || id
//!   - { namespace: rollup, hash: sha256, ids: { from: 1, to: 10000 } }
//!   - { namespace: tenant, hash: hashtext, ids: [acme, globex] }
//!   - { namespace: job, hash: hashtextextended, seed: 0, ids: { from: 1, to: 500 } }
//!   - { namespace: tenant, hash: hashtext, class: 7, ids: [acme] }  # pg_advisory_lock(7, hashtext(..))
//!   - { namespace: migrate, hash: sqlx, prefix: "", ids: [my-app] }  # PgAdvisoryLock::new("my-app")
//! expected:                  # long holders that are correct code: "expected", not "leaked"
//!   - { key: 42, application_name: leader, reason: leader election }
//!   - { rule: migrate, reason: migration runner }
//! ```
//!
//! Hashes:
//! - `sha256`: the first 8 bytes of SHA-256, big-endian ([`locklab_core::keys::namespaced_key`]);
//! - `hashtext` / `hashtextextended`: PostgreSQL's internal text hashes, as
//!   `pg_advisory_lock(hashtext('ns:' || id))` uses them; they are not
//!   documented and may differ between platforms, so locklab asks the server
//!   it inspects to compute them ([`KeyNames::resolve`]), once;
//! - `sqlx`: sqlx's `PgAdvisoryLock::new(text)`: HKDF-SHA256 (RFC 5869) of
//!   the text without a salt, expanded with the info string
//!   `SQLx (Rust) Postgres advisory lock` to 8 bytes, read as a little-endian
//!   i64 (sqlx-postgres 0.9 `src/advisory_lock.rs`, whose docs name the
//!   derivation stable). Computed here without sqlx, which is a pool crate;
//!   a test checks it against sqlx itself.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use serde::Deserialize;
use serde_saphyr::Spanned;
use tokio_postgres::Client;

use locklab_core::keys::AdvisoryKey;
use locklab_core::located::{FileError, Pos, yaml_error};

/// At most this many ids in all the rules of one file.
pub const MAX_IDS: u64 = 1_000_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    keys: Vec<Spanned<RawLiteral>>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    expected: Vec<Spanned<RawExpected>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLiteral {
    key: AdvisoryKey,
    name: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Hash {
    Sha256,
    Hashtext,
    Hashtextextended,
    Sqlx,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    namespace: String,
    hash: Hash,
    /// Text before the id (default: `namespace:`).
    prefix: Option<String>,
    /// `pg_advisory_lock(class, hash)`: the two-integer form (hashtext only).
    class: Option<i32>,
    /// `hashtextextended`'s seed (default 0).
    seed: Option<i64>,
    ids: Spanned<RawIds>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawIds {
    Range { from: i64, to: i64 },
    List(Vec<Id>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Int(i64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpected {
    key: Option<AdvisoryKey>,
    rule: Option<String>,
    application_name: Option<String>,
    reason: Option<String>,
}

/// One allow-list entry: a holder matching every given field is expected.
#[derive(Clone, Debug)]
pub struct Expected {
    /// This key.
    pub key: Option<AdvisoryKey>,
    /// A key named by the rule with this namespace.
    pub rule: Option<String>,
    /// This `application_name`; a trailing `*` matches any ending.
    pub application_name: Option<String>,
    /// Why it is expected (shown next to the verdict).
    pub reason: String,
}

/// A rule whose keys only the server can compute (`hashtext`, `hashtextextended`).
#[derive(Clone, Debug)]
struct ServerRule {
    namespace: String,
    function: Hash,
    seed: i64,
    class: Option<i32>,
    texts: Vec<(String, String)>, // (id, prefix || id)
}

/// The names and allow-list of a `--keys` file (empty without one).
#[derive(Clone, Debug, Default)]
pub struct KeyNames {
    /// key → (name, namespace of the rule that named it).
    names: HashMap<AdvisoryKey, (String, Option<String>)>,
    /// The allow-list.
    pub expected: Vec<Expected>,
    server_rules: Vec<ServerRule>,
}

impl KeyNames {
    /// Reads and checks a keys file; `sha256` and `sqlx` keys are computed now.
    ///
    /// # Errors
    /// `FILE:LINE:COLUMN: message` for the first problem: YAML, an unknown
    /// field, a bad key, a rule without ids, `class` with a 64-bit hash, too many ids.
    pub fn load(path: &Path) -> Result<KeyNames> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    /// [`KeyNames::load`] from text already read (`path` is for messages).
    ///
    /// # Errors
    /// As [`KeyNames::load`].
    pub fn parse(path: &Path, text: &str) -> Result<KeyNames> {
        let raw: RawFile = serde_saphyr::from_str(text).map_err(|e| {
            anyhow!(
                "{}",
                yaml_error(path, &e, "keys file", &[])
                    .to_string()
                    .replace("scenario file", "keys file")
            )
        })?;
        let at = |loc: &serde_saphyr::Location, message: String| {
            anyhow!(
                "{}",
                FileError {
                    file: path.to_owned(),
                    pos: Pos::of(loc),
                    message
                }
            )
        };
        let mut names = KeyNames::default();
        for lit in raw.keys {
            names.insert(lit.value.key, lit.value.name, None);
        }
        let mut total = 0u64;
        let mut namespaces: Vec<String> = Vec::new();
        for rule in raw.rules {
            let r = rule.value;
            namespaces.push(r.namespace.clone());
            if r.namespace.is_empty() {
                return Err(at(&rule.referenced, "a rule's namespace must not be empty".into()));
            }
            if r.class.is_some() && r.hash != Hash::Hashtext {
                return Err(at(
                    &rule.referenced,
                    "'class' goes with hash: hashtext only (a 32-bit hash as the second of two integers)".into(),
                ));
            }
            if r.seed.is_some() && r.hash != Hash::Hashtextextended {
                return Err(at(
                    &rule.referenced,
                    "'seed' goes with hash: hashtextextended only".into(),
                ));
            }
            let ids = rule_ids(r.ids, &mut total, &at)?;
            let prefix = r.prefix.unwrap_or_else(|| format!("{}:", r.namespace));
            let texts = ids.into_iter().map(|id| {
                let text = format!("{prefix}{id}");
                (id, text)
            });
            match r.hash {
                Hash::Sha256 | Hash::Sqlx => {
                    for (id, text) in texts {
                        let key = if r.hash == Hash::Sha256 {
                            Some(sha256_key(&text))
                        } else {
                            sqlx_key(&text)
                        };
                        let Some(key) = key else { continue };
                        names.insert(key, format!("{}:{id}", r.namespace), Some(r.namespace.clone()));
                    }
                }
                Hash::Hashtext | Hash::Hashtextextended => names.server_rules.push(ServerRule {
                    namespace: r.namespace,
                    function: r.hash,
                    seed: r.seed.unwrap_or(0),
                    class: r.class,
                    texts: texts.collect(),
                }),
            }
        }
        names.expected = expected(raw.expected, &namespaces, &at)?;
        Ok(names)
    }

    fn insert(&mut self, key: AdvisoryKey, name: String, rule: Option<String>) {
        match self.names.get_mut(&key) {
            // Two ids hash to one key (32-bit hashes collide): show both.
            Some((existing, _)) if !existing.split(" | ").any(|n| n == name) => {
                existing.push_str(" | ");
                existing.push_str(&name);
            }
            Some(_) => {}
            None => {
                self.names.insert(key, (name, rule));
            }
        }
    }

    /// Whether some rule still waits for the server to compute its keys.
    pub fn needs_server(&self) -> bool {
        !self.server_rules.is_empty()
    }

    /// Computes the `hashtext` / `hashtextextended` rules' keys on `client`
    /// (the server being inspected: its hash is the one its clients used), in
    /// one read-only query per rule.
    ///
    /// # Errors
    /// The query's error (e.g. `hashtextextended` on a server without it).
    pub async fn resolve(&mut self, client: &Client) -> Result<()> {
        // Names are added only once every rule is computed: a failure leaves
        // the rules to compute on the next call, and no half of them.
        let mut computed = Vec::new();
        for rule in &self.server_rules {
            let texts: Vec<&str> = rule.texts.iter().map(|(_, t)| t.as_str()).collect();
            let keys: Vec<i64> = if rule.function == Hash::Hashtext {
                let row = client
                    .query_one("select array_agg(hashtext(t)::int8 order by n) from unnest($1::text[]) with ordinality u(t, n)", &[&texts])
                    .await?;
                row.try_get(0)?
            } else {
                let row = client
                    .query_one(
                        "select array_agg(hashtextextended(t, $2) order by n) from unnest($1::text[]) with ordinality u(t, n)",
                        &[&texts, &rule.seed],
                    )
                    .await?;
                row.try_get(0)?
            };
            for ((id, _), h) in rule.texts.iter().zip(keys) {
                let key = match rule.class {
                    Some(class) => AdvisoryKey::Pair(class, h as i32),
                    None => AdvisoryKey::Big(h),
                };
                computed.push((key, format!("{}:{id}", rule.namespace), rule.namespace.clone()));
            }
        }
        for (key, name, namespace) in computed {
            self.insert(key, name, Some(namespace));
        }
        self.server_rules.clear();
        Ok(())
    }

    /// The name of `key`, if the file gives one.
    pub fn name(&self, key: &AdvisoryKey) -> Option<&str> {
        self.names.get(key).map(|(n, _)| n.as_str())
    }

    /// The allow-list entry a holder of `key` with `application_name` matches, if any.
    pub fn expected(&self, key: &AdvisoryKey, application_name: Option<&str>) -> Option<&Expected> {
        let rule_of = self.names.get(key).and_then(|(_, r)| r.as_deref());
        self.expected.iter().find(|e| {
            e.key.is_none_or(|k| k == *key)
                && e.rule.as_deref().is_none_or(|r| rule_of == Some(r))
                && e.application_name.as_deref().is_none_or(|want| {
                    let app = application_name.unwrap_or("");
                    match want.strip_suffix('*') {
                        Some(prefix) => app.starts_with(prefix),
                        None => app == want,
                    }
                })
        })
    }
}

/// The first 8 bytes of SHA-256(`text`), big-endian: for `ns:id`, the same
/// key as [`namespaced_key`]`(ns, id)`.
fn sha256_key(text: &str) -> AdvisoryKey {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    AdvisoryKey::Big(i64::from_be_bytes(first))
}

/// sqlx's `PgAdvisoryLock::new(text)` key (see the module docs); `Some`
/// always (the option is the bigint form's, as a key sqlx may add other forms for).
fn sqlx_key(text: &str) -> Option<AdvisoryKey> {
    let hkdf = hkdf::Hkdf::<sha2::Sha256>::new(None, text.as_bytes());
    let mut key = [0u8; 8];
    hkdf.expand(b"SQLx (Rust) Postgres advisory lock", &mut key).ok()?;
    Some(AdvisoryKey::Big(i64::from_le_bytes(key)))
}

/// The ids a rule names, as text (a range's, or a list's); `total` counts
/// the file's ids so far, at most [`MAX_IDS`].
///
/// # Errors
/// An empty or reversed range, no ids, too many ids in the file (located by `at`).
fn rule_ids(
    spanned: Spanned<RawIds>,
    total: &mut u64,
    at: &dyn Fn(&serde_saphyr::Location, String) -> anyhow::Error,
) -> Result<Vec<String>> {
    let ids: Vec<String> = match spanned.value {
        RawIds::Range { from, to } => {
            if from > to {
                return Err(at(
                    &spanned.referenced,
                    format!("the range's from ({from}) is above its to ({to})"),
                ));
            }
            let n = to.abs_diff(from).saturating_add(1);
            if n > MAX_IDS - *total {
                return Err(at(
                    &spanned.referenced,
                    format!("more than {MAX_IDS} ids in the file's rules"),
                ));
            }
            (from..=to).map(|i| i.to_string()).collect()
        }
        RawIds::List(list) => list
            .into_iter()
            .map(|id| match id {
                Id::Int(i) => i.to_string(),
                Id::Text(t) => t,
            })
            .collect(),
    };
    if ids.is_empty() {
        return Err(at(&spanned.referenced, "a rule needs at least one id".into()));
    }
    *total += ids.len() as u64;
    if *total > MAX_IDS {
        return Err(at(
            &spanned.referenced,
            format!("more than {MAX_IDS} ids in the file's rules"),
        ));
    }
    Ok(ids)
}

/// The file's `expected` entries, each naming a known rule (`namespaces`)
/// or a key or an application_name.
///
/// # Errors
/// An entry that names an unknown rule, or nothing (located by `at`).
fn expected(
    expected: Vec<Spanned<RawExpected>>,
    namespaces: &[String],
    at: &dyn Fn(&serde_saphyr::Location, String) -> anyhow::Error,
) -> Result<Vec<Expected>> {
    let mut out = Vec::new();
    for e in expected {
        let v = e.value;
        if let Some(rule) = &v.rule
            && !namespaces.contains(rule)
        {
            return Err(at(
                &e.referenced,
                format!("no rule has namespace '{rule}' (the rules: {})", namespaces.join(", ")),
            ));
        }
        if v.key.is_none() && v.rule.is_none() && v.application_name.is_none() {
            return Err(at(
                &e.referenced,
                "an expected entry needs a key, a rule or an application_name (or several)".into(),
            ));
        }
        out.push(Expected {
            key: v.key,
            rule: v.rule,
            application_name: v.application_name,
            reason: v.reason.unwrap_or_else(|| "listed as expected".into()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use locklab_core::keys::namespaced_key;

    fn parse(text: &str) -> Result<KeyNames> {
        KeyNames::parse(Path::new("keys.yaml"), text)
    }

    /// The derivation is sqlx's: its documented example, and sqlx itself on
    /// other texts (sqlx is a dev-dependency only).
    #[test]
    fn sqlx_keys_are_the_ones_sqlx_takes() {
        assert_eq!(
            sqlx_key("my first Postgres advisory lock!"),
            Some(AdvisoryKey::Big(-5560419505042474287))
        );
        for text in ["", "app", "migrate:my-app", "ключ", &"x".repeat(1000)] {
            let sqlx::postgres::PgAdvisoryLockKey::BigInt(k) = *sqlx::postgres::PgAdvisoryLock::new(text).key() else {
                panic!("sqlx's new() gave a key of two integers for {text:?}");
            };
            assert_eq!(sqlx_key(text), Some(AdvisoryKey::Big(k)), "{text:?}");
        }
    }

    #[test]
    fn literal_and_computed_keys_get_names() {
        let n = parse(
            "keys:\n  - { key: 42, name: rollup-all }\n  - { key: [7, 1], name: batch }\n\
             rules:\n  - { namespace: rollup, hash: sha256, ids: { from: 1, to: 3 } }\n  \
             - { namespace: m, hash: sqlx, prefix: '', ids: [app] }\n",
        )
        .unwrap();
        assert_eq!(n.name(&AdvisoryKey::Big(42)), Some("rollup-all"));
        assert_eq!(n.name(&AdvisoryKey::Pair(7, 1)), Some("batch"));
        assert_eq!(
            n.name(&AdvisoryKey::Big(namespaced_key("rollup", "2"))),
            Some("rollup:2")
        );
        assert_eq!(n.name(&sqlx_key("app").unwrap()), Some("m:app"));
        assert_eq!(n.name(&AdvisoryKey::Big(43)), None);
    }

    #[test]
    fn errors_say_file_line_and_column() {
        let e = parse("rules:\n  - { namespace: a, hash: sha256, class: 1, ids: [1] }\n").unwrap_err();
        assert!(e.to_string().starts_with("keys.yaml:2:"), "{e}");
        let e = parse("rules:\n  - namespace: a\n    hash: md5\n    ids: [1]\n").unwrap_err();
        assert!(e.to_string().starts_with("keys.yaml:3:"), "{e}");
        let e = parse("keys:\n  - { key: 1 }\n").unwrap_err();
        assert!(e.to_string().starts_with("keys.yaml:2:"), "{e}");
        let e = parse("rules:\n  - { namespace: a, hash: sha256, ids: { from: 5, to: 1 } }\n").unwrap_err();
        assert!(e.to_string().contains("above its to"), "{e}");
        // A range of every i64: too many ids, not an overflow.
        let e = parse(&format!(
            "rules:\n  - {{ namespace: a, hash: sha256, ids: {{ from: {}, to: {} }} }}\n",
            i64::MIN,
            i64::MAX
        ))
        .unwrap_err();
        assert!(e.to_string().contains("more than 1000000 ids"), "{e}");
        // The allow-list names a rule that does not exist.
        let e =
            parse("rules:\n  - { namespace: a, hash: sha256, ids: [1] }\nexpected:\n  - { rule: b }\n").unwrap_err();
        assert!(
            e.to_string().starts_with("keys.yaml:4:") && e.to_string().contains("no rule has namespace 'b'"),
            "{e}"
        );
        let e = parse("expected:\n  - { reason: nothing }\n").unwrap_err();
        assert!(e.to_string().starts_with("keys.yaml:2:"), "{e}");
    }

    #[test]
    fn allow_list_matches_every_given_field() {
        let n = parse(
            "rules:\n  - { namespace: lead, hash: sha256, ids: [x] }\n\
             expected:\n  - { rule: lead, application_name: 'leader-*' }\n  - { key: 9 }\n",
        )
        .unwrap();
        let lead = AdvisoryKey::Big(namespaced_key("lead", "x"));
        assert!(n.expected(&lead, Some("leader-3")).is_some());
        assert!(n.expected(&lead, Some("worker")).is_none());
        assert!(n.expected(&AdvisoryKey::Big(9), None).is_some());
        assert!(n.expected(&AdvisoryKey::Big(10), None).is_none());
    }
}
