//! The search env's expert: it reads the true state (the gold answers) and finds, by searching
//! backwards from the answer, the chain of passages that leads from the question to it; then it
//! searches those passages' titles in order and answers.
//!
//! Backwards: the passages that mention the answer in their text are the last hop; the passages
//! that mention one of their titles are the hop before, and so on, until a passage whose title
//! the question names (breadth-first, at most [`MAX_HOPS`] hops, shortest chain first, ties by
//! search rank). Played forwards, each search's title is named in the question or in a passage
//! the previous search returned, and the last passage names the answer, so every move is one a
//! reader of the observations could make. Questions whose answer is not reachable that way
//! (no chain of titles within the hops) get no expert move, with the reason.

use std::collections::{HashMap, HashSet, VecDeque};

use super::index::Hit;

/// The most searches a chain may need.
pub const MAX_HOPS: usize = 4;
/// Passages read per backward search: the candidates for the hop before.
const FANOUT: usize = 64;
/// Titles searched backwards at most, over all hops (bounds the expert's cost per question).
const MAX_EXPANDED: usize = 2000;

/// A passage's title (its first line, without the surrounding quotes) and text.
pub fn title_and_text(contents: &str) -> (&str, &str) {
    let (title, text) = contents.split_once('\n').unwrap_or((contents, ""));
    (title.trim().trim_matches('"').trim(), text)
}

/// The titles to search, in order, from the one the question names to the one whose passage
/// names an answer; `Err` says why there is none. `search(query, k)` retrieves passages.
pub fn find_chain(
    question: &str,
    answers: &[String],
    mut search: impl FnMut(&str, usize) -> Result<Vec<Hit>, String>,
) -> Result<Vec<String>, String> {
    let question = question.to_lowercase();
    let named = |title: &str| title.chars().count() >= 3 && question.contains(&title.to_lowercase());
    // `next[t]`: the title after `t` on the way to the answer (None: t's passage names it).
    let mut next: HashMap<String, Option<String>> = HashMap::new();
    let mut queue: VecDeque<(String, usize)> = VecDeque::new();
    let mut expanded = HashSet::new();
    for answer in answers.iter().filter(|a| !a.trim().is_empty()) {
        for title in mentioning(&mut search, answer)? {
            if !next.contains_key(&title) {
                next.insert(title.clone(), None);
                queue.push_back((title, 1));
            }
        }
    }
    while let Some((title, hops)) = queue.pop_front() {
        if named(&title) {
            return Ok(walk(&next, title));
        }
        if hops >= MAX_HOPS || !expanded.insert(title.clone()) || expanded.len() > MAX_EXPANDED {
            continue;
        }
        for before in mentioning(&mut search, &title)? {
            if !next.contains_key(&before) {
                next.insert(before.clone(), Some(title.clone()));
                queue.push_back((before, hops + 1));
            }
        }
    }
    Err(format!("no chain of at most {MAX_HOPS} passages leads from the question to a gold answer"))
}

/// Titles of the passages whose text (not title) contains `entity`, in search order.
fn mentioning(
    search: &mut impl FnMut(&str, usize) -> Result<Vec<Hit>, String>,
    entity: &str,
) -> Result<Vec<String>, String> {
    let needle = entity.trim().to_lowercase();
    Ok(search(entity, FANOUT)?
        .iter()
        .map(|hit| title_and_text(&hit.contents))
        .filter(|(title, text)| text.to_lowercase().contains(&needle) && title.to_lowercase() != needle)
        .map(|(title, _)| title.to_string())
        .collect())
}

fn walk(next: &HashMap<String, Option<String>>, first: String) -> Vec<String> {
    let mut chain = vec![first];
    while let Some(Some(after)) = chain.last().and_then(|t| next.get(t)) {
        chain.push(after.clone());
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<Hit> {
        let docs = [
            "\"Dou Works\"\nDou Works is a firm founded by Ana Bel in 1900.",
            "\"Ana Bel\"\nAna Bel is a poet born in Kor in 1870.",
            "\"Eli Vo\"\nEli Vo is a poet born in Kor in 1880.",
            "\"Kor\"\nKor is a city in Zem.",
            "\"Zem\"\nZem is a country.",
        ];
        docs.iter()
            .enumerate()
            .map(|(i, c)| Hit { id: i.to_string(), contents: c.to_string(), score: 1.0, row: i as u64 })
            .collect()
    }

    fn search(query: &str, k: usize) -> Result<Vec<Hit>, String> {
        let q = query.to_lowercase();
        Ok(corpus().into_iter().filter(|h| h.contents.to_lowercase().contains(&q)).take(k).collect())
    }

    #[test]
    fn the_chain_runs_from_the_question_to_the_answer() {
        let q = "In which city was the founder of Dou Works born?";
        assert_eq!(find_chain(q, &["Kor".into()], search).unwrap(), ["Dou Works", "Ana Bel"]);
        let q = "In which country was the founder of Dou Works born?";
        let answers = ["Republic of Zem".to_string(), "Zem".to_string()];
        assert_eq!(find_chain(q, &answers, search).unwrap(), ["Dou Works", "Ana Bel", "Kor"]);
    }

    #[test]
    fn no_chain_says_why() {
        let err = find_chain("Who founded Nothing Ltd?", &["Kor".into()], search).err().unwrap();
        assert!(err.contains("no chain"), "{err}");
        let failing = |_: &str, _: usize| Err("retriever down".to_string());
        assert_eq!(find_chain("q", &["Kor".into()], failing).err().unwrap(), "retriever down");
    }
}
