//! The `PREVIOUS ACTION:` line: WebArena's description of the last action
//! (`get_action_description` and `action2str`), read from the observation the action was
//! chosen on.
//!
//! `click`, `hover` and `type` on an element of that observation name it by its line (`click [6]
//! where [6] is searchbox 'Search' focused: True required: False`; a typed text ends with a
//! space when Enter is pressed after it, as WebArena writes it); on any other id they get
//! WebArena's no-matching-element text; an action that does not parse gets its bad-format
//! text; the others are written back in the grammar's form. Two differences from WebArena: it
//! describes `tab_focus [i]` by that name (WebArena writes `page_focus [i]`, which its parser
//! does not accept), and the bad-format text quotes the action the env was sent (WebArena
//! quotes the whole reply, which the env never sees). Text echoed from the action is cut at
//! [`MAX_ECHO`] characters and kept on one line.

use super::browser::Browser;
use super::grammar::{clip, webarena_key_comb, Action};
use super::pages::Page;
use super::tree::node_line;
use super::Site;

/// Characters of the action's own text (typed text, answer, URL, bad action) echoed back.
pub const MAX_ECHO: usize = 300;

/// The description of `action` (its text and how it parsed), before it is applied.
pub fn describe(
    action: &str,
    parsed: &Result<Action<'_>, String>,
    browser: &Browser,
    site: &Site,
    urls: bool,
) -> String {
    let Ok(parsed) = parsed else {
        return format!(
            "The previous prediction you issued was \"{}\". However, the format was incorrect. Ensure that the \
             action is wrapped inside a pair of ``` and enclose arguments within [] as follows: ```action [arg] ...```.",
            echo(action.trim())
        );
    };
    let on_element = |verb: &str, id: u32, middle: &str| match element(browser, site, id, urls) {
        Some(content) => format!("{verb} [{id}]{middle} where [{id}] is {content}"),
        None => format!(
            "Attempt to perfom \"{verb}\" on element \"[{id}]\" but no matching element found. Please check the \
             observation more carefully."
        ),
    };
    match *parsed {
        Action::Click(id) => on_element("click", id, ""),
        Action::Hover(id) => on_element("hover", id, ""),
        Action::Type { id, text, enter } => {
            let typed = format!("{}{}", echo(text), if enter { " " } else { "" });
            on_element("type", id, &format!(" [{typed}]"))
        }
        Action::Press(keys) => format!("press [{}]", echo(&webarena_key_comb(keys))),
        Action::Scroll { down } => format!("scroll [{}]", if down { "down" } else { "up" }),
        Action::NewTab => "new_tab".into(),
        Action::TabFocus(i) => format!("tab_focus [{i}]"),
        Action::CloseTab => "close_tab".into(),
        Action::Goto(url) => format!("goto [{}]", echo(url)),
        Action::GoBack => "go_back".into(),
        Action::GoForward => "go_forward".into(),
        Action::Stop(answer) => format!("stop [{}]", echo(answer)),
    }
}

/// The line of element `[id]` without its id, whitespace collapsed, if the observation showed
/// it (WebArena's `" ".join(node_str.split()[1:])`).
fn element(browser: &Browser, site: &Site, id: u32, urls: bool) -> Option<String> {
    let index = (id as usize).checked_sub(1).filter(|&i| i < browser.tree.nodes.len())?;
    let view = browser.view();
    if !view.shows(index) {
        return None;
    }
    let url = |page: &Page| site.url(page);
    let line = node_line(&browser.tree, index, &view, if urls { Some(&url) } else { None });
    Some(line.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
}

fn echo(text: &str) -> String {
    clip(text, MAX_ECHO).replace(['\n', '\r'], " ")
}
