//! Deep Search: multi-hop question answering over an embedded BM25 index, as in Search-R1 and
//! AgentGym-RL's SearchQA.
//!
//! An episode is one question of the QA set (task id = row). Each step is one reply of the model,
//! cut as Search-R1 cuts it (after the first `</search>`, else the first `</answer>`;
//! `grammar.rs`): its first complete `<search>query</search>` gets the top-k passages back inside
//! `<information>...</information>` as `Doc i(Title: ...) text` lines (Search-R1's format); its
//! first complete `<answer>...</answer>` ends the episode with the answer's score against the gold
//! answers (exact match after normalisation by default). A reply with neither, an empty query or
//! an over-long one gets a corrective observation and costs a turn. After `max_turns` replies
//! without an answer the episode ends with reward 0. Search-R1's `max_turns = N` allows N + 1
//! replies (N that may search, then a last one whose answer is scored and whose search retrieves
//! nothing), so `max_turns = N + 1` here gives its number of replies.
//!
//! Options (`EnvPool("search", ...)`): `qa` (QA JSONL, required) and the passages' source, one
//! of `index` (a directory built by `agentgym index build`) or `retriever` (the URL of a
//! retrieval server with Search-R1's API, e.g. `http://127.0.0.1:8000/retrieve`), with
//! `retriever_timeout` (seconds, 30); `topk` (3), `max_passage_chars` (0: whole passages),
//! `max_turns` (10), `reward` (`em`, `subem` or `f1`), `max_query_chars` (1000).
//!
//! The index is opened once per process and directory and shared by every pool and session
//! (memory-mapped, read-only). Sessions of one batched step search concurrently on the pool's
//! threads, through one shared searcher; a query that another session sent recently (the
//! episodes of a GRPO group often search alike) is answered from a shared cache of results.
//!
//! With a remote retriever, the distinct queries of a batched step go to the server in one
//! request before the sessions step (`EnvFactory::prepare_step`), and each session formats its
//! own result exactly as the local path does. When the retriever fails (no connection, timeout,
//! HTTP error, a reply of the wrong shape), the sessions whose searches it carried get a
//! per-session error and stay as they were (the turn is not counted, the same reply can be sent
//! again); the other sessions of the batch step normally.

pub mod cache;
pub mod expert;
pub mod grammar;
pub mod index;
pub mod qa;
pub mod retriever;
pub mod reward;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::env::{check_option_keys, EnvError, EnvFactory, ExpertMove, Options, Prepared, StepOutcome, TextEnv};
use grammar::{parse_action, Action, INVALID_ACTION};
use index::{Hit, SearchIndex};
use qa::QaItem;
use retriever::{RemoteRetriever, Retrieved};
use reward::{RewardKind, Score};

const OPTION_KEYS: &[&str] = &[
    "index",
    "retriever",
    "retriever_timeout",
    "qa",
    "topk",
    "max_passage_chars",
    "max_turns",
    "reward",
    "max_query_chars",
];

/// `retriever_timeout` when not given, in seconds.
const DEFAULT_RETRIEVER_TIMEOUT_S: f64 = 30.0;

/// The per-pool settings every session reads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub topk: usize,
    /// Characters of a passage's text shown (0: all).
    pub max_passage_chars: usize,
    pub max_turns: u32,
    pub reward: RewardKind,
    pub max_query_chars: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self { topk: 3, max_passage_chars: 0, max_turns: 10, reward: RewardKind::ExactMatch, max_query_chars: 1000 }
    }
}

/// Where passages come from.
pub enum Passages {
    /// The embedded BM25 index.
    Local(Arc<SearchIndex>),
    /// A retrieval server (Search-R1's API).
    Remote(RemoteRetriever),
}

struct Shared {
    passages: Passages,
    qa: Vec<QaItem>,
    settings: Settings,
}

/// Builds search sessions over one index and QA set.
pub struct SearchFactory {
    shared: Arc<Shared>,
}

