//! Parse-time interpolation, before HCL parsing, as voodu does it:
//! `${NAME}` from the apply's variables (the shell environment of
//! `vd apply`), else the `${NAME:-default}`; a required variable that is
//! missing is an error at its place. The syntax is
//! [`voodu_model::interpolation`]'s.
//!
//! A value is written so that HCL reads it back verbatim: inside a quoted
//! string its quotes, backslashes, newlines and template sequences are
//! escaped, so a password holding `"` or `${` arrives as written.
//! `${asset.…}` and `${ref.…}` are escaped to stay literal text for the
//! controller. The result keeps a map of what moved, so every later
//! problem is reported at its place in the file as written.

use std::ops::Range;

use voodu_model::interpolation::{scan, Context, Reference, REPLICA_VARIABLES};

/// Where the apply's variables come from.
pub trait Variables {
    /// The value of `name`, or `None` when it is not set.
    fn value(&self, name: &str) -> Option<String>;

    /// The value of `name` referenced at byte `offset` of the text: where
    /// it is written can decide it (a workload's `env_from` buckets).
    fn value_at(&self, name: &str, _offset: usize) -> Option<String> {
        self.value(name)
    }
}

impl Variables for std::collections::BTreeMap<String, String> {
    fn value(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl<F: Fn(&str) -> Option<String>> Variables for F {
    fn value(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// No variable is set: only defaults apply.
pub fn no_variables(_name: &str) -> Option<String> {
    None
}

/// A text after interpolation, and where its parts came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpolated {
    /// The text HCL parses.
    pub text: String,
    /// Each replacement: its range in [`Interpolated::text`] and the range
    /// it replaced in the text as written, in order.
    edits: Vec<(Range<usize>, Range<usize>)>,
}

impl Interpolated {
    /// The offset in the text as written that `offset` in the interpolated
    /// text comes from: a place inside a substituted value maps to its
    /// `${`.
    pub fn original_offset(&self, offset: usize) -> usize {
        let index = self.edits.partition_point(|(new, _)| new.start <= offset);
        match index.checked_sub(1).map(|last| &self.edits[last]) {
            None => offset,
            Some((new, old)) if offset < new.end => old.start,
            Some((new, old)) => old.end + (offset - new.end),
        }
    }

    /// Whether anything was replaced.
    pub fn changed(&self) -> bool {
        !self.edits.is_empty()
    }
}

/// A reference that could not be resolved: where it starts in the text as
/// written, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpolationProblem {
    /// The byte offset of its `${`.
    pub offset: usize,
    /// What is wrong and the fix.
    pub message: String,
}

/// Interpolates `text`, or names every reference that cannot be resolved.
pub fn interpolate(
    text: &str,
    variables: &dyn Variables,
) -> Result<Interpolated, Vec<InterpolationProblem>> {
    let (interpolated, problems) = substitute(text, variables);
    if problems.is_empty() {
        Ok(interpolated)
    } else {
        Err(problems)
    }
}

/// `text` with every reference blanked, a missing or malformed one too:
/// text that HCL can parse to find where workloads lie, whatever the
/// variables.
pub fn blank_every_reference(text: &str) -> Interpolated {
    substitute(text, &|_: &str| Some(String::new())).0
}

/// Substitutes every reference it can; one it cannot becomes empty text
/// and a problem.
fn substitute(text: &str, variables: &dyn Variables) -> (Interpolated, Vec<InterpolationProblem>) {
    let mut problems = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut edits = Vec::new();
    let mut copied_to = 0;
    for found in scan(text) {
        let replacement = match found.reference {
            Reference::Variable { name, default } => {
                match variables
                    .value_at(name, found.span.start)
                    .or_else(|| default.map(str::to_owned))
                {
                    Some(value) => escape(&value, found.context),
                    // The replica's own, filled in when it is created.
                    None if REPLICA_VARIABLES.contains(&name) && found.context != Context::Code => {
                        format!("${}", &text[found.span.clone()])
                    }
                    None => {
                        problems.push(InterpolationProblem {
                            offset: found.span.start,
                            message: format!(
                                "undefined variable {name} — export {name} before vd apply, set it in a config bucket the workload's env_from names, or write ${{{name}:-default}}"
                            ),
                        });
                        String::new()
                    }
                }
            }
            Reference::ServerSide if found.context != Context::Code => {
                format!("${}", &text[found.span.clone()])
            }
            Reference::ServerSide => continue,
            Reference::Malformed(message) => {
                problems.push(InterpolationProblem {
                    offset: found.span.start,
                    message,
                });
                String::new()
            }
        };
        out.push_str(&text[copied_to..found.span.start]);
        let start = out.len();
        out.push_str(&replacement);
        edits.push((start..out.len(), found.span.clone()));
        copied_to = found.span.end;
    }
    out.push_str(&text[copied_to..]);
    (Interpolated { text: out, edits }, problems)
}

/// A value written so that HCL reads it back verbatim in its context.
fn escape(value: &str, context: Context) -> String {
    match context {
        Context::Code => value.to_owned(),
        Context::Heredoc => escape_templates(value),
        Context::QuotedString => {
            let mut escaped = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '\\' => escaped.push_str("\\\\"),
                    '"' => escaped.push_str("\\\""),
                    '\n' => escaped.push_str("\\n"),
                    '\r' => escaped.push_str("\\r"),
                    '\t' => escaped.push_str("\\t"),
                    c => escaped.push(c),
                }
            }
            escape_templates(&escaped)
        }
    }
}

