//! WebArena's action grammar: `click [id]`, `type [id] [text] [press_enter_after=0|1]`,
//! `hover [id]`, `press [key_comb]`, `scroll [down|up]`, `new_tab`, `tab_focus [i]`,
//! `close_tab`, `goto [url]`, `go_back`, `go_forward`, `stop [answer]`.
//!
//! Read as WebArena's `create_id_based_action` reads an action: the verb is the text before
//! the first `[` (or the first word when there is none); `click`, `hover` and `tab_focus` take
//! the first `[id]`, `press`, `goto` and `stop` everything from the first `[` to the last `]`,
//! `scroll` a `down` or `up` with or without brackets, and text after a complete action is
//! ignored (`click [12] now`, `new_tab [1]`); `stop` without brackets stops with an empty
//! answer. `type` takes its groups to the end of the action (WebArena's pattern ends with the
//! Enter flag). Beyond WebArena, verbs are read case-insensitively, ids and directions may
//! have spaces inside the brackets, `[press_enter_after=1]` and `[direction=down]` name their
//! values, and `Ctrl`/`Cmd` name the `Control`/`Meta` modifiers (WebArena's own prompt's
//! example is `press [Ctrl+v]`, a name its browser does not know).
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

/// The first group of `rest` (which starts with `[`), up to the first `]`: WebArena's
/// `\[(\d+)\]` for ids.
fn first_group(rest: &str) -> Option<&str> {
    let body = rest.trim_start().strip_prefix('[')?;
    body.find(']').map(|end| &body[..end])
}

/// What lies between the first `[` and the last `]` of `rest`: WebArena's greedy `\[(.+)\]`.
fn outer_group(rest: &str) -> Option<&str> {
    let body = rest.trim_start().strip_prefix('[')?;
    body.rfind(']').map(|end| &body[..end]).filter(|text| !text.is_empty())
}

fn id(text: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{}' is not an element id; ids are the numbers in [brackets]", text.trim()))
}

/// `down` or `up` at the start of `rest`, in brackets or not (`scroll ?\[?(up|down)\]?`).
fn direction(rest: &str) -> Option<bool> {
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('[').unwrap_or(rest).trim_start();
    let rest = rest.strip_prefix("direction=").unwrap_or(rest).to_ascii_lowercase();
    if rest.starts_with("down") {
        Some(true)
    } else if rest.starts_with("up") {
        Some(false)
    } else {
        None
    }
}

/// The verb of `action` and the rest: WebArena's split before the first `[`, else after the
/// first word.
fn split_verb(action: &str) -> (String, &str) {
    let at = action.find('[').unwrap_or_else(|| action.find(char::is_whitespace).unwrap_or(action.len()));
    let (verb, rest) = action.split_at(at);
    (verb.trim().to_ascii_lowercase(), rest)
}

/// Parses one action (see the module docstring).
pub fn parse(action: &str) -> Result<Action<'_>, String> {
    let action = action.trim();
    let (verb, rest) = split_verb(action);
    let malformed = || format!("The action '{}' is not valid. Actions: {GRAMMAR}.", clip(action, 120));
    let one_id = || first_group(rest).ok_or_else(malformed).and_then(id);
    match verb.as_str() {
        "click" => Ok(Action::Click(one_id()?)),
        "hover" => Ok(Action::Hover(one_id()?)),
        "tab_focus" => {
            let i = first_group(rest).ok_or_else(malformed)?;
            i.trim().parse().map(Action::TabFocus).map_err(|_| format!("'{}' is not a tab index.", clip(i, 40)))
        }
        "type" => parse_type(groups(rest).ok_or_else(malformed)?.as_slice()).unwrap_or_else(|| Err(malformed())),
        "press" => {
            let keys = outer_group(rest).ok_or_else(malformed)?.trim();
            if valid_keys(keys) {
                Ok(Action::Press(keys))
            } else {
                Err(format!(
                    "'{}' is not a key combination; use key names such as Enter, Tab, PageDown or Control+a.",
                    clip(keys, 40)
                ))
            }
        }
        "scroll" => direction(rest)
            .map(|down| Action::Scroll { down })
            .ok_or_else(|| format!("scroll takes [down] or [up], not '{}'.", clip(rest.trim(), 40))),
        "goto" => Ok(Action::Goto(outer_group(rest).ok_or_else(malformed)?.trim())),
        "stop" => Ok(Action::Stop(outer_group(rest).map_or("", str::trim))),
        "new_tab" => Ok(Action::NewTab),
        "close_tab" => Ok(Action::CloseTab),
        "go_back" => Ok(Action::GoBack),
        "go_forward" => Ok(Action::GoForward),
        _ => Err(malformed()),
    }
}

/// `type`'s groups: `[id] [text]` or `[id] [text] [flag]`; `None` for another count.
fn parse_type<'a>(args: &[&'a str]) -> Option<Result<Action<'a>, String>> {
    let (i, text, flag) = match args {
        [i, text] => (i, *text, None),
        [i, text, flag] => (i, *text, Some(flag.trim())),
        _ => return None,
    };
    let enter = match flag.map(|f| f.strip_prefix("press_enter_after=").unwrap_or(f)) {
        None | Some("1") => true,
        Some("0") => false,
        Some(other) => return Some(Err(format!("press_enter_after must be 0 or 1, not '{}'.", clip(other, 40)))),
    };
    Some(id(i).map(|id| Action::Type { id, text, enter }))
}