impl SearchFactory {
    /// The factory for `EnvPool("search", **options)` (see the module docstring for the keys).
    pub fn new(options: &Options) -> Result<Self, EnvError> {
        check_option_keys(options, OPTION_KEYS)?;
        let required = |key: &str, what: &str| {
            options
                .get(key)
                .map(PathBuf::from)
                .ok_or_else(|| EnvError::InvalidOption { key: key.into(), message: format!("required: {what}") })
        };
        let qa_path = required("qa", "a QA JSONL file of {\"question\", \"golden_answers\"} rows")?;
        let defaults = Settings::default();
        let settings = Settings {
            topk: parse_number(options, "topk", defaults.topk, 1)?,
            max_passage_chars: parse_number(options, "max_passage_chars", defaults.max_passage_chars, 0)?,
            max_turns: parse_number(options, "max_turns", defaults.max_turns as usize, 1)? as u32,
            reward: match options.get("reward") {
                None => defaults.reward,
                Some(text) => RewardKind::parse(text).ok_or_else(|| EnvError::InvalidOption {
                    key: "reward".into(),
                    message: format!("{text:?} is not one of em, subem, f1"),
                })?,
            },
            max_query_chars: parse_number(options, "max_query_chars", defaults.max_query_chars, 1)?,
        };
        let passages = passages(options)?;
        let qa = qa::load_qa(&qa_path)?;
        Ok(Self::from_parts(passages, qa, settings))
    }

    /// A factory over an opened index or a retriever, and a loaded QA set.
    pub fn from_parts(passages: Passages, qa: Vec<QaItem>, settings: Settings) -> Self {
        Self { shared: Arc::new(Shared { passages, qa, settings }) }
    }
}

/// The passages' source the options name: `index` or `retriever`, exactly one of them.
fn passages(options: &Options) -> Result<Passages, EnvError> {
    let invalid = |key: &str, message: String| EnvError::InvalidOption { key: key.into(), message };
    let timeout = match options.get("retriever_timeout") {
        None => DEFAULT_RETRIEVER_TIMEOUT_S,
        Some(text) => match text.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 86_400.0 => s,
            _ => {
                return Err(invalid("retriever_timeout", format!("{text:?} is not a number of seconds in (0, 86400]")))
            }
        },
    };
    match (options.get("index"), options.get("retriever")) {
        (Some(_), Some(_)) => {
            Err(invalid("retriever", "give either `index` (a local index) or `retriever` (a URL), not both".into()))
        }
        (Some(dir), None) => {
            if options.contains_key("retriever_timeout") {
                return Err(invalid("retriever_timeout", "only applies with `retriever`".into()));
            }
            Ok(Passages::Local(open_shared(Path::new(dir))?))
        }
        (None, Some(url)) => Ok(Passages::Remote(RemoteRetriever::new(url, Duration::from_secs_f64(timeout))?)),
        (None, None) => Err(invalid(
            "index",
            "required: an index directory built by `agentgym index build CORPUS INDEX_DIR`, \
             or `retriever`: the URL of a retrieval server (Search-R1's /retrieve API)"
                .into(),
        )),
    }
}

fn parse_number(options: &Options, key: &str, default: usize, min: usize) -> Result<usize, EnvError> {
    let Some(text) = options.get(key) else { return Ok(default) };
    match text.trim().parse::<usize>() {
        Ok(n) if n >= min && n <= u32::MAX as usize => Ok(n),
        _ => Err(EnvError::InvalidOption { key: key.into(), message: format!("{text:?} is not an integer >= {min}") }),
    }
}

/// Indexes opened in this process, by canonical directory: pools over the same directory share
/// one searcher (and its caches) instead of each mapping the files again.
static OPEN_INDEXES: Mutex<Option<HashMap<PathBuf, Weak<SearchIndex>>>> = Mutex::new(None);

