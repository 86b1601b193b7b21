//! Checks on a manifest's text before the HCL parser sees it: its size, a
//! NUL byte (a binary file), and how deep it nests. The parser recurses
//! once per level of nesting, so a text nested thousands deep would
//! overflow its stack; this scan refuses it first, at the bracket that
//! goes too deep.

use voodu_model::limits::{MAX_ITEMS_PER_OBJECT, MAX_MANIFEST_BYTES, MAX_NESTING};
use voodu_model::{Diagnostic, Location};

use crate::lines::LineIndex;

/// The first problem with `text` as a manifest, if any.
pub fn check_text(lines: &LineIndex<'_>, file: &str) -> Option<Diagnostic> {
    let text = lines.text();
    if text.len() > MAX_MANIFEST_BYTES {
        return Some(Diagnostic::at(
            Location {
                file: file.to_owned(),
                line: 1,
                column: 1,
            },
            format!(
                "the file is {}, more than the {} a manifest may be — split it into several files",
                mebibytes(text.len()),
                mebibytes(MAX_MANIFEST_BYTES)
            ),
        ));
    }
    if let Some(offset) = text.find('\0') {
        return Some(Diagnostic::at(
            lines.locate(offset),
            "the file holds a NUL byte, so it is not HCL text (a binary file?) — a manifest is UTF-8 HCL",
        ));
    }
    scan(text).map(|(offset, problem)| {
        Diagnostic::at(
            lines.locate(offset),
            match problem {
                Shape::TooDeep => format!(
                    "blocks, objects and lists are nested more than {MAX_NESTING} deep here — flatten the structure"
                ),
                Shape::TooWide => format!(
                    "one body or object holds more than {MAX_ITEMS_PER_OBJECT} attributes or keys here — split it, or pass large configuration as a file in a volume"
                ),
                Shape::OpenString => "this quoted string is not closed on its line — close it with \", or use a heredoc (<<EOT) for text over several lines".to_owned(),
            },
        )
    })
}

fn mebibytes(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What the scanner is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// A bracket, brace or parenthesis of code, or a template `${ }`, with
    /// how many `=` it has held so far (one per attribute or key).
    Nested(usize),
    /// A quoted string.
    Quoted,
}

/// What is wrong with a text's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// It nests deeper than [`MAX_NESTING`].
    TooDeep,
    /// A body or object holds more than [`MAX_ITEMS_PER_OBJECT`] items.
    TooWide,
    /// A quoted string runs into the end of its line, which HCL does not
    /// allow (and which sends its parser backtracking).
    OpenString,
}

