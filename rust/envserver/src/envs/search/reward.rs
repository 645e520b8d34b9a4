//! Answer scoring as Search-R1 defines it (`verl/utils/reward_score/qa_em.py`, after SQuAD's
//! evaluation script): normalise both sides, then exact match, substring exact match or token F1
//! against every gold answer, keeping the best.
//!
//! Normalisation, in Search-R1's order: lower-case (Unicode), drop ASCII punctuation (Python's
//! `string.punctuation`; Unicode punctuation such as `’` or `–` stays), replace the words `a`, `an`,
//! `the` by a space (`\b(a|an|the)\b`, where a word character is Python's `\w`: a Unicode
//! letter or number or `_`, not a combining mark; [`crate::pytext::is_word`]), and collapse
//! whitespace (Python's `str.split()`, which also splits on `\x1c`-`\x1f`).

/// How an answer is scored against the gold answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewardKind {
    /// 1 when the normalised answer equals a normalised gold answer (Search-R1's `em_check`).
    ExactMatch,
    /// 1 when a normalised gold answer is a substring of the normalised answer (`subem_check`).
    SubstringMatch,
    /// The best token-level F1 over the gold answers (SQuAD's `f1_score`).
    F1,
}

impl RewardKind {
    /// `"em"`, `"subem"` or `"f1"`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "em" => Some(Self::ExactMatch),
            "subem" => Some(Self::SubstringMatch),
            "f1" => Some(Self::F1),
            _ => None,
        }
    }
}

/// The score of an answer and the gold answer that gave it (`None` when the score is 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub value: f32,
    /// Index into the gold answers of the best-scoring one.
    pub matched: Option<usize>,
}

/// Scores `answer` against `gold` with `kind`; the first gold answer wins ties.
pub fn score(kind: RewardKind, answer: &str, gold: &[String]) -> Score {
    let answer = normalize_answer(answer);
    let mut best = Score { value: 0.0, matched: None };
    for (i, g) in gold.iter().enumerate() {
        let g = normalize_answer(g);
        let value = match kind {
            RewardKind::ExactMatch => f32::from(u8::from(answer == g)),
            RewardKind::SubstringMatch => f32::from(u8::from(answer.contains(&g))),
            RewardKind::F1 => token_f1(&answer, &g),
        };
        if value > best.value {
            best = Score { value, matched: Some(i) };
        }
    }
    best
}

