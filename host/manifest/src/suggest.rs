//! "Did you mean" suggestions for misspelt names.

/// The candidate closest to `word`, if one is close enough to be a likely
/// typo: at most two edits away, and fewer edits than the word is long.
pub fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .filter(|candidate| *candidate != word)
        .map(|candidate| (strsim::damerau_levenshtein(word, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2 && *distance < word.chars().count())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_within_two_edits_are_suggested() {
        let names = ["probes", "logs", "autoscale"];
        assert_eq!(closest("probs", names.iter().copied()), Some("probes"));
        assert_eq!(closest("lgos", names.iter().copied()), Some("logs"));
        assert_eq!(closest("traffik", names.iter().copied()), None);
        assert_eq!(closest("ab", ["xy"].iter().copied()), None);
    }
}