/// The index in `dir`, opened once per process while any pool holds it.
pub fn open_shared(dir: &Path) -> Result<Arc<SearchIndex>, EnvError> {
    let key = dir.canonicalize().map_err(|e| EnvError::Data(format!("search index {}: {e}", dir.display())))?;
    let mut table = OPEN_INDEXES.lock();
    let table = table.get_or_insert_with(HashMap::new);
    if let Some(index) = table.get(&key).and_then(Weak::upgrade) {
        return Ok(index);
    }
    let index = Arc::new(SearchIndex::open(&key).map_err(|e| EnvError::Data(e.to_string()))?);
    table.retain(|_, weak| weak.strong_count() > 0);
    table.insert(key, Arc::downgrade(&index));
    Ok(index)
}

impl EnvFactory for SearchFactory {
    fn name(&self) -> &str {
        "search"
    }

    fn num_tasks(&self) -> u64 {
        self.shared.qa.len() as u64
    }

    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(SearchEnv::new(self.shared.clone()))
    }

    /// With a remote retriever: the batch's distinct usable queries, retrieved in one request.
    fn prepare_step(&self, actions: &[&str]) -> Option<Box<Prepared>> {
        let Passages::Remote(retriever) = &self.shared.passages else { return None };
        let mut queries: Vec<&str> = actions
            .iter()
            .filter_map(|a| match parse_action(a) {
                Action::Search(q) if query_problem(q, &self.shared.settings).is_none() => Some(q),
                _ => None,
            })
            .collect();
        // Sorted so that the request does not depend on the order of sessions in the batch.
        queries.sort_unstable();
        queries.dedup();
        if queries.is_empty() {
            return None;
        }
        let k = self.shared.settings.topk;
        let results = retriever.retrieve(&queries, k);
        let answers = queries.iter().map(|q| q.to_string()).zip(results).collect();
        Some(Box::new(Fetched { k, answers }))
    }
}

/// One batched step's retrieved results, by query text.
struct Fetched {
    k: usize,
    answers: HashMap<String, Retrieved>,
}

/// The corrective observation for a query that is not searched, or `None` for a usable one.
fn query_problem(query: &str, settings: &Settings) -> Option<String> {
    if query.is_empty() {
        return Some("The search query is empty. Put the query between <search> and </search>.".into());
    }
    let chars = query.chars().count();
    if chars > settings.max_query_chars {
        return Some(format!(
            "The search query is too long ({chars} characters; at most {}). Search with a shorter query.",
            settings.max_query_chars
        ));
    }
    if index::query_terms(query).is_empty() {
        return Some("The search query has no words to search for. Search with words from the question.".into());
    }
    None
}

/// One search session.
pub struct SearchEnv {
    shared: Arc<Shared>,
    task: usize,
    turns: u32,
    searches: u32,
    /// The queries searched so far, in order (what the expert has looked up).
    queries: Vec<String>,
    observation: String,
    answer: Option<String>,
    score: Option<Score>,
}

impl SearchEnv {
    fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            task: 0,
            turns: 0,
            searches: 0,
            queries: Vec::new(),
            observation: String::new(),
            answer: None,
            score: None,
        }
    }

    /// The top `k` passages for `query` from the env's source (the expert's searches).
    fn retrieve(&self, query: &str, k: usize) -> Result<Vec<Hit>, String> {
        match &self.shared.passages {
            Passages::Local(index) => index.search(query, k).map_err(|e| e.to_string()),
            Passages::Remote(retriever) => retriever.retrieve(&[query], k).remove(0).map(|hits| hits.to_vec()),
        }
    }

    fn item(&self) -> &QaItem {
        &self.shared.qa[self.task]
    }

    /// The observation for a search and whether it searched, the corrective observation for an
    /// unusable query, or `Err` when the remote retriever failed.
    fn search(&self, query: &str, prepared: Option<&Prepared>) -> Result<(String, bool), String> {
        let settings = &self.shared.settings;
        if let Some(problem) = query_problem(query, settings) {
            return Ok((problem, false));
        }
        let observation = match &self.shared.passages {
            Passages::Local(index) => match index.search(query, settings.topk) {
                Ok(hits) => format_information(&hits, settings.max_passage_chars),
                Err(e) => format!("The search failed ({e}). Try again."),
            },
            Passages::Remote(retriever) => {
                let fetched = prepared.and_then(|p| p.downcast_ref::<Fetched>()).filter(|f| f.k == settings.topk);
                let hits = match fetched.and_then(|f| f.answers.get(query)) {
                    Some(answer) => answer.clone()?,
                    // Stepped outside a batch that prepared it: a request of its own.
                    None => retriever.retrieve(&[query], settings.topk).remove(0)?,
                };
                format_information(&hits, settings.max_passage_chars)
            }
        };
        Ok((observation, true))
    }
}

