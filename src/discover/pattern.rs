//! Entry-name globs with the semantics of Go's `path/filepath.Match`, which the reference provisioner's
//! `namePattern` uses: `*`, `?`, `[a-z]`, `[^a-z]`, and `\` to quote the next character. Pure.

/// Why a pattern cannot be used (Go's `ErrBadPattern`).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse name pattern {pattern:?}: {problem}")]
pub struct BadPattern {
    pub pattern: String,
    pub problem: &'static str,
}

/// Check a pattern once, up front, so a typo is reported instead of silently matching nothing.
pub fn validate(pattern: &str) -> Result<(), BadPattern> {
    let chars: Vec<char> = pattern.chars().collect();
    let bad = |problem| BadPattern {
        pattern: pattern.to_owned(),
        problem,
    };
    let mut i = 0;
    while i < chars.len() {
        i = match chars[i] {
            '\\' if i + 1 == chars.len() => return Err(bad("ends with a lone backslash")),
            '\\' => i + 2,
            '[' => i + parse_class(&chars[i..]).map_err(bad)?.consumed,
            _ => i + 1,
        };
    }
    Ok(())
}

/// Whether `name` matches `pattern` as a whole. Patterns must have passed [`validate`]; a malformed one matches
/// nothing.
pub fn matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    match_here(&pattern, &name).unwrap_or(false)
}

fn match_here(pattern: &[char], name: &[char]) -> Result<bool, &'static str> {
    let Some((&first, rest)) = pattern.split_first() else {
        return Ok(name.is_empty());
    };
    match first {
        '*' => {
            // `*` never crosses a path separator; try every split of the name, shortest first.
            for taken in 0..=name.len() {
                if match_here(rest, &name[taken..])? {
                    return Ok(true);
                }
                if name.get(taken) == Some(&'/') {
                    break;
                }
            }
            Ok(false)
        }
        '?' => match name.split_first() {
            Some((&c, tail)) if c != '/' => match_here(rest, tail),
            _ => Ok(false),
        },
        '[' => {
            let class = parse_class(pattern)?;
            match name.split_first() {
                Some((&c, tail)) if c != '/' && class.contains(c) => {
                    match_here(&pattern[class.consumed..], tail)
                }
                _ => Ok(false),
            }
        }
        '\\' => match (rest.split_first(), name.split_first()) {
            (Some((&literal, rest)), Some((&c, tail))) if literal == c => match_here(rest, tail),
            (None, _) => Err("ends with a lone backslash"),
            _ => Ok(false),
        },
        literal => match name.split_first() {
            Some((&c, tail)) if c == literal => match_here(rest, tail),
            _ => Ok(false),
        },
    }
}

struct CharClass {
    negated: bool,
    ranges: Vec<(char, char)>,
    /// Characters of the pattern the class spans, brackets included.
    consumed: usize,
}

impl CharClass {
    fn contains(&self, c: char) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

/// Parse `[...]` at the start of `pattern`.
fn parse_class(pattern: &[char]) -> Result<CharClass, &'static str> {
    let mut i = 1;
    let negated = pattern.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        match pattern.get(i) {
            None => return Err("unterminated character class"),
            Some(']') if !ranges.is_empty() => {
                return Ok(CharClass {
                    negated,
                    ranges,
                    consumed: i + 1,
                });
            }
            Some(_) => {}
        }
        let (lo, next) = class_char(pattern, i)?;
        i = next;
        let mut hi = lo;
        if pattern.get(i) == Some(&'-') {
            (hi, i) = class_char(pattern, i + 1)?;
            if hi < lo {
                return Err("character range is reversed");
            }
        }
        ranges.push((lo, hi));
    }
}

/// One possibly escaped character inside a class, and the index after it.
fn class_char(pattern: &[char], i: usize) -> Result<(char, usize), &'static str> {
    match pattern.get(i) {
        None => Err("unterminated character class"),
        Some('-') | Some(']') => Err("character class has an empty range"),
        Some('\\') => pattern
            .get(i + 1)
            .map(|&c| (c, i + 2))
            .ok_or("unterminated character class"),
        Some(&c) => Ok((c, i + 1)),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("*", "vol1", true)]
    #[case("*", "", true)]
    #[case("*", ".hidden", true)]
    #[case("vol*", "vol1", true)]
    #[case("vol*", "disk1", false)]
    #[case("vol?", "vol1", true)]
    #[case("vol?", "vol12", false)]
    #[case("*1", "vol1", true)]
    #[case("a*b*c", "aXXbYYc", true)]
    #[case("a*b*c", "aXXbYY", false)]
    #[case("[a-c]x", "bx", true)]
    #[case("[a-c]x", "dx", false)]
    #[case("[^a-c]x", "dx", true)]
    #[case("[^a-c]x", "ax", false)]
    #[case("[abc]", "c", true)]
    #[case("\\*", "*", true)]
    #[case("\\*", "x", false)]
    #[case("[\\]]", "]", true)]
    #[case("*", "a/b", false)]
    #[case("ssd-[0-9][0-9]", "ssd-07", true)]
    fn names_match_like_go_filepath_match(
        #[case] pattern: &str,
        #[case] name: &str,
        #[case] expected: bool,
    ) {
        assert_eq!(validate(pattern), Ok(()));
        assert_eq!(matches(pattern, name), expected, "{pattern:?} vs {name:?}");
    }

    #[rstest]
    #[case("[", "unterminated character class")]
    #[case("[a-", "unterminated character class")]
    #[case("[]", "character class has an empty range")]
    #[case("[z-a]", "character range is reversed")]
    #[case("[-a]", "character class has an empty range")]
    #[case("vol\\", "ends with a lone backslash")]
    fn malformed_patterns_are_rejected_with_the_problem(
        #[case] pattern: &str,
        #[case] problem: &str,
    ) {
        let err = validate(pattern).expect_err("malformed");
        assert_eq!(err.problem, problem);
        assert!(!matches(pattern, "a"));
    }
}