/// `${` and `%{` doubled, so HCL's template engine leaves them as text.
fn escape_templates(value: &str) -> String {
    value.replace("${", "$${").replace("%{", "%%{")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn set_variables_win_over_defaults_and_defaults_fill_the_rest() {
        let text =
            "image = \"api:${TAG:-latest}\"\nlevel = \"${LEVEL:-info}\"\nreplicas = ${N:-2}\n";
        let done = interpolate(text, &vars(&[("TAG", "1.7")])).unwrap();
        assert_eq!(
            done.text,
            "image = \"api:1.7\"\nlevel = \"info\"\nreplicas = 2\n"
        );
    }

    #[test]
    fn values_arrive_verbatim_whatever_they_hold() {
        let text = "x = \"${V}\"\ny = <<EOF\n${V}\nEOF\n";
        let done = interpolate(text, &vars(&[("V", "a\"b\\c\n${d} %{e}")])).unwrap();
        assert_eq!(
            done.text,
            "x = \"a\\\"b\\\\c\\n$${d} %%{e}\"\ny = <<EOF\na\"b\\c\n$${d} %%{e}\nEOF\n"
        );
        let body: hcl::Body = hcl::from_str(&done.text).unwrap();
        let value: serde_json::Value = hcl::from_body(body).unwrap();
        assert_eq!(value["x"], "a\"b\\c\n${d} %{e}");
    }

    #[test]
    fn every_missing_variable_is_named_at_its_dollar() {
        let text = "a = \"${ONE}\"\nb = \"${TWO}\"\nc = \"$${THREE}\"\n";
        let problems = interpolate(text, &no_variables).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].offset, 5);
        assert_eq!(
            problems[0].message,
            "undefined variable ONE — export ONE before vd apply, set it in a config bucket the workload's env_from names, or write ${ONE:-default}"
        );
        assert_eq!(problems[1].offset, text.find("${TWO").unwrap());
    }

    #[test]
    fn a_replicas_own_variables_stay_for_the_runtime_unless_the_shell_sets_them() {
        let text = "env = { ID = \"${VOODU_REPLICA_ORDINAL}\" }\n";
        let done = interpolate(text, &no_variables).unwrap();
        assert_eq!(done.text, "env = { ID = \"$${VOODU_REPLICA_ORDINAL}\" }\n");
        let done = interpolate(text, &vars(&[("VOODU_REPLICA_ORDINAL", "7")])).unwrap();
        assert_eq!(done.text, "env = { ID = \"7\" }\n");
    }

    #[test]
    fn server_side_references_stay_literal_for_hcl() {
        let text = "v = [\"${asset.data.pg.conf}:/etc/pg.conf:ro\"]\nbody = \"{{name}}\"\n";
        let done = interpolate(text, &no_variables).unwrap();
        assert_eq!(
            done.text,
            "v = [\"$${asset.data.pg.conf}:/etc/pg.conf:ro\"]\nbody = \"{{name}}\"\n"
        );
        let body: hcl::Body = hcl::from_str(&done.text).unwrap();
        let value: serde_json::Value = hcl::from_body(body).unwrap();
        assert_eq!(value["v"][0], "${asset.data.pg.conf}:/etc/pg.conf:ro");
    }

    #[test]
    fn offsets_after_a_substitution_map_back_to_the_text_as_written() {
        let text = "a = \"${LONG_NAME}\" b\nc";
        let done = interpolate(text, &vars(&[("LONG_NAME", "x")])).unwrap();
        assert_eq!(done.text, "a = \"x\" b\nc");
        assert_eq!(done.original_offset(2), 2);
        assert_eq!(done.original_offset(5), 5);
        assert_eq!(
            done.original_offset(done.text.find('b').unwrap()),
            text.find('b').unwrap()
        );
        assert_eq!(
            done.original_offset(done.text.find('c').unwrap()),
            text.find('c').unwrap()
        );
    }
}
