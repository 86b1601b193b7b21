//! The syntax of voodu's parse-time interpolation, `${NAME}` and
//! `${NAME:-default}`: where each reference lies in a manifest's text and
//! in which lexical context. The CLI reads it to know which of its shell's
//! variables an apply needs; the parser (`voodu-manifest`) resolves them.
//!
//! - Names are `[A-Za-z_][A-Za-z0-9_]*`, as voodu documents them.
//! - `$${` is HCL's escape for a literal `${` and is left alone.
//! - `${asset.…}` and `${ref.…}` belong to the controller, resolved after
//!   the parse; they are found as [`Reference::ServerSide`] and kept as text.
//! - Comments (`#`, `//`, `/* */`) are skipped: a `${NAME}` in a comment
//!   is never required.
//! - [`REPLICA_VARIABLES`] (`${VOODU_REPLICA_ORDINAL}`, as voodu's
//!   statefulset page writes it in `env`) are the replica's own: unless the
//!   shell sets them, they are kept as text, and the runtime fills them in
//!   each replica's env values.

use std::collections::BTreeSet;
use std::ops::Range;

/// The lexical context a reference was written in, which decides how a
/// value is written into the text so that HCL reads it back verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Outside any string: `replicas = ${REPLICAS:-3}`. The value is
    /// written as it is.
    Code,
    /// Inside a quoted string: quotes, backslashes and newlines in the
    /// value are escaped.
    QuotedString,
    /// Inside a heredoc: only template sequences are escaped.
    Heredoc,
}

/// What a `${` starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference<'a> {
    /// `${NAME}` (required) or `${NAME:-default}`.
    Variable {
        /// The variable's name.
        name: &'a str,
        /// The default, when one is written (it may be empty).
        default: Option<&'a str>,
    },
    /// `${asset.…}` or `${ref.…}`: resolved by the controller later.
    ServerSide,
    /// Neither: why it cannot be read, with the fix.
    Malformed(String),
}

/// One `${…}` in a manifest's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a> {
    /// Its bytes, from `$` to `}` inclusive (to the end of the line when
    /// it is not closed).
    pub span: Range<usize>,
    /// Where it was written.
    pub context: Context,
    /// What it is.
    pub reference: Reference<'a>,
}

/// Variables each replica has its own value of, filled in its env values
/// when it is created: its ordinal (statefulsets) and its replica id.
pub const REPLICA_VARIABLES: &[&str] = &["VOODU_REPLICA_ORDINAL", "VOODU_REPLICA_ID"];

/// `value` with each `${VOODU_REPLICA_…}` of [`REPLICA_VARIABLES`] filled
/// in: the replica id, and for a statefulset (`ordinal`) its ordinal.
pub fn fill_replica_variables(value: &str, replica_id: &str, ordinal: Option<&str>) -> String {
    let mut filled = value.replace("${VOODU_REPLICA_ID}", replica_id);
    if let Some(ordinal) = ordinal {
        filled = filled.replace("${VOODU_REPLICA_ORDINAL}", ordinal);
    }
    filled
}

/// Whether `name` is a variable name voodu accepts.
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The names of the variables `text` references, outside comments.
pub fn referenced_names(text: &str) -> BTreeSet<&str> {
    scan(text)
        .into_iter()
        .filter_map(|found| match found.reference {
            Reference::Variable { name, .. } => Some(name),
            _ => None,
        })
        .collect()
}

/// Every `${` in `text` outside comments and escapes, in order.
pub fn scan(text: &str) -> Vec<Found<'_>> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    let mut state = State::Code;
    while at < bytes.len() {
        match state {
            State::Code => {
                if bytes[at] == b'"' {
                    state = State::QuotedString;
                    at += 1;
                } else if bytes[at] == b'#' || bytes[at..].starts_with(b"//") {
                    at = line_end(bytes, at);
                } else if bytes[at..].starts_with(b"/*") {
                    at = find(bytes, at + 2, b"*/").map_or(bytes.len(), |end| end + 2);
                } else if let Some((tag, body_start)) = heredoc_start(text, at) {
                    state = State::Heredoc(tag);
                    at = body_start;
                } else {
                    at = reference_or_step(text, at, Context::Code, &mut found);
                }
            }
            State::QuotedString => match bytes[at] {
                b'\\' => {
                    at += 1;
                    at += text[at..].chars().next().map_or(1, char::len_utf8);
                }
                b'"' => {
                    state = State::Code;
                    at += 1;
                }
                // An unclosed string; HCL reports it.
                b'\n' => {
                    state = State::Code;
                    at += 1;
                }
                _ => at = reference_or_step(text, at, Context::QuotedString, &mut found),
            },
            State::Heredoc(ref tag) => {
                let end = line_end(bytes, at);
                if text[at..end].trim() == tag.as_str() {
                    state = State::Code;
                    at = end;
                    continue;
                }
                while at < end {
                    at = reference_or_step(text, at, Context::Heredoc, &mut found);
                }
                at = end + 1;
            }
        }
    }
    found
}

enum State {
    Code,
    QuotedString,
    /// Inside a heredoc that ends at a line holding this tag.
    Heredoc(String),
}