/// Search-R1's `normalize_answer` (see the module docstring).
pub fn normalize_answer(text: &str) -> String {
    let lowered = text.to_lowercase();
    let no_punct: String = lowered.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let no_articles = remove_articles(&no_punct);
    no_articles.split(crate::pytext::is_space).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Token F1 of two normalised strings (SQuAD's `f1_score`, with HotpotQA's and FlashRAG's rule
/// that a yes/no/noanswer answer scores 0 unless both sides are that same word).
pub fn token_f1(prediction: &str, gold: &str) -> f32 {
    let special = ["yes", "no", "noanswer"];
    if (special.contains(&prediction) || special.contains(&gold)) && prediction != gold {
        return 0.0;
    }
    let pred: Vec<&str> = prediction.split(' ').filter(|w| !w.is_empty()).collect();
    let mut gold_left: Vec<&str> = gold.split(' ').filter(|w| !w.is_empty()).collect();
    let gold_len = gold_left.len();
    let mut same = 0usize;
    for token in &pred {
        if let Some(k) = gold_left.iter().position(|g| g == token) {
            gold_left.swap_remove(k);
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f32 / pred.len() as f32;
    let recall = same as f32 / gold_len as f32;
    2.0 * precision * recall / (precision + recall)
}

/// Python `re`'s `\w` on `str` patterns (letters, numbers and `_`; not combining marks).
fn is_word_char(c: char) -> bool {
    crate::pytext::is_word(c)
}

/// `re.sub(r"\b(a|an|the)\b", " ", text)`.
fn remove_articles(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let boundary_before = i == 0 || !is_word_char(chars[i - 1]);
        if boundary_before {
            if let Some(len) = article_at(&chars[i..]) {
                out.push(' ');
                i += len;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The length of `a`, `an` or `the` at the start of `rest` when a word boundary follows it.
/// Alternation order matters as in Python's regex: `a` is tried before `an`, and `a` followed by
/// `n` has no boundary, so `an` is found next.
fn article_at(rest: &[char]) -> Option<usize> {
    for word in ["a", "an", "the"] {
        let n = word.chars().count();
        let matches = rest.len() >= n && rest.iter().zip(word.chars()).all(|(a, b)| *a == b);
        if matches && rest.get(n).is_none_or(|c| !is_word_char(*c)) {
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: input, what Search-R1's `normalize_answer` (Python 3) returns for it.
    const NORMALIZED: &[(&str, &str)] = &[
        ("The Eiffel Tower", "eiffel tower"),
        ("  the   the  ", ""),
        ("An apple a day", "apple day"),
        ("Theatre", "theatre"),
        ("anthem", "anthem"),
        ("a-team", "ateam"),
        ("the_end", "theend"),
        ("U.S.A.", "usa"),
        ("Don't stop", "dont stop"),
        ("1,000,000", "1000000"),
        ("3.14", "314"),
        ("Zürich", "zürich"),
        ("ÉCOLE", "école"),
        ("l’été", "l’été"),
        ("Rock–Paper", "rock–paper"),
        ("tab\tand\nnewline", "tab and newline"),
        ("sep\u{1f}unit", "sep unit"),
        ("non\u{a0}breaking", "non breaking"),
        ("A", ""),
        ("a1", "a1"),
        ("éa", "éa"),
        ("(the) [a] {an}", ""),
        ("ΣΊΣΥΦΟΣ", "σίσυφος"),
        ("", ""),
        // Combining marks and circled letters are not word characters in Python's `re`, so
        // an article before one still stands alone.
        ("a\u{901} b", "\u{901} b"),
        ("the\u{93e}", "\u{93e}"),
        ("Theⓐ", "ⓐ"),
        ("an\u{301}", "\u{301}"),
    ];

    #[test]
    fn normalizer_matches_search_r1_on_tricky_answers() {
        for (input, want) in NORMALIZED {
            assert_eq!(normalize_answer(input), *want, "normalize_answer({input:?})");
        }
    }

    fn gold(answers: &[&str]) -> Vec<String> {
        answers.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exact_match_reports_the_gold_answer_that_matched() {
        let g = gold(&["Paris, France", "Paris"]);
        assert_eq!(score(RewardKind::ExactMatch, " the paris. ", &g), Score { value: 1.0, matched: Some(1) });
        assert_eq!(score(RewardKind::ExactMatch, "Lyon", &g), Score { value: 0.0, matched: None });
        assert_eq!(score(RewardKind::ExactMatch, "anything", &[]), Score { value: 0.0, matched: None });
    }

    #[test]
    fn substring_match_needs_the_gold_inside_the_answer() {
        let g = gold(&["Barack Obama"]);
        assert_eq!(score(RewardKind::SubstringMatch, "President Barack Obama.", &g).value, 1.0);
        assert_eq!(score(RewardKind::SubstringMatch, "Obama", &g).value, 0.0);
        // An empty gold answer is a substring of everything, as in Search-R1.
        assert_eq!(score(RewardKind::SubstringMatch, "x", &gold(&["The"])).value, 1.0);
    }

    #[test]
    fn f1_counts_shared_tokens_with_multiplicity() {
        let f1 = |p: &str, g: &str| score(RewardKind::F1, p, &gold(&[g])).value;
        assert!((f1("new york city", "New York") - 0.8).abs() < 1e-6);
        assert!((f1("the the cat", "cat cat") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(f1("yes", "no"), 0.0);
        assert_eq!(f1("no", "no"), 1.0);
        assert_eq!(f1("yes it is", "yes"), 0.0);
        assert_eq!(f1("", "cat"), 0.0);
        let best = score(RewardKind::F1, "john smith", &gold(&["smith", "John Smith"]));
        assert_eq!(best, Score { value: 1.0, matched: Some(1) });
    }

    #[test]
    fn reward_kinds_parse() {
        assert_eq!(RewardKind::parse("em"), Some(RewardKind::ExactMatch));
        assert_eq!(RewardKind::parse("subem"), Some(RewardKind::SubstringMatch));
        assert_eq!(RewardKind::parse("f1"), Some(RewardKind::F1));
        assert_eq!(RewardKind::parse("EM?"), None);
    }
}
