//! `.env` files, as `env_file` and `vd config import` read them: one
//! `NAME=value` per line, `#` comments and blank lines skipped, quotes and
//! `export ` as a shell writes them (the `dotenvy` crate's syntax, as
//! voodu's godotenv reads them). As dotenv does, `$NAME` and `${NAME}` in
//! an unquoted or double-quoted value are filled in, from the file's
//! earlier lines, then from the environment of the process that reads it
//! (`vd apply`, `vd config import`); a single-quoted value is taken as
//! written.

/// Why a `.env` text could not be read: the parser's own words, which
/// name the line.
#[derive(Debug, thiserror::Error)]
#[error("{0} — write one NAME=value per line")]
pub struct EnvFileError(String);

/// The variables of a `.env` text, in the order written (a later one of
/// the same name wins when collected into a map), `$NAME` filled in as
/// the module doc says.
pub fn variables(text: &str) -> Result<Vec<(String, String)>, EnvFileError> {
    dotenvy::from_read_iter(text.as_bytes())
        .collect::<Result<Vec<(String, String)>, _>>()
        .map_err(|error| EnvFileError(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_read_comments_and_blank_lines_skipped() {
        let read = variables("# a comment\n\nA=1\nexport B=\"two words\"\nC='x=y'\n").unwrap();
        assert_eq!(
            read,
            [
                ("A".to_owned(), "1".to_owned()),
                ("B".to_owned(), "two words".to_owned()),
                ("C".to_owned(), "x=y".to_owned()),
            ]
        );
    }

    #[test]
    fn a_line_that_is_no_assignment_is_refused_naming_the_fix() {
        let refused = variables("A=1\nnot an assignment\n").unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("write one NAME=value per line"),
            "{refused}"
        );
    }
}
