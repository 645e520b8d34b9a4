//! QA sets: JSONL rows of `{"question": str, "golden_answers": [str] | str, "data_source": str?}`
//! (FlashRAG's and Search-R1's fields; other fields are ignored). Task id `i` is row `i`.
//!
//! Unlike corpus lines, a bad QA row is an error naming its line: a silently shorter QA set
//! would shift every later task id.

use std::path::Path;

use serde::Deserialize;

use crate::env::EnvError;

/// One question and its accepted answers.
#[derive(Debug, Clone, PartialEq)]
pub struct QaItem {
    pub question: String,
    pub golden_answers: Vec<String>,
    pub data_source: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Answers {
    Many(Vec<String>),
    One(String),
}

#[derive(Deserialize)]
struct Row {
    question: String,
    golden_answers: Answers,
    #[serde(default)]
    data_source: Option<String>,
}

/// Loads the QA set at `path`; blank lines are ignored and do not take a task id.
pub fn load_qa(path: &Path) -> Result<Vec<QaItem>, EnvError> {
    let text = std::fs::read_to_string(path).map_err(|e| EnvError::Data(format!("QA set {}: {e}", path.display())))?;
    parse_qa(&text).map_err(|e| EnvError::Data(format!("QA set {}: {e}", path.display())))
}

/// Parses QA JSONL text (see [`load_qa`]).
pub fn parse_qa(text: &str) -> Result<Vec<QaItem>, String> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(line)
            .map_err(|e| format!("line {}: {e} (expected {{\"question\": str, \"golden_answers\": [str]}})", n + 1))?;
        let golden_answers = match row.golden_answers {
            Answers::Many(v) => v,
            Answers::One(s) => vec![s],
        };
        if golden_answers.is_empty() {
            return Err(format!("line {}: golden_answers is empty", n + 1));
        }
        items.push(QaItem { question: row.question, golden_answers, data_source: row.data_source });
    }
    if items.is_empty() {
        return Err("no questions".into());
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_with_one_or_many_answers() {
        let text = concat!(
            r#"{"question": "q1", "golden_answers": ["a", "b"], "data_source": "nq", "id": "x"}"#,
            "\n\n",
            r#"{"question": "q2", "golden_answers": "c"}"#,
            "\n"
        );
        let items = parse_qa(text).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].golden_answers, vec!["a", "b"]);
        assert_eq!(items[0].data_source.as_deref(), Some("nq"));
        assert_eq!(items[1].golden_answers, vec!["c"]);
        assert_eq!(items[1].data_source, None);
    }

    #[test]
    fn bad_rows_name_their_line() {
        let err = parse_qa("{\"question\": \"q\", \"golden_answers\": [\"a\"]}\n{\"question\": 3}\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        let err = parse_qa("{\"question\": \"q\", \"golden_answers\": []}").unwrap_err();
        assert!(err.contains("empty"), "{err}");
        assert!(parse_qa("\n").is_err());
    }
}