/// Keys `press` accepts besides single letters and digits: the browser's names (WebArena's
/// key table and the other arrows, Space, F1-F12).
const NAMED_KEYS: &[&str] = &[
    "Backquote",
    "Minus",
    "Equal",
    "Backslash",
    "Insert",
    "F1",
    "F2",
    "F3",
    "F4",
    "F5",
    "F6",
    "F7",
    "F8",
    "F9",
    "F10",
    "F11",
    "F12",
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
/// Modifier names, `Ctrl` and `Cmd` included (for `Control` and `Meta`).
const MODIFIERS: &[&str] = &["Control", "Meta", "Shift", "Alt", "Ctrl", "Cmd"];

/// `Enter`, `Control+a`, `Shift+Tab`, `Ctrl+v`: modifiers joined with `+` before one key.
fn valid_keys(keys: &str) -> bool {
    let parts: Vec<&str> = keys.split('+').collect();
    let (key, mods) = parts.split_last().expect("split yields one part at least");
    let is_key = NAMED_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
        || (key.chars().count() == 1 && key.chars().all(|c| c.is_ascii_alphanumeric()));
    is_key && mods.iter().all(|m| MODIFIERS.iter().any(|k| k.eq_ignore_ascii_case(m)))
}

/// WebArena's `map_keys`: each `+`-separated name that its key table knows in lower case
/// (`enter`, `pagedown`, `f5`...) spelled as the browser spells it, the others as written.
pub fn webarena_key_comb(keys: &str) -> String {
    keys.split('+')
        .map(|key| {
            let lower = key.to_lowercase();
            let function_key =
                lower.strip_prefix('f').and_then(|n| n.parse::<u8>().ok()).filter(|n| (1..=12).contains(n));
            match function_key {
                Some(n) => format!("F{n}"),
                None => WEBARENA_KEY_NAMES
                    .iter()
                    .find(|k| k.to_lowercase() == lower)
                    .map_or(key.to_string(), |k| k.to_string()),
            }
        })
        .collect::<Vec<_>>()
        .join("+")
}

/// The names of WebArena's key table (`SPECIAL_KEY_MAPPINGS`) besides F1-F12.
const WEBARENA_KEY_NAMES: &[&str] = &[
    "Backquote",
    "Minus",
    "Equal",
    "Backslash",
    "Backspace",
    "Meta",
    "Tab",
    "Delete",
    "Escape",
    "ArrowDown",
    "End",
    "Enter",
    "Home",
    "Insert",
    "PageDown",
    "PageUp",
    "ArrowRight",
    "ArrowUp",
];

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
    fn accepts_what_webarenas_parser_accepts() {
        // The example of WebArena's own prompt.
        assert_eq!(parse("press [Ctrl+v]"), Ok(Action::Press("Ctrl+v")));
        assert_eq!(parse("press [cmd+Shift+z]"), Ok(Action::Press("cmd+Shift+z")));
        assert_eq!(parse("press [F5]"), Ok(Action::Press("F5")));
        // Trailing text after a complete action.
        assert_eq!(parse("click [12] to open the page"), Ok(Action::Click(12)));
        assert_eq!(parse("hover [3] [4]"), Ok(Action::Hover(3)));
        assert_eq!(parse("tab_focus [1] please"), Ok(Action::TabFocus(1)));
        assert_eq!(parse("new_tab [1]"), Ok(Action::NewTab));
        assert_eq!(parse("go_back now"), Ok(Action::GoBack));
        assert_eq!(parse("press [Enter] twice"), Ok(Action::Press("Enter")));
        assert_eq!(parse("goto [http://shop.test/cart] now"), Ok(Action::Goto("http://shop.test/cart")));
        // `scroll` with or without brackets.
        assert_eq!(parse("scroll down"), Ok(Action::Scroll { down: true }));
        assert_eq!(parse("scroll up a bit"), Ok(Action::Scroll { down: false }));
        assert_eq!(parse("scroll [down] more"), Ok(Action::Scroll { down: true }));
        // `stop` reads to the last `]`, greedily, and stops with no answer without brackets.
        assert_eq!(parse("stop [a] and [b]"), Ok(Action::Stop("a] and [b")));
        assert_eq!(parse("stop [Paris] done"), Ok(Action::Stop("Paris")));
        assert_eq!(parse("stop Paris"), Ok(Action::Stop("")));
    }

    #[test]
    fn malformed_actions_explain_themselves() {
        for bad in [
            "",
            "click",
            "click [x]",
            "click 12",
            "click me [12]",
            "type [3]",
            "type [3] [a] [2]",
            "type [3] [a] extra",
            "press [Hyper+q]",
            "press Enter",
            "scroll [left]",
            "scroll",
            "fly [1]",
            "goto",
            "tab_focus [a]",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn key_combinations_as_webarena_names_them() {
        assert_eq!(webarena_key_comb("enter"), "Enter");
        assert_eq!(webarena_key_comb("Ctrl+v"), "Ctrl+v");
        assert_eq!(webarena_key_comb("shift+pagedown"), "shift+PageDown");
        assert_eq!(webarena_key_comb("f12"), "F12");
    }
}
