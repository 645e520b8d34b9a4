//! Python's rules for text, where an env's reference implementation is Python code: the word
//! characters of `re`'s `\w` (Search-R1's answer normalisation) and `repr()` of a `str`
//! (WebArena's accessibility-tree names).
//!
//! Both rest on Unicode general categories, read from the `regex-syntax` crate's tables
//! (Unicode 16.0; a Python release reads its own version's, e.g. 14.0 in Python 3.11, so
//! characters assigned since then differ).

use std::sync::LazyLock;

use regex_syntax::hir::{Class, HirKind};

/// `\w` of Python's `re` on `str`: letters (`L*`), numbers (`N*`) and `_`.
static WORD: LazyLock<Vec<(char, char)>> = LazyLock::new(|| class_ranges(r"[\p{L}\p{N}_]"));

/// What `str.isprintable()` rejects: the `C*` (control, format, surrogate, private use,
/// unassigned) and `Z*` (separator) categories; the ASCII space is printable all the same.
static UNPRINTABLE: LazyLock<Vec<(char, char)>> = LazyLock::new(|| class_ranges(r"[\p{C}\p{Z}]"));

fn class_ranges(pattern: &str) -> Vec<(char, char)> {
    let hir = regex_syntax::Parser::new().parse(pattern).expect("a valid character class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class.ranges().iter().map(|r| (r.start(), r.end())).collect(),
        other => unreachable!("{pattern} parsed as {other:?}"),
    }
}

fn in_ranges(ranges: &[(char, char)], c: char) -> bool {
    ranges
        .binary_search_by(|&(start, end)| {
            if end < c {
                std::cmp::Ordering::Less
            } else if start > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether Python's `re` counts `c` as a word character (`\w` on `str`). Combining marks
/// (`M*`) are not, unlike Rust's [`char::is_alphanumeric`].
pub fn is_word(c: char) -> bool {
    in_ranges(&WORD, c)
}

/// Python's `str.isspace()`: Unicode white space and the separators `\x1c`-`\x1f` (what
/// `str.split()` and `str.strip()` take away).
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.isprintable()` for one character.
pub fn is_printable(c: char) -> bool {
    c == ' ' || !in_ranges(&UNPRINTABLE, c)
}

/// Python's `repr()` of a `str`: single quotes, or double quotes when the text holds a `'`
/// and no `"`; backslash escapes for the quote, `\`, `\t`, `\n`, `\r`, other ASCII controls
/// (`\xhh`), and characters that are not printable (`\xhh`, `\uhhhh` or `\Uhhhhhhhh`).
pub fn repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if c.is_ascii() && (c < ' ' || c == '\x7f') => out.push_str(&format!("\\x{:02x}", c as u32)),
            _ if c.is_ascii() || is_printable(c) => out.push(c),
            _ if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02x}", c as u32)),
            _ if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            _ => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_characters_are_pythons() {
        // Each row: character, `bool(re.fullmatch(r"\w", c))` in Python.
        let cases = [
            ('a', true),
            ('_', true),
            ('7', true),
            ('é', true),
            ('Σ', true),
            ('二', true),
            ('½', true), // No: a number
            ('Ⅻ', true), // Nl
            ('-', false),
            (' ', false),
            ('\u{301}', false), // combining acute accent (Mn)
            ('\u{901}', false), // Devanagari sign candrabindu (Mn), alphabetic for Rust
            ('\u{93e}', false), // Devanagari vowel sign aa (Mc), alphabetic for Rust
            ('Ⓐ', false),       // circled A (So), alphabetic for Rust
            ('’', false),
        ];
        for (c, want) in cases {
            assert_eq!(is_word(c), want, "{c:?} (U+{:04X})", c as u32);
        }
    }

    #[test]
    fn repr_matches_pythons() {
        // Each row: text, `repr(text)` in Python 3.
        let cases = [
            ("Search", "'Search'"),
            ("Kid's Toy", "\"Kid's Toy\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("it's \"x\"", "'it\\'s \"x\"'"),
            ("back\\slash", "'back\\\\slash'"),
            ("tab\there", "'tab\\there'"),
            ("bell\x07", "'bell\\x07'"),
            ("del\x7f", "'del\\x7f'"),
            ("nbsp\u{a0}x", "'nbsp\\xa0x'"),
            ("zero\u{200b}width", "'zero\\u200bwidth'"),
            ("Zürich – €5", "'Zürich – €5'"),
            ("", "''"),
            ("\u{e000}", "'\\ue000'"),
            ("\u{10ffff}", "'\\U0010ffff'"),
            ("😀", "'😀'"),
        ];
        for (text, want) in cases {
            assert_eq!(repr(text), want, "{text:?}");
        }
    }
}
