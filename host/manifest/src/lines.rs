//! Byte offsets in one manifest file to `file:line:column` locations.

use std::ops::Range;

use voodu_model::workload::Location;

use crate::interpolate::Interpolated;

/// Maps byte offsets in one file to lines and columns. When the text
/// parsed is the file after interpolation, offsets in it are located in
/// the file as written.
#[derive(Debug)]
pub struct LineIndex<'a> {
    file: &'a str,
    text: &'a str,
    line_starts: Vec<usize>,
    written: Option<Written<'a>>,
}

/// The file as written, when the text parsed is its interpolation.
#[derive(Debug)]
struct Written<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
    interpolated: &'a Interpolated,
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(at, _)| at + 1))
        .collect()
}

impl<'a> LineIndex<'a> {
    /// Indexes `text`, read from `file`.
    pub fn new(file: &'a str, text: &'a str) -> Self {
        LineIndex {
            file,
            text,
            line_starts: line_starts(text),
            written: None,
        }
    }

    /// Indexes the interpolation of `written`, read from `file`: offsets
    /// are in the interpolated text, locations in `written`.
    pub fn interpolated(file: &'a str, written: &'a str, interpolated: &'a Interpolated) -> Self {
        LineIndex {
            file,
            text: &interpolated.text,
            line_starts: line_starts(&interpolated.text),
            written: interpolated.changed().then(|| Written {
                text: written,
                line_starts: line_starts(written),
                interpolated,
            }),
        }
    }

    /// The file's text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The location of a byte offset (in the text parsed) in the file as
    /// written; columns count characters from 1.
    pub fn locate(&self, offset: usize) -> Location {
        let (text, line_starts, offset) = match &self.written {
            Some(written) => (
                written.text,
                &written.line_starts,
                written.interpolated.original_offset(offset),
            ),
            None => (self.text, &self.line_starts, offset),
        };
        let line = line_starts.partition_point(|start| *start <= offset);
        let line_start = line_starts[line.saturating_sub(1)];
        let column = text
            .get(line_start..offset)
            .map_or(1, |prefix| prefix.chars().count() + 1);
        Location {
            file: self.file.to_owned(),
            line,
            column,
        }
    }

    /// The location where a span starts (the file's start when unknown).
    pub fn locate_span(&self, span: Option<Range<usize>>) -> Location {
        self.locate(span.map_or(0, |span| span.start))
    }

    /// The byte offset in the text parsed of a one-based line and column
    /// in it (as its parser reports them), if it is in the text.
    pub fn offset_of(&self, line: usize, column: usize) -> Option<usize> {
        let start = *self.line_starts.get(line.checked_sub(1)?)?;
        let rest = self.text.get(start..)?;
        let skipped: usize = rest
            .chars()
            .take(column.checked_sub(1)?)
            .map(char::len_utf8)
            .sum();
        Some(start + skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_locations_round_trip_across_multibyte_text() {
        let text = "a = \"é\"\nbb = 1e309\n";
        let lines = LineIndex::new("x.hcl", text);
        let offset = text.find("1e309").unwrap();
        let at = lines.locate(offset);
        assert_eq!((at.line, at.column), (2, 6));
        assert_eq!(lines.offset_of(2, 6), Some(offset));
        assert_eq!(lines.locate(text.find('"').unwrap() + 3).column, 7);
        assert_eq!(lines.offset_of(9, 1), None);
    }
}
