//! Parsing the three commands (`get N item`, `craft N item using M a, K b`, `inventory`) the way
//! the reference's regular expressions read them, and the Python text conventions its
//! observations carry (`str.strip`, `repr`).

/// Item counts. Signed: the reference lets a craft that lists one ingredient twice drive an
/// inventory entry below zero, and so does this port.
pub type Count = i128;

/// Any run of up to this many digits fits a [`Count`].
const MAX_COUNT_DIGITS: usize = 38;

/// One parsed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `craft <output> using <inputs>`, both parts as typed.
    Craft {
        output: &'a str,
        inputs: &'a str,
    },
    /// `get <digits> <item>`.
    Get {
        count: &'a str,
        item: &'a str,
    },
    Inventory,
    /// Anything else: `Could not execute <action>`.
    Unknown,
}

/// What separates a craft's output from its inputs.
const USING: &str = " using ";

/// Reads an action as the reference does: a prefix match (`re.match`) whose `.*` groups stop at
/// the first newline; text after that newline is ignored.
pub fn parse(action: &str) -> Command<'_> {
    let line = action.split('\n').next().unwrap_or("");
    if let Some(rest) = line.strip_prefix("craft ") {
        // `craft (.*) using (.*)`: the greedy first group ends at the last " using ". (A
        // plain backward scan: `rfind` sets up a two-way searcher, costly for one short line.)
        if let Some(at) = rest.as_bytes().windows(USING.len()).rposition(|w| w == USING.as_bytes()) {
            return Command::Craft { output: &rest[..at], inputs: &rest[at + USING.len()..] };
        }
    }
    if let Some(rest) = line.strip_prefix("get ") {
        if let Some((count, item)) = split_count(rest) {
            return Command::Get { count, item };
        }
    }
    if action.starts_with("inventory") {
        return Command::Inventory;
    }
    Command::Unknown
}

/// Splits `([0-9]+) (.*)`: leading ASCII digits, one space, the rest.
pub fn split_count(text: &str) -> Option<(&str, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || text.as_bytes().get(digits) != Some(&b' ') {
        return None;
    }
    Some((&text[..digits], &text[digits + 1..]))
}

/// The value of a run of ASCII digits, saturating at [`Count::MAX`] (about 1.7e38; Python's
/// ints have no bound, so only inventories beyond that differ).
pub fn count_value(digits: &str) -> Count {
    let significant = normalized(digits);
    if significant.len() > MAX_COUNT_DIGITS {
        return Count::MAX;
    }
    significant.parse::<Count>().unwrap_or(Count::MAX)
}

/// A run of ASCII digits as Python prints `int(digits)`: without leading zeros.
pub fn normalized(digits: &str) -> &str {
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() && !digits.is_empty() {
        "0"
    } else {
        significant
    }
}

/// Python's `str.isspace`: Unicode White_Space plus the four ASCII information separators.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Python's `repr` of a `str`, as shown in messages that print the reference's dataclasses.
pub use crate::pytext::repr as py_repr;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn craft_splits_at_last_using() {
        assert_eq!(parse("craft 4 stick using 2 planks"), Command::Craft { output: "4 stick", inputs: "2 planks" });
        assert_eq!(parse("craft a using b using 1 c"), Command::Craft { output: "a using b", inputs: "1 c" });
        assert_eq!(parse("craft  using 1 x"), Command::Craft { output: "", inputs: "1 x" });
        assert_eq!(parse("craft x using "), Command::Craft { output: "x", inputs: "" });
        assert_eq!(parse("craft x using\n 1 y"), Command::Unknown);
        assert_eq!(parse("crafting x using 1 y"), Command::Unknown);
    }

    #[test]
    fn get_needs_digits_then_space() {
        assert_eq!(parse("get 12 oak logs"), Command::Get { count: "12", item: "oak logs" });
        assert_eq!(parse("get 1  oak logs"), Command::Get { count: "1", item: " oak logs" });
        assert_eq!(parse("get 1 oak\nlogs"), Command::Get { count: "1", item: "oak" });
        assert_eq!(parse("get oak logs"), Command::Unknown);
        assert_eq!(parse("get 1oak"), Command::Unknown);
        assert_eq!(parse("get ١ oak"), Command::Unknown, "only ASCII digits");
    }

    #[test]
    fn inventory_is_a_prefix_match() {
        assert_eq!(parse("inventory"), Command::Inventory);
        assert_eq!(parse("inventory please"), Command::Inventory);
        assert_eq!(parse(" inventory"), Command::Unknown);
        assert_eq!(parse(""), Command::Unknown);
    }

    #[test]
    fn counts_parse_like_python_ints() {
        assert_eq!(count_value("007"), 7);
        assert_eq!(count_value("0"), 0);
        assert_eq!(count_value(&"9".repeat(38)), 10i128.pow(38) - 1);
        assert_eq!(count_value(&"9".repeat(39)), Count::MAX);
        assert_eq!(count_value(&format!("{}1", "0".repeat(60))), 1);
        assert_eq!(normalized("000"), "0");
        assert_eq!(normalized("0120"), "120");
    }

    #[test]
    fn strip_and_repr_match_python() {
        assert_eq!(py_strip("\x1c 1 x\u{a0}\t"), "1 x");
        assert_eq!(py_repr("minecraft:foo"), "'minecraft:foo'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("'\""), "'\\'\"'");
        assert_eq!(py_repr("a\\b\tc\r\x01\x7f"), "'a\\\\b\\tc\\r\\x01\\x7f'");
        assert_eq!(py_repr("é\u{a0}\u{200b}日\u{1F600}\u{e000}"), "'é\\xa0\\u200b日\u{1F600}\\ue000'");
    }
}