/// Search-R1's `_passages2string` inside `<information>` tags: `Doc i(Title: <first line>) <rest>`.
pub fn format_information(hits: &[Hit], max_passage_chars: usize) -> String {
    if hits.is_empty() {
        return "<information>No passage matches the query.</information>".into();
    }
    let mut out = String::from("<information>");
    for (i, hit) in hits.iter().enumerate() {
        let (title, text) = hit.contents.split_once('\n').unwrap_or((&hit.contents, ""));
        let text = truncate_chars(text, max_passage_chars);
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("Doc {}(Title: {title}) {text}", i + 1));
    }
    let body = out.trim_end().len();
    out.truncate(body);
    out.push_str("</information>");
    out
}

/// The first `max` characters of `text` and `...` when it was longer (`max` 0: all of it).
fn truncate_chars(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((cut, _)) if max > 0 => format!("{}...", &text[..cut]).into(),
        _ => text.into(),
    }
}

impl TextEnv for SearchEnv {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        let num_tasks = self.shared.qa.len() as u64;
        if task_id >= num_tasks {
            return Err(EnvError::TaskOutOfRange { env: "search".into(), task_id, num_tasks });
        }
        self.task = task_id as usize;
        self.turns = 0;
        self.searches = 0;
        self.queries.clear();
        self.answer = None;
        self.score = None;
        self.observation = format!("Question: {}", self.item().question.trim());
        Ok(self.observation.clone())
    }

    /// Outside a pool's batched step a failed retriever gives a corrective observation (this
    /// signature has no error), and the turn is not counted.
    fn step(&mut self, action: &str) -> StepOutcome {
        self.step_prepared(action, None).unwrap_or_else(|e| StepOutcome {
            observation: format!("The search failed ({e}). Try again."),
            reward: 0.0,
            done: false,
        })
    }

    fn step_prepared(&mut self, action: &str, prepared: Option<&Prepared>) -> Result<StepOutcome, String> {
        if self.score.is_some() {
            return Ok(StepOutcome { observation: self.observation.clone(), reward: 0.0, done: true });
        }
        let (observation, reward, done) = match parse_action(action) {
            Action::Search(query) => {
                // `?` before anything changes: a failed retriever leaves the session as it was.
                let (observation, searched) = self.search(query, prepared)?;
                if searched {
                    self.searches += 1;
                    self.queries.push(query.to_string());
                }
                (observation, 0.0, false)
            }
            Action::Answer(text) => {
                let score = reward::score(self.shared.settings.reward, text, &self.item().golden_answers);
                let reward = score.value;
                self.answer = Some(text.to_string());
                self.score = Some(score);
                ("Your answer was recorded.".to_string(), reward, true)
            }
            Action::Invalid => (INVALID_ACTION.to_string(), 0.0, false),
        };
        self.turns += 1;
        let max_turns = self.shared.settings.max_turns;
        let (observation, done) = if !done && self.turns >= max_turns {
            self.score = Some(Score { value: 0.0, matched: None });
            (format!("The turn limit ({max_turns}) is reached without an answer."), true)
        } else {
            (observation, done)
        };
        self.observation = observation.clone();
        Ok(StepOutcome { observation, reward, done })
    }

    fn observation(&self) -> String {
        self.observation.clone()
    }

    /// The chain of titles from the question to a gold answer ([`expert::find_chain`]): the
    /// first title not searched yet, then the gold answer the last observation shows. The
    /// thoughts name no entity, so that a reply copies each name once, into its tag; the tag's
    /// content stands between spaces (as in Search-R1's prompt, `<search> query </search>`), so
    /// a name is the same tokens in the tag as in the question or passage it is copied from.
    fn expert(&self) -> Result<ExpertMove, EnvError> {
        let item = self.item();
        let chain = expert::find_chain(&item.question, &item.golden_answers, |q, k| self.retrieve(q, k))
            .map_err(EnvError::Unsupported)?;
        let searched = |title: &String| self.queries.iter().any(|q| q == title);
        let at = chain.iter().position(|t| !searched(t));
        // Beyond the first search, what the move copies must be in the last observation: a
        // chain whose passage the search did not rank within top-k is not followed blindly.
        // The gold answer the observation shows (the first one when it shows none).
        let answer = item.golden_answers.iter().map(|a| a.trim()).find(|a| self.observation.contains(a));
        let answer = answer.unwrap_or(item.golden_answers[0].trim());
        let copied = match at {
            Some(0) => None,
            Some(at) => Some(chain[at].as_str()),
            None => Some(answer),
        };
        if let Some(text) = copied.filter(|t| !self.observation.contains(t)) {
            return Err(EnvError::Unsupported(format!(
                "the last observation does not show {text:?}, which the next move needs (top-{} too small?)",
                self.shared.settings.topk
            )));
        }
        let (action, thought) = match at {
            None => (format!("<answer> {answer} </answer>"), "The passage I found gives the answer."),
            Some(0) => (format!("<search> {} </search>", chain[0]), "The question names what to look up first."),
            Some(at) => {
                (format!("<search> {} </search>", chain[at]), "The passage I found names what to look up next.")
            }
        };
        Ok(ExpertMove { action, thought: thought.to_string() })
    }

    fn info(&self) -> serde_json::Value {
        let item = self.item();
        let matched = self.score.as_ref().and_then(|s| s.matched).map(|i| item.golden_answers[i].clone());
        serde_json::json!({
            "question": item.question,
            "golden_answers": item.golden_answers,
            "data_source": item.data_source,
            "turns": self.turns,
            "searches": self.searches,
            "answer": self.answer,
            "score": self.score.as_ref().map(|s| s.value),
            "matched": matched,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::index::tests::{built, TempDir};
    use super::*;
    use crate::pool::EnvPool;

    const QA: &str = concat!(
        r#"{"question": "What is the capital of France?", "golden_answers": ["Paris"], "data_source": "toy"}"#,
        "\n",
        r#"{"question": "Which river flows through Lyon?", "golden_answers": ["Rhone", "the Rhône"]}"#,
        "\n",
    );

    fn pool(tag: &str, extra: &[(&str, &str)]) -> (TempDir, EnvPool) {
        let (tmp, _) = built(tag);
        let qa = tmp.0.join("qa.jsonl");
        std::fs::write(&qa, QA).unwrap();
        let mut options = Options::new();
        options.insert("index".into(), tmp.0.join("index").display().to_string());
        options.insert("qa".into(), qa.display().to_string());
        for (k, v) in extra {
            options.insert(k.to_string(), v.to_string());
        }
        let pool = EnvPool::new("search", &options, Some(2)).unwrap();
        (tmp, pool)
    }

    #[test]
    fn an_episode_searches_then_answers() {
        let (_tmp, pool) = pool("episode", &[]);
        assert!(!pool.steps_are_cheap(), "a search may read index pages from disk");
        assert_eq!(pool.num_tasks(), 2);
        let ids = pool.create(1).unwrap();
        let obs = pool.reset(&ids, &[0]).unwrap().remove(0).unwrap();
        assert_eq!(obs, "Question: What is the capital of France?");
        let step = pool.step(&ids, &["<think>look it up</think><search>capital of France</search>"]).unwrap().remove(0);
        assert!(!step.done && step.reward == 0.0);
        assert!(
            step.observation.starts_with("<information>Doc 1(Title: \"Paris\") Paris is the capital"),
            "{}",
            step.observation
        );
        assert!(step.observation.ends_with("</information>"));
        let step = pool.step(&ids, &["<answer> the paris </answer>"]).unwrap().remove(0);
        assert!(step.done);
        assert_eq!(step.reward, 1.0);
        let info = pool.info(&ids).unwrap().remove(0);
        assert_eq!(info["matched"], "Paris");
        assert_eq!(info["searches"], 1);
        assert_eq!(info["data_source"], "toy");
    }

    #[test]
    fn invalid_replies_and_bad_queries_get_corrective_observations() {
        let (_tmp, pool) = pool("invalid", &[("max_query_chars", "20"), ("max_turns", "5")]);
        let ids = pool.create(1).unwrap();
        pool.reset(&ids, &[1]).unwrap();
        let replies = [
            "I think it is the Rhone.",
            "<search>   </search>",
            "<search>this query is far too long</search>",
            "<search>?!</search>",
        ];
        let expected = [INVALID_ACTION, "query is empty", "too long (26 characters; at most 20)", "no words"];
        for (reply, want) in replies.iter().zip(expected) {
            let step = pool.step(&ids, &[*reply]).unwrap().remove(0);
            assert!(step.error.is_none() && !step.done, "{step:?}");
            assert!(step.observation.contains(want), "{reply:?} -> {}", step.observation);
        }
        let last = pool.step(&ids, &["<answer>Rhône</answer>"]).unwrap().remove(0);
        assert!(last.done);
        assert_eq!(last.reward, 1.0, "the second gold answer matches after normalisation");
        assert_eq!(pool.info(&ids).unwrap()[0]["matched"], "the Rhône");
    }

    #[test]
    fn the_turn_limit_ends_an_episode_without_reward() {
        let (_tmp, pool) = pool("turns", &[("max_turns", "2"), ("topk", "1"), ("max_passage_chars", "5")]);
        let ids = pool.create(1).unwrap();
        pool.reset(&ids, &[0]).unwrap();
        let first = pool.step(&ids, &["<search>capital France</search>"]).unwrap().remove(0);
        assert_eq!(first.observation, "<information>Doc 1(Title: \"Paris\") Paris...</information>");
        let second = pool.step(&ids, &["<search>Berlin</search>"]).unwrap().remove(0);
        assert!(second.done && second.reward == 0.0);
        assert!(second.observation.contains("turn limit (2)"));
    }

    #[test]
    fn sessions_of_one_batch_are_independent_and_deterministic() {
        let (_tmp, pool) = pool("batch", &[]);
        let ids = pool.create(40).unwrap();
        let tasks: Vec<i64> = (0..40).map(|i| i % 2).collect();
        pool.reset(&ids, &tasks).unwrap();
        let actions: Vec<String> = (0..40)
            .map(|i| {
                if i % 2 == 0 {
                    "<search>France capital</search>".into()
                } else {
                    "<search>Rhone Lyon</search>".into()
                }
            })
            .collect();
        let first = pool.step(&ids, &actions).unwrap();
        for (i, r) in first.iter().enumerate() {
            assert_eq!(r.observation, first[i % 2].observation);
        }
        assert_ne!(first[0].observation, first[1].observation);
        let again = pool.create(40).unwrap();
        pool.reset(&again, &tasks).unwrap();
        let second = pool.step(&again, &actions).unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn options_are_checked() {
        let (tmp, _) = built("options");
        let mut options = Options::new();
        options.insert("index".into(), tmp.0.join("index").display().to_string());
        let err = SearchFactory::new(&options).err().unwrap().to_string();
        assert!(err.contains("\"qa\""), "{err}");
        options.insert("qa".into(), "/nonexistent/qa.jsonl".into());
        options.insert("reward".into(), "bleu".into());
        assert!(SearchFactory::new(&options).err().unwrap().to_string().contains("bleu"));
        options.insert("reward".into(), "f1".into());
        options.insert("topk".into(), "0".into());
        assert!(SearchFactory::new(&options).err().unwrap().to_string().contains("topk"));
    }

    #[test]
    fn pools_over_one_directory_share_the_index() {
        let (tmp, _) = built("shared");
        let a = open_shared(&tmp.0.join("index")).unwrap();
        let b = open_shared(&tmp.0.join("index").join("..").join("index")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