/// The byte offset of the first opening that nests deeper than
/// [`MAX_NESTING`], or of the first `=` beyond [`MAX_ITEMS_PER_OBJECT`] in
/// one body or object, if any. Strings, template interpolations, comments
/// and heredocs are followed well enough to never count a bracket inside a
/// string or a comment; the parser remains the judge of everything else.
fn scan(text: &str) -> Option<(usize, Shape)> {
    let bytes = text.as_bytes();
    let mut stack: Vec<Context> = Vec::new();
    let mut top_level_items = 0usize;
    let mut depth = 0usize;
    let mut at = 0usize;
    while at < bytes.len() {
        let byte = bytes[at];
        let next = bytes.get(at + 1).copied();
        if stack.last() == Some(&Context::Quoted) {
            match (byte, next) {
                (b'\n', _) => {
                    let opened = text[..at].rfind('"').unwrap_or(at);
                    return Some((opened, Shape::OpenString));
                }
                (b'\\', _) => at += 1,
                (b'"', _) => {
                    stack.pop();
                }
                (b'$' | b'%', Some(b'{')) => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some((at, Shape::TooDeep));
                    }
                    stack.push(Context::Nested(0));
                    at += 1;
                }
                _ => {}
            }
            at += 1;
            continue;
        }
        match (byte, next) {
            (b'"', _) => stack.push(Context::Quoted),
            (b'{' | b'[' | b'(', _) => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some((at, Shape::TooDeep));
                }
                stack.push(Context::Nested(0));
            }
            (b'=', _) if is_assignment(bytes, at) => {
                let items = match stack.last_mut() {
                    Some(Context::Nested(items)) => items,
                    _ => &mut top_level_items,
                };
                *items += 1;
                if *items > MAX_ITEMS_PER_OBJECT {
                    return Some((at, Shape::TooWide));
                }
            }
            (b'}' | b']' | b')', _) if stack.pop().is_some() => {
                depth = depth.saturating_sub(1);
            }
            (b'#', _) | (b'/', Some(b'/')) => {
                at = text[at..].find('\n').map_or(bytes.len(), |end| at + end);
            }
            (b'/', Some(b'*')) => {
                at = text[at + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |end| at + 2 + end + 1);
            }
            (b'<', Some(b'<')) => {
                if let Some(end) = heredoc_end(text, at) {
                    at = end;
                    continue;
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// Whether the `=` at `at` assigns (an attribute or an object key), rather
/// than being part of `==`, `!=`, `<=`, `>=` or `=>`.
fn is_assignment(bytes: &[u8], at: usize) -> bool {
    let before = at.checked_sub(1).map(|i| bytes[i]);
    let after = bytes.get(at + 1).copied();
    !matches!(before, Some(b'=' | b'!' | b'<' | b'>')) && !matches!(after, Some(b'=' | b'>'))
}

/// Where a heredoc starting at `at` (`<<EOF` or `<<-EOF`) ends: the byte
/// after its closing marker line. `None` when this is not a heredoc.
fn heredoc_end(text: &str, at: usize) -> Option<usize> {
    let rest = &text[at + 2..];
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let marker: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if marker.is_empty() {
        return None;
    }
    let body_start = at + text[at..].find('\n')? + 1;
    let mut line_start = body_start;
    for line in text[body_start..].split_inclusive('\n') {
        line_start += line.len();
        if line.trim() == marker {
            return Some(line_start);
        }
    }
    Some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Option<String> {
        let lines = LineIndex::new("x.vd", text);
        check_text(&lines, "x.vd").map(|diagnostic| diagnostic.to_string())
    }

    #[test]
    fn ordinary_manifests_pass() {
        let text = "deployment \"a\" \"b\" {\n  env = { A = \"{[(\" }\n  # {{{{\n  x = <<EOF\n{{{{{{\nEOF\n  y = \"${var.z}\"\n}\n";
        assert_eq!(check(text), None);
    }

    #[test]
    fn nesting_beyond_the_bound_is_refused_at_the_bracket() {
        let deep = format!("x = {}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(
            check(&deep).unwrap(),
            "x.vd:1:17: blocks, objects and lists are nested more than 12 deep here — flatten the structure"
        );
        let fine = format!("x = {}1{}", "[".repeat(12), "]".repeat(12));
        assert_eq!(check(&fine), None);
    }

    #[test]
    fn a_body_or_object_with_too_many_keys_is_refused_at_the_first_beyond() {
        let wide: String = (0..=MAX_ITEMS_PER_OBJECT)
            .map(|i| format!("K{i} = \"v\"\n"))
            .collect();
        let text = format!("env = {{\n{wide}}}\n");
        assert_eq!(
            check(&text).unwrap(),
            "x.vd:5002:7: one body or object holds more than 5000 attributes or keys here — split it, or pass large configuration as a file in a volume"
        );
        let fine: String = (0..MAX_ITEMS_PER_OBJECT)
            .map(|i| format!("K{i} = i == 1 ? \"a\" : \"b\"\n"))
            .collect();
        assert_eq!(check(&format!("env = {{\n{fine}}}\n")), None);
    }

    #[test]
    fn the_input_that_made_hcl_edit_backtrack_for_seconds_is_refused_at_once() {
        // Found by the manifest_pipeline fuzz target: 40 unclosed `[` with
        // comparisons made hcl-edit's parser take about a second in a
        // release build (and more for a longer input).
        let text = format!("# probes\n ma= {}\n", "[e <g<!eg".repeat(40));
        let started = std::time::Instant::now();
        assert!(check(&text).unwrap().contains("nested more than 12 deep"));
        // And the third: `%{` after an operator, 21 deep, doubling the
        // parser's work with each level (1.5 s at 20 in release).
        let text = format!("dgt=n{}", "tn*m%{gt=n".repeat(21));
        assert!(check(&text).unwrap().contains("nested more than 12 deep"));
        // Refused before parsing: the parser's doubling would take many
        // seconds here in a debug build; the bound leaves room for a
        // loaded machine and still tells the two apart.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_string_left_open_at_the_end_of_its_line_is_refused_where_it_opens() {
        assert_eq!(
            check("x = \"abc ${y}\nz = 1\n").unwrap(),
            "x.vd:1:5: this quoted string is not closed on its line — close it with \", or use a heredoc (<<EOT) for text over several lines"
        );
        // Found by the manifest_pipeline fuzz target: strings left open
        // with interpolations made hcl-edit backtrack for seconds.
        let text = "d = \"w ${ebag}\nuild-e${ebagt/ \"/r ${t/ t/ \"/re ${x}\n".repeat(20);
        let started = std::time::Instant::now();
        assert!(check(&text).is_some());
        // Refused before parsing, not after seconds of backtracking.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn brackets_inside_strings_and_comments_do_not_count() {
        let text = format!(
            "x = \"{}\"\n// {}\n/* {} */\n",
            "[".repeat(100),
            "{".repeat(100),
            "(".repeat(100)
        );
        assert_eq!(check(&text), None);
    }

    #[test]
    fn a_nul_byte_is_a_binary_file() {
        assert_eq!(
            check("deployment\0").unwrap(),
            "x.vd:1:11: the file holds a NUL byte, so it is not HCL text (a binary file?) — a manifest is UTF-8 HCL"
        );
    }

    #[test]
    fn a_file_over_the_size_bound_is_refused_whole() {
        let big = "#".repeat(MAX_MANIFEST_BYTES + 1);
        assert_eq!(
            check(&big).unwrap(),
            "x.vd:1:1: the file is 8.0 MiB, more than the 8.0 MiB a manifest may be — split it into several files"
        );
    }
}
