//! WebArena's action grammar: `click [id]`, `type [id] [text] [press_enter_after=0|1]`,
//! `hover [id]`, `press [key_comb]`, `scroll [down|up]`, `new_tab`, `tab_focus [i]`,
//! `close_tab`, `goto [url]`, `go_back`, `go_forward`, `stop [answer]`.
//!
//! Parsing never fails hard: a malformed action is an `Err` with the text to show the agent.

/// One parsed action; text borrows from the action string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'a> {
    Click(u32),
    Type { id: u32, text: &'a str, enter: bool },
    Hover(u32),
    Press(&'a str),
    Scroll { down: bool },
    NewTab,
    TabFocus(usize),
    CloseTab,
    Goto(&'a str),
    GoBack,
    GoForward,
    Stop(&'a str),
}

pub const GRAMMAR: &str = "click [id], type [id] [text] [press_enter_after=0|1], hover [id], press [key_comb], \
scroll [down|up], new_tab, tab_focus [tab_index], close_tab, goto [url], go_back, go_forward, stop [answer]";

/// The bracketed arguments of `rest`: `[a] [b c] [d]`. A group ends at the first `]` that is
/// followed only by spaces and then `[` or the end, so text may itself contain brackets.
fn groups(rest: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut s = rest.trim_start();
    while !s.is_empty() {
        let body = s.strip_prefix('[')?;
        let end = body.match_indices(']').map(|(i, _)| i).find(|&i| {
            let after = body[i + 1..].trim_start();
            after.is_empty() || after.starts_with('[')
        })?;
        out.push(&body[..end]);
        s = body[end + 1..].trim_start();
    }
    Some(out)
}

fn id(text: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{}' is not an element id; ids are the numbers in [brackets]", text.trim()))
}

/// Parses one action.
pub fn parse(action: &str) -> Result<Action<'_>, String> {
    let action = action.trim();
    let split = action.find(|c: char| c.is_whitespace() || c == '[').unwrap_or(action.len());
    let (verb, rest) = action.split_at(split);
    let malformed = || format!("The action '{}' is not valid. Actions: {GRAMMAR}.", clip(action, 120));
    let args = groups(rest).ok_or_else(malformed)?;
    let verb = verb.to_ascii_lowercase();
    match (verb.as_str(), args.as_slice()) {
        ("click", [i]) => Ok(Action::Click(id(i)?)),
        ("hover", [i]) => Ok(Action::Hover(id(i)?)),
        ("type", [i, text]) => Ok(Action::Type { id: id(i)?, text, enter: true }),
        ("type", [i, text, flag]) => {
            let flag = flag.trim();
            let flag = flag.strip_prefix("press_enter_after=").unwrap_or(flag);
            let enter = match flag {
                "1" => true,
                "0" => false,
                _ => return Err(format!("press_enter_after must be 0 or 1, not '{}'.", clip(flag, 40))),
            };
            Ok(Action::Type { id: id(i)?, text, enter })
        }
        ("press", [keys]) => {
            let keys = keys.trim();
            if valid_keys(keys) {
                Ok(Action::Press(keys))
            } else {
                Err(format!(
                    "'{}' is not a key combination; use key names such as Enter, Tab, PageDown or Control+a.",
                    clip(keys, 40)
                ))
            }
        }
        ("scroll", [dir]) => {
            let dir = dir.trim();
            match dir.strip_prefix("direction=").unwrap_or(dir).to_ascii_lowercase().as_str() {
                "down" => Ok(Action::Scroll { down: true }),
                "up" => Ok(Action::Scroll { down: false }),
                _ => Err(format!("scroll takes [down] or [up], not [{}].", clip(dir, 40))),
            }
        }
        ("new_tab", []) => Ok(Action::NewTab),
        ("close_tab", []) => Ok(Action::CloseTab),
        ("go_back", []) => Ok(Action::GoBack),
        ("go_forward", []) => Ok(Action::GoForward),
        ("tab_focus", [i]) => {
            i.trim().parse().map(Action::TabFocus).map_err(|_| format!("'{}' is not a tab index.", clip(i, 40)))
        }
        ("goto", [url]) => Ok(Action::Goto(url.trim())),
        ("stop", [answer]) => Ok(Action::Stop(answer.trim())),
        ("stop", []) => Ok(Action::Stop("")),
        _ => Err(malformed()),
    }
}

const NAMED_KEYS: &[&str] = &[
    "Enter",
    "Tab",
    "Escape",
    "Backspace",
    "Delete",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "PageUp",
    "PageDown",
    "Home",
    "End",
    "Space",
];
const MODIFIERS: &[&str] = &["Control", "Meta", "Shift", "Alt"];

/// `Enter`, `Control+a`, `Shift+Tab`: modifiers joined with `+` before one key.
fn valid_keys(keys: &str) -> bool {
    let parts: Vec<&str> = keys.split('+').collect();
    let (key, mods) = parts.split_last().expect("split yields one part at least");
    let is_key = NAMED_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
        || (key.chars().count() == 1 && key.chars().all(|c| c.is_ascii_alphanumeric()));
    is_key && mods.iter().all(|m| MODIFIERS.iter().any(|k| k.eq_ignore_ascii_case(m)))
}

/// The first `max` characters of `text`, with `...` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_webarenas_actions() {
        assert_eq!(parse("click [12]"), Ok(Action::Click(12)));
        assert_eq!(parse(" CLICK[ 7 ] "), Ok(Action::Click(7)));
        assert_eq!(parse("type [5] [blue kettle] [0]"), Ok(Action::Type { id: 5, text: "blue kettle", enter: false }));
        assert_eq!(parse("type [5] [a [b] c]"), Ok(Action::Type { id: 5, text: "a [b] c", enter: true }));
        assert_eq!(parse("type [5] [x] [press_enter_after=1]"), Ok(Action::Type { id: 5, text: "x", enter: true }));
        assert_eq!(parse("press [Control+a]"), Ok(Action::Press("Control+a")));
        assert_eq!(parse("scroll [down]"), Ok(Action::Scroll { down: true }));
        assert_eq!(parse("scroll [direction=up]"), Ok(Action::Scroll { down: false }));
        assert_eq!(parse("tab_focus [1]"), Ok(Action::TabFocus(1)));
        assert_eq!(parse("goto [http://shop.test/cart]"), Ok(Action::Goto("http://shop.test/cart")));
        assert_eq!(parse("stop [$12.99]"), Ok(Action::Stop("$12.99")));
        assert_eq!(parse("stop"), Ok(Action::Stop("")));
        assert_eq!(parse("go_back"), Ok(Action::GoBack));
    }

    #[test]
    fn malformed_actions_explain_themselves() {
        for bad in [
            "",
            "click",
            "click [x]",
            "click 12",
            "type [3]",
            "type [3] [a] [2]",
            "press [Hyper+q]",
            "scroll [left]",
            "fly [1]",
            "click [1] extra",
            "new_tab [1]",
            "tab_focus [a]",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }
}
