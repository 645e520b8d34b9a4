//! The Search-R1 / AgentGym-RL action grammar. Search-R1 first cuts a reply after its first
//! `</search>`, or, when it has none, after its first `</answer>` ([`cut_reply`]; the rest of
//! the reply is dropped, from the trajectory too), then takes the first complete
//! `<search>query</search>` or `<answer>text</answer>` of what is left as the action (it
//! matches `<(search|answer)>(.*?)</\1>` across lines, case-sensitively, and strips the
//! content). A reply with neither is invalid and gets [`INVALID_ACTION`] back.

/// AgentGym-RL's and Search-R1's observation for a reply with no complete tag, verbatim but for
/// the surrounding newlines.
pub const INVALID_ACTION: &str = "My previous action is invalid. If I want to search, I should put the query between \
     <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and \
     </answer>. Let me try again.";

/// What a reply asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    Search(&'a str),
    Answer(&'a str),
    Invalid,
}

/// `reply` up to and including its first `</search>`, else its first `</answer>`, else all
/// of it: what Search-R1 keeps of a reply.
pub fn cut_reply(reply: &str) -> &str {
    for close in ["</search>", "</answer>"] {
        if let Some(at) = reply.find(close) {
            return &reply[..at + close.len()];
        }
    }
    reply
}

/// The action of `reply`: the complete tag that starts first in [`cut_reply`]'s part of it
/// (see the module docstring).
pub fn parse_action(reply: &str) -> Action<'_> {
    let reply = cut_reply(reply);
    let search = complete_tag(reply, "search");
    let answer = complete_tag(reply, "answer");
    match (search, answer) {
        (Some((s, q)), Some((a, _))) if s < a => Action::Search(q),
        (_, Some((_, text))) => Action::Answer(text),
        (Some((_, q)), None) => Action::Search(q),
        (None, None) => Action::Invalid,
    }
}

/// The start and stripped content of the first `<tag>...</tag>` of `text`. If the first opening
/// tag has no closing tag after it, no later one has either, so only the first is tried.
fn complete_tag<'a>(text: &'a str, tag: &str) -> Option<(usize, &'a str)> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = text.find(&open)?;
    let body = start + open.len();
    let end = text[body..].find(&close)?;
    Some((start, text[body..body + end].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_complete_tag_wins() {
        assert_eq!(
            parse_action("<think>hm</think> <search> capital of France </search>"),
            Action::Search("capital of France")
        );
        assert_eq!(parse_action("<answer>Paris</answer><search>x</search>"), Action::Answer("Paris"));
        assert_eq!(parse_action("<search>x</search><answer>Paris</answer>"), Action::Search("x"));
        // An unclosed search does not hide a later complete answer.
        assert_eq!(parse_action("<search>oops <answer> Paris\n</answer>"), Action::Answer("Paris"));
        assert_eq!(parse_action("<search>a\nb</search>"), Action::Search("a\nb"));
        assert_eq!(parse_action("<search></search>"), Action::Search(""));
    }

    #[test]
    fn the_reply_is_cut_after_the_first_search_close_else_the_first_answer_close() {
        assert_eq!(cut_reply("a<search>q</search> b</search>"), "a<search>q</search>");
        assert_eq!(
            cut_reply("<answer>x</answer> more</answer><search>q</search>"),
            "<answer>x</answer> more</answer><search>q</search>"
        );
        assert_eq!(cut_reply("<answer>x</answer> more</answer>"), "<answer>x</answer>");
        assert_eq!(cut_reply("no tags"), "no tags");
        // Search-R1 reads nothing after the cut: a stray `</search>` hides a later answer.
        assert_eq!(parse_action("</search><answer>Paris</answer>"), Action::Invalid);
        assert_eq!(parse_action("<think>hm</search></think><answer>Paris</answer>"), Action::Invalid);
        // A complete answer before the first `</search>` is still the action.
        assert_eq!(parse_action("<answer>Paris</answer> then </search>"), Action::Answer("Paris"));
        // With no `</search>`, a search left open before the first `</answer>` stays open.
        assert_eq!(parse_action("<search>q <answer>x</answer> y</answer>"), Action::Answer("x"));
        // The search closed after an inner answer is Search-R1's action, answer and all.
        assert_eq!(parse_action("<search>q <answer>x</answer></search>"), Action::Search("q <answer>x</answer>"));
    }

    #[test]
    fn replies_without_a_complete_tag_are_invalid() {
        for reply in ["", "Paris", "<search>open", "</search>x<search>", "<SEARCH>x</SEARCH>", "<answer>x</search>"] {
            assert_eq!(parse_action(reply), Action::Invalid, "{reply:?}");
        }
    }
}
