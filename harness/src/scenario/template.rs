//! The one scanner for `${name}` placeholders, used for parameters (when a
//! file is expanded), for saved values (when the runner sends SQL), and by the
//! validator (which names must exist).
//!
//! The rule, everywhere a scenario has text:
//! - `${name}` is a placeholder: its name is everything up to the next `}`
//!   (a name that is not a parameter or a saved value is an error at load);
//! - `$${` is a literal `${` (the first `$` is dropped when the text is used);
//! - a `${` with no `}` after it is literal text.

use std::borrow::Cow;

/// A piece of a scanned text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text without placeholders.
    Text(&'a str),
    /// `$${`: stands for a literal `${`.
    Escaped,
    /// `${name}`.
    Var(&'a str),
}

impl Piece<'_> {
    /// The piece as written in the file (`$${` for an escape).
    pub fn source(&self) -> Cow<'_, str> {
        match self {
            Piece::Text(t) => Cow::Borrowed(t),
            Piece::Escaped => Cow::Borrowed("$${"),
            Piece::Var(name) => Cow::Owned(format!("${{{name}}}")),
        }
    }
}

/// Splits `text` into text, escapes and placeholders, in order.
pub fn scan(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut plain = 0; // bytes of `rest` that are plain text so far
    while plain < rest.len() {
        let here = &rest[plain..];
        if let Some(after) = here.strip_prefix("$${") {
            push_text(&mut out, &rest[..plain]);
            out.push(Piece::Escaped);
            rest = after;
            plain = 0;
        } else if let Some(after) = here.strip_prefix("${")
            && let Some(j) = after.find('}')
        {
            push_text(&mut out, &rest[..plain]);
            out.push(Piece::Var(&after[..j]));
            rest = &after[j + 1..];
            plain = 0;
        } else {
            plain += here.chars().next().map_or(1, char::len_utf8);
        }
    }
    push_text(&mut out, rest);
    out
}

fn push_text<'a>(out: &mut Vec<Piece<'a>>, text: &'a str) {
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
}

/// The names of the placeholders in `text`, in order (with repeats).
pub fn names(text: &str) -> Vec<String> {
    scan(text)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Var(name) => Some(name.to_owned()),
            _ => None,
        })
        .collect()
}

/// `text` with every placeholder replaced by `value(name)` and every `$${`
/// by `${`, in one left-to-right pass (a value is never expanded again).
///
/// # Errors
/// The first placeholder whose name `value` does not know (`Err(name)`).
pub fn render(text: &str, mut value: impl FnMut(&str) -> Option<String>) -> Result<String, &str> {
    let mut out = String::with_capacity(text.len());
    for piece in scan(text) {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Escaped => out.push_str("${"),
            Piece::Var(name) => out.push_str(&value(name).ok_or(name)?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_escapes_and_unclosed_braces() {
        assert_eq!(
            scan("a ${x} $${y} ${z"),
            vec![
                Piece::Text("a "),
                Piece::Var("x"),
                Piece::Text(" "),
                Piece::Escaped,
                Piece::Text("y} ${z")
            ]
        );
        assert_eq!(names("${a}${b c}é${a}"), ["a", "b c", "a"]);
        let v = |n: &str| (n == "k").then(|| "7".to_owned());
        assert_eq!(render("select ${k}, '$${k}'", v), Ok("select 7, '${k}'".to_owned()));
        assert_eq!(render("${k} ${q}", v), Err("q"));
        assert_eq!(render("no placeholders ${", v).as_deref(), Ok("no placeholders ${"));
    }

    #[test]
    fn source_round_trips() {
        let text = "x ${a} $${ ${b}}";
        let again: String = scan(text).iter().map(|p| p.source()).collect();
        assert_eq!(again, text);
    }
}