fn line_end(bytes: &[u8], from: usize) -> usize {
    find(bytes, from, b"\n").unwrap_or(bytes.len())
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|position| from + position)
}

/// `<<TAG` or `<<-TAG` at `at`, then the end of its line: the tag and where
/// the heredoc's body starts.
fn heredoc_start(text: &str, at: usize) -> Option<(String, usize)> {
    let rest = text[at..].strip_prefix("<<")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let tag: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if tag.is_empty() || !rest[tag.len()..].starts_with(['\n', '\r']) {
        return None;
    }
    let body_start = line_end(text.as_bytes(), at) + 1;
    Some((tag, body_start))
}

/// Reads a reference at `at` if one starts there and returns where to go
/// on; otherwise steps over one character.
fn reference_or_step<'a>(
    text: &'a str,
    at: usize,
    context: Context,
    found: &mut Vec<Found<'a>>,
) -> usize {
    let rest = &text[at..];
    if rest.starts_with("$${") {
        return at + 3;
    }
    if !rest.starts_with("${") {
        return at + rest.chars().next().map_or(1, char::len_utf8);
    }
    let inner_start = at + 2;
    let line_end = line_end(text.as_bytes(), inner_start);
    let close = text[inner_start..line_end]
        .find('}')
        .map(|offset| inner_start + offset);
    let Some(close) = close else {
        found.push(Found {
            span: at..line_end,
            context,
            reference: Reference::Malformed(
                "`${` is not closed on its line — write ${NAME}, ${NAME:-default}, or $${ for a literal ${".to_owned(),
            ),
        });
        return line_end;
    };
    let inner = &text[inner_start..close];
    let reference = read_reference(inner);
    found.push(Found {
        span: at..close + 1,
        context,
        reference,
    });
    close + 1
}

fn read_reference(inner: &str) -> Reference<'_> {
    let name_end = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    let (name, rest) = inner.split_at(name_end);
    if is_variable_name(name) {
        if rest.is_empty() {
            return Reference::Variable {
                name,
                default: None,
            };
        }
        if let Some(default) = rest.strip_prefix(":-") {
            if default.contains("${") {
                return Reference::Malformed(format!(
                    "the default of ${{{name}:-…}} holds another ${{ — defaults are plain text; write ${{{name}:-value}}"
                ));
            }
            return Reference::Variable {
                name,
                default: Some(default),
            };
        }
        if rest.starts_with('.') && (name == "asset" || name == "ref") {
            return Reference::ServerSide;
        }
    }
    Reference::Malformed(format!(
        "`${{{inner}}}` is not a variable — names are letters, digits and underscores, not starting with a digit; write ${{NAME}} or ${{NAME:-default}}, or $${{ for a literal ${{"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<&str> {
        referenced_names(text).into_iter().collect()
    }

    #[test]
    fn variables_are_found_with_their_defaults_and_contexts() {
        let text = "image = \"api:${TAG:-latest}\"\nreplicas = ${N}\n";
        let found = scan(text);
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].reference,
            Reference::Variable {
                name: "TAG",
                default: Some("latest")
            }
        );
        assert_eq!(found[0].context, Context::QuotedString);
        assert_eq!(&text[found[0].span.clone()], "${TAG:-latest}");
        assert_eq!(found[1].context, Context::Code);
        assert_eq!(
            found[1].reference,
            Reference::Variable {
                name: "N",
                default: None
            }
        );
    }

    #[test]
    fn comments_escapes_and_server_side_forms_are_not_variables() {
        let text = "# ${IN_A_COMMENT}\n// ${ALSO}\n/* ${AND} */\nx = \"$${LITERAL} ${asset.data.pg.conf} {{name}}\"\n";
        assert!(names(text).is_empty(), "{:?}", names(text));
        let found = scan(text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].reference, Reference::ServerSide);
    }

    #[test]
    fn quotes_and_escapes_inside_strings_do_not_end_them() {
        let text = "x = \"a \\\" # ${A}\" # ${B}\ny = <<EOF\n\"${C}\nEOF\nz = \"${D:-}\"\n";
        assert_eq!(names(text), ["A", "C", "D"]);
        let contexts: Vec<Context> = scan(text).iter().map(|found| found.context).collect();
        assert_eq!(
            contexts,
            [
                Context::QuotedString,
                Context::Heredoc,
                Context::QuotedString
            ]
        );
        assert_eq!(
            scan(text)[2].reference,
            Reference::Variable {
                name: "D",
                default: Some("")
            }
        );
    }

    #[test]
    fn malformed_references_say_how_to_write_them() {
        for (text, expected) in [
            ("x = \"${1A}\"", "is not a variable"),
            ("x = \"${var.x}\"", "is not a variable"),
            ("x = \"${A:-${B}}\"", "holds another ${"),
            ("x = \"${A\"\n", "is not closed on its line"),
            ("x = \"${A-b}\"", "is not a variable"),
        ] {
            let found = scan(text);
            match &found[0].reference {
                Reference::Malformed(why) => assert!(why.contains(expected), "{text}: {why}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
