//! The search env's BM25 index: built once from a JSONL corpus into a directory (tantivy), then
//! opened read-only and memory-mapped by every session and process that searches it.
//!
//! Corpus lines follow Search-R1/FlashRAG: `{"id": "...", "contents": "\"Title\"\ntext"}`. A line
//! that is not a JSON object with a string `contents` is skipped and counted (the first line
//! numbers are kept for the report). `id` may be a string or a number; without one, the
//! passage's row (0-based among kept lines) is its id.
//!
//! Ranking is tantivy's BM25 (k1 = 1.2, b = 0.75) over the `contents` field, tokenised into runs
//! of alphanumeric characters, lower-cased, tokens of 40 bytes or more dropped. A query is the
//! set of its distinct tokens, each an optional clause. Equal scores are ordered by corpus row so
//! that results do not depend on how the multi-threaded build cut the index into segments.
//!
//! `agentgym-index.json` beside tantivy's files records the format version and the tokenizer; an
//! index without it, or from another version or tokenizer, is refused with a message saying so.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::cache::QueryCache;
use serde::{Deserialize, Serialize};
use tantivy::columnar::Column;
use tantivy::query::{BooleanQuery, EnableScoring, Query};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, FAST, STORED, STRING};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};
use tantivy::{
    doc, merge_policy::NoMergePolicy, DocAddress, Index, IndexReader, IndexSettings, ReloadPolicy, Searcher,
    TantivyDocument, Term,
};

/// What `agentgym-index.json` says an index directory is.
pub const INDEX_FORMAT: &str = "agentgym-search-index";
/// Bumped whenever the schema or the meaning of a stored field changes.
pub const INDEX_VERSION: u32 = 1;
/// The analyzer's name, recorded in the index: alphanumeric runs, < 40 bytes, lower-cased.
pub const TOKENIZER: &str = "agentgym-simple-lower-v1";
/// The file that marks a directory as an agentgym search index.
pub const META_FILE: &str = "agentgym-index.json";
/// Tokens of this many bytes or more are not indexed (tantivy's default text analyzer does the same).
const MAX_TOKEN_BYTES: usize = 40;
/// How many skipped corpus lines are reported by number.
const REPORTED_SKIPS: usize = 10;
/// Progress is reported every this many corpus lines.
const PROGRESS_EVERY: u64 = 10_000;
/// Bytes of passage text the doc store compresses together (tantivy's default is 16 KiB). A
/// hit's text costs decompressing its whole block, and a top-k query's hits rarely share one:
/// 4 KiB blocks answered 12-13% more top-10 queries/s at 100k generated passages for a 9% larger
/// index (`bench/RESULTS.md`, "Deep Search retrieval").
const DOCSTORE_BLOCK_BYTES: usize = 4096;
/// Results kept by the query cache (two generations of half as many).
const CACHE_ENTRIES: usize = 4096;

/// Problems building or opening an index; messages are shown to users as they are.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{0}")]
    Incompatible(String),
    #[error("search index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("the index build was cancelled; {0} is left incomplete (no agentgym-index.json)")]
    Cancelled(PathBuf),
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> IndexError {
    IndexError::Io { path: path.to_path_buf(), message: e.to_string() }
}

/// The contents of `agentgym-index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexMeta {
    pub format: String,
    pub version: u32,
    pub tokenizer: String,
    pub passages: u64,
    pub skipped: u64,
    /// The corpus file the index was built from, as given.
    pub corpus: String,
}

/// How an index is built.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Indexing threads (tantivy's writer threads); at least 1.
    pub threads: usize,
    /// Memory for the writer's buffers, all threads together (at least 15 MB per thread).
    pub memory_bytes: usize,
}

impl Default for BuildOptions {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        Self { threads, memory_bytes: 256 << 20 }
    }
}

/// Where a build stands, reported every few thousand lines and once at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BuildProgress {
    pub bytes_read: u64,
    pub bytes_total: u64,
    pub passages: u64,
    pub skipped: u64,
}

/// What a finished build did.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildReport {
    pub passages: u64,
    pub skipped: u64,
    /// `(line number, 1-based; why)` of the first skipped lines.
    pub first_skipped: Vec<(u64, String)>,
    pub seconds: f64,
    /// Bytes of the index directory.
    pub index_bytes: u64,
}

#[derive(Deserialize)]
struct CorpusLine {
    id: Option<serde_json::Value>,
    contents: Option<serde_json::Value>,
}

/// The analyzer used for passages and queries alike.
/// The distinct tokens of `query` under the index's tokenizer, sorted (no index needed: the
/// search env checks a remote retriever's queries with it too).
pub fn query_terms(query: &str) -> Vec<String> {
    terms_with(&mut analyzer(), query)
}

fn terms_with(analyzer: &mut TextAnalyzer, query: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(query);
    let mut terms = Vec::new();
    while let Some(token) = stream.next() {
        terms.push(token.text.clone());
    }
    terms.sort_unstable();
    terms.dedup();
    terms
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .build()
}

struct Fields {
    id: Field,
    contents: Field,
    row: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexing = TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs);
    let text = TextOptions::default().set_indexing_options(indexing).set_stored();
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        contents: builder.add_text_field("contents", text),
        row: builder.add_u64_field("row", FAST),
    };
    (builder.build(), fields)
}

/// Builds an index of `corpus` (JSONL) into `dir`, which must be absent or empty. `progress`
/// is called every few thousand lines and once all lines are read (before the index is written
/// and merged into one segment); when it returns `false` the build stops with
/// [`IndexError::Cancelled`].
pub fn build_index(
    corpus: &Path,
    dir: &Path,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&BuildProgress) -> bool,
) -> Result<BuildReport, IndexError> {
    let start = Instant::now();
    let file = File::open(corpus).map_err(|e| io_error(corpus, e))?;
    let bytes_total = file.metadata().map_err(|e| io_error(corpus, e))?.len();
    prepare_dir(dir)?;
    let (schema, fields) = schema();
    let settings = IndexSettings { docstore_blocksize: DOCSTORE_BLOCK_BYTES, ..IndexSettings::default() };
    let index = Index::builder().schema(schema).settings(settings).create_in_dir(dir)?;
    index.tokenizers().register(TOKENIZER, analyzer());
    let threads = options.threads.max(1);
    // tantivy takes 15 MB to 4 GB of buffers per writer thread.
    let memory = options.memory_bytes.clamp(threads * (16 << 20), threads * (4000 << 20));
    let mut writer = index.writer_with_num_threads::<TantivyDocument>(threads, memory)?;
    // Segments are merged once, into one, when every line is in (below); merges along the way
    // would rewrite the same postings again.
    writer.set_merge_policy(Box::new(NoMergePolicy));

    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut state = BuildProgress { bytes_total, ..Default::default() };
    let mut first_skipped = Vec::new();
    let mut line_no = 0u64;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| io_error(corpus, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        state.bytes_read += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line(&line, state.passages) {
            Ok((id, contents)) => {
                writer
                    .add_document(doc!(fields.id => id, fields.contents => contents, fields.row => state.passages))?;
                state.passages += 1;
            }
            Err(why) => {
                state.skipped += 1;
                if first_skipped.len() < REPORTED_SKIPS {
                    first_skipped.push((line_no, why));
                }
            }
        }
        if line_no.is_multiple_of(PROGRESS_EVERY) && !progress(&state) {
            return Err(IndexError::Cancelled(dir.to_path_buf()));
        }
    }
    if !progress(&state) {
        return Err(IndexError::Cancelled(dir.to_path_buf()));
    }
    writer.commit()?;
    // One segment: a query then runs one block-max WAND over all postings, with one top-k
    // threshold that only rises, instead of one per segment starting from zero (and one term
    // lookup per segment). At 1M passages 4 segments -> 1 answered 34-37% more queries/s, and
    // with no merges before it the build took no longer (`bench/RESULTS.md`, "Deep Search
    // retrieval").
    let segments = index.searchable_segment_ids()?;
    if segments.len() > 1 {
        writer.merge(&segments).wait()?;
    }
    writer.wait_merging_threads()?;
    let meta = IndexMeta {
        format: INDEX_FORMAT.into(),
        version: INDEX_VERSION,
        tokenizer: TOKENIZER.into(),
        passages: state.passages,
        skipped: state.skipped,
        corpus: corpus.display().to_string(),
    };
    let meta_path = dir.join(META_FILE);
    let text = serde_json::to_string_pretty(&meta).map_err(|e| io_error(&meta_path, e))?;
    std::fs::write(&meta_path, text).map_err(|e| io_error(&meta_path, e))?;
    Ok(BuildReport {
        passages: state.passages,
        skipped: state.skipped,
        first_skipped,
        seconds: start.elapsed().as_secs_f64(),
        index_bytes: dir_bytes(dir),
    })
}

/// `(id, contents)` of one corpus line, or why it is skipped.
fn parse_line(line: &[u8], row: u64) -> Result<(String, String), String> {
    let parsed: CorpusLine = serde_json::from_slice(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let contents = match parsed.contents {
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err("`contents` is not a string".into()),
        None => return Err("no `contents` field".into()),
    };
    let id = match parsed.id {
        None | Some(serde_json::Value::Null) => row.to_string(),
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => return Err("`id` is neither a string nor a number".into()),
    };
    Ok((id, contents))
}

fn prepare_dir(dir: &Path) -> Result<(), IndexError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let mut entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    if entries.next().is_some() {
        return Err(io_error(dir, "the index directory is not empty; remove it or choose another"));
    }
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// Reads and checks `agentgym-index.json` of `dir`.
pub fn read_meta(dir: &Path) -> Result<IndexMeta, IndexError> {
    let path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        io_error(&path, format!("{e}; not an agentgym search index (build one with `agentgym index build`)"))
    })?;
    let meta: IndexMeta = serde_json::from_str(&text).map_err(|e| io_error(&path, format!("unreadable: {e}")))?;
    if meta.format != INDEX_FORMAT || meta.version != INDEX_VERSION {
        return Err(IndexError::Incompatible(format!(
            "{}: index format {:?} version {}, but this agentgym reads {INDEX_FORMAT:?} version {INDEX_VERSION}; \
             rebuild the index with `agentgym index build`",
            dir.display(),
            meta.format,
            meta.version
        )));
    }
    if meta.tokenizer != TOKENIZER {
        return Err(IndexError::Incompatible(format!(
            "{}: index built with tokenizer {:?}, but this agentgym tokenizes queries with {TOKENIZER:?}; \
             rebuild the index with `agentgym index build`",
            dir.display(),
            meta.tokenizer
        )));
    }
    Ok(meta)
}

/// One retrieved passage.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: String,
    /// The corpus line's `contents`: the title line, then the text.
    pub contents: String,
    pub score: f32,
    /// The passage's row in the corpus (0-based among kept lines).
    pub row: u64,
}

/// An opened index: one searcher over memory-mapped files, shared by all sessions (`Arc`).
pub struct SearchIndex {
    /// Keeps the searcher's segments alive.
    _reader: IndexReader,
    searcher: Searcher,
    contents: Field,
    id: Field,
    /// Per segment (by ordinal), the `row` column.
    rows: Vec<Column<u64>>,
    analyzer: TextAnalyzer,
    meta: IndexMeta,
    dir: PathBuf,
    /// Recent results, so that sessions sending the same query search once.
    pub cache: QueryCache,
}

impl SearchIndex {
    /// Opens the index in `dir` read-only, after checking its version and tokenizer.
    pub fn open(dir: &Path) -> Result<Self, IndexError> {
        let meta = read_meta(dir)?;
        let index = Index::open_in_dir(dir)?;
        index.tokenizers().register(TOKENIZER, analyzer());
        let (expected, _) = schema();
        if index.schema() != expected {
            return Err(IndexError::Incompatible(format!(
                "{}: the index's fields differ from those of version {INDEX_VERSION}; rebuild it",
                dir.display()
            )));
        }
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let searcher = reader.searcher();
        let schema = index.schema();
        let rows = searcher.segment_readers().iter().map(|s| s.fast_fields().u64("row")).collect::<Result<_, _>>()?;
        Ok(Self {
            _reader: reader,
            searcher,
            contents: schema.get_field("contents")?,
            id: schema.get_field("id")?,
            rows,
            analyzer: analyzer(),
            meta,
            dir: dir.to_path_buf(),
            cache: QueryCache::new(CACHE_ENTRIES),
        })
    }

    pub fn meta(&self) -> &IndexMeta {
        &self.meta
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Passages in the index.
    pub fn num_passages(&self) -> u64 {
        self.searcher.num_docs()
    }

    /// The distinct tokens of `query`, sorted: what is searched for.
    pub fn query_terms(&self, query: &str) -> Vec<String> {
        terms_with(&mut self.analyzer.clone(), query)
    }

    /// The `k` best passages for `query` (fewer when fewer contain a query token), best first,
    /// equal scores by row. Recent results come from the cache.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>, IndexError> {
        let terms = self.query_terms(query);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let key = (terms.join(" "), k);
        if let Some(hits) = self.cache.get(&key) {
            return Ok(hits.as_ref().clone());
        }
        let hits = Arc::new(self.rank(&terms, k)?);
        self.cache.insert(&key, &hits);
        Ok(hits.as_ref().clone())
    }

    /// BM25 over the index for `terms` (distinct tokens), then the top `k` passages' text.
    fn rank(&self, terms: &[String], k: usize) -> Result<Vec<Hit>, IndexError> {
        let terms = terms.iter().map(|t| Term::from_field_text(self.contents, t)).collect();
        let query = BooleanQuery::new_multiterms_query(terms);
        // Block-max WAND driven here rather than through tantivy's `TopDocs`: that collector
        // raises its pruning threshold only each time its buffer of 2k hits fills, and orders
        // ties by document, not by row. Keeping exactly k, with the threshold at the k-th score
        // from the first k hits on, prunes more and settles ties in one pass (`bench/RESULTS.md`,
        // "Deep Search retrieval").
        let weight = query.weight(EnableScoring::enabled_from_searcher(&self.searcher))?;
        let mut top = TopRows::new(k);
        for (ord, segment) in self.searcher.segment_readers().iter().enumerate() {
            let rows = &self.rows[ord];
            let alive = segment.alive_bitset();
            // Block-max WAND hands over only documents scoring above the returned threshold.
            // Returning just below the k-th score keeps those that tie it coming, so a tie at
            // the cut is settled by row in this one pass, however many passages share the score.
            weight.for_each_pruning(top.threshold(), segment, &mut |doc, score| {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    let row = rows.first(doc).unwrap_or(u64::MAX);
                    top.offer(score, row, DocAddress::new(ord as u32, doc));
                }
                top.threshold()
            })?;
        }
        top.ranked.into_iter().map(|(score, row, addr)| self.hit(addr, score, row)).collect()
    }

    /// [`SearchIndex::search`] for each query, spread over `threads` threads (scoped, started
    /// for this call); results in the order of `queries`.
    pub fn search_batch<S: AsRef<str> + Sync>(
        &self,
        queries: &[S],
        k: usize,
        threads: usize,
    ) -> Vec<Result<Vec<Hit>, IndexError>> {
        let threads = threads.clamp(1, queries.len().max(1));
        if threads == 1 {
            return queries.iter().map(|q| self.search(q.as_ref(), k)).collect();
        }
        let chunk = queries.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = queries
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(|q| self.search(q.as_ref(), k)).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        })
    }

    fn hit(&self, addr: DocAddress, score: f32, row: u64) -> Result<Hit, IndexError> {
        let doc: TantivyDocument = self.searcher.doc(addr)?;
        let text = |field| doc.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        Ok(Hit { id: text(self.id), contents: text(self.contents), score, row })
    }
}

/// The best `k` passages met so far, best first: higher score, then lower row.
struct TopRows {
    k: usize,
    ranked: Vec<(f32, u64, DocAddress)>,
}

impl TopRows {
    fn new(k: usize) -> Self {
        Self { k, ranked: Vec::with_capacity(k + 1) }
    }

    /// Scores at or below this cannot enter: just under the k-th score once there are k, so
    /// that a passage tying the k-th is still offered and its row decides.
    fn threshold(&self) -> f32 {
        match self.ranked.last() {
            Some(&(score, _, _)) if self.ranked.len() == self.k => score.next_down(),
            _ => f32::MIN,
        }
    }

    fn offer(&mut self, score: f32, row: u64, addr: DocAddress) {
        let at = self.ranked.partition_point(|&(s, r, _)| s > score || (s == score && r < row));
        if at < self.k {
            self.ranked.insert(at, (score, row, addr));
            self.ranked.truncate(self.k);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed when dropped.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> Self {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("agentgym-search-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) const CORPUS: &str = concat!(
        r#"{"id": "0", "contents": "\"Paris\"\nParis is the capital of France."}"#,
        "\n",
        r#"{"id": "1", "contents": "\"Berlin\"\nBerlin is the capital of Germany."}"#,
        "\n",
        "this line is not json\n",
        r#"{"id": "2", "text": "no contents field"}"#,
        "\n",
        "\n",
        r#"{"id": 7, "contents": "\"Lyon\"\nLyon is a city in France, on the Rhone."}"#,
        "\n",
        r#"{"contents": "\"Rhone\"\nThe Rhone flows through Lyon."}"#,
        "\n",
    );

    /// Builds [`CORPUS`] into a fresh directory.
    pub(crate) fn built(tag: &str) -> (TempDir, BuildReport) {
        let tmp = TempDir::new(tag);
        let corpus = tmp.0.join("corpus.jsonl");
        std::fs::write(&corpus, CORPUS).unwrap();
        let opts = BuildOptions { threads: 2, memory_bytes: 0 };
        let report = build_index(&corpus, &tmp.0.join("index"), &opts, &mut |_| true).unwrap();
        (tmp, report)
    }

    #[test]
    fn bad_lines_are_skipped_and_counted_by_line_number() {
        let (_tmp, report) = built("skips");
        assert_eq!(report.passages, 4);
        assert_eq!(report.skipped, 2);
        assert_eq!(report.first_skipped.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3, 4]);
        assert!(report.first_skipped[1].1.contains("contents"), "{:?}", report.first_skipped);
        assert!(report.index_bytes > 0);
    }

    #[test]
    fn search_ranks_by_bm25_and_keeps_ids() {
        let (tmp, _) = built("rank");
        let index = SearchIndex::open(&tmp.0.join("index")).unwrap();
        assert_eq!(index.num_passages(), 4);
        let hits = index.search("capital of FRANCE?", 3).unwrap();
        assert_eq!(hits[0].id, "0");
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        let lyon = index.search("rhone", 5).unwrap();
        let ids: Vec<&str> = lyon.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&"7") && ids.contains(&"3"), "{ids:?}"); // 3: the row of an id-less line
        assert!(index.search("   ", 3).unwrap().is_empty());
        assert!(index.search("zzz unknown", 3).unwrap().is_empty());
        assert_eq!(index.query_terms("The the THE, cat!"), vec!["cat", "the"]);
        let queries = ["capital of France", "rhone", "", "Berlin Germany"];
        let batch = index.search_batch(&queries, 2, 3);
        for (q, got) in queries.iter().zip(batch) {
            assert_eq!(got.unwrap(), index.search(q, 2).unwrap());
        }
        let uncached = SearchIndex::open(&tmp.0.join("index")).unwrap();
        assert_eq!(
            uncached.rank(&["capital".into(), "france".into()], 3).unwrap(),
            index.search("France capital", 3).unwrap()
        );
        assert!(index.cache.hits.load(std::sync::atomic::Ordering::Relaxed) >= 3);
    }

    #[test]
    fn ties_at_the_cut_are_ordered_by_row_for_every_k() {
        // 40 passages in 8 groups of 5 equal texts (equal scores), groups spread over the rows;
        // two writer threads, so tantivy's doc order (one thread's segment, then the other's,
        // merged) is not the row order.
        let tmp = TempDir::new("ties");
        let corpus = tmp.0.join("corpus.jsonl");
        let lines: Vec<String> = (0..40)
            .map(|i| {
                let group = (i * 3) % 8;
                let words = vec!["alpha"; group + 1].join(" ");
                format!(r#"{{"id": "{i}", "contents": "\"T{i}\"\n{words} {}"}}"#, vec!["pad"; 8 - group].join(" "))
            })
            .collect();
        std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
        let opts = BuildOptions { threads: 2, memory_bytes: 0 };
        build_index(&corpus, &tmp.0.join("index"), &opts, &mut |_| true).unwrap();
        let index = SearchIndex::open(&tmp.0.join("index")).unwrap();
        assert_eq!(index.searcher.segment_readers().len(), 1, "the build merges its segments into one");
        let terms = ["alpha".to_string()];
        let all = index.rank(&terms, 40).unwrap();
        assert_eq!(all.len(), 40);
        assert!(all.windows(2).all(|w| w[0].score > w[1].score || (w[0].score == w[1].score && w[0].row < w[1].row)));
        assert!(all.windows(2).filter(|w| w[0].score == w[1].score).count() >= 32, "the groups tie");
        for k in 1..=40 {
            assert_eq!(index.rank(&terms, k).unwrap(), all[..k], "k = {k}");
        }
    }

    /// An index of `texts` written by one writer thread, so that tantivy's doc order is the
    /// order given, with `rows[i]` as the corpus row of `texts[i]`; a commit after every
    /// `per_segment` texts makes a segment of each (merges off).
    fn index_with_rows(tag: &str, texts: &[&str], rows: &[u64], per_segment: usize) -> (TempDir, SearchIndex) {
        let tmp = TempDir::new(tag);
        let dir = tmp.0.join("index");
        std::fs::create_dir_all(&dir).unwrap();
        let (schema, fields) = schema();
        let index = Index::create_in_dir(&dir, schema).unwrap();
        index.tokenizers().register(TOKENIZER, analyzer());
        let mut writer = index.writer_with_num_threads::<TantivyDocument>(1, 16 << 20).unwrap();
        writer.set_merge_policy(Box::new(NoMergePolicy));
        for (i, (text, &row)) in texts.iter().zip(rows).enumerate() {
            if i > 0 && i % per_segment == 0 {
                writer.commit().unwrap();
            }
            writer
                .add_document(doc!(fields.id => row.to_string(), fields.contents => *text, fields.row => row))
                .unwrap();
        }
        writer.commit().unwrap();
        let meta = IndexMeta {
            format: INDEX_FORMAT.into(),
            version: INDEX_VERSION,
            tokenizer: TOKENIZER.into(),
            passages: texts.len() as u64,
            skipped: 0,
            corpus: "-".into(),
        };
        std::fs::write(dir.join(META_FILE), serde_json::to_string(&meta).unwrap()).unwrap();
        let opened = SearchIndex::open(&dir).unwrap();
        (tmp, opened)
    }

    #[test]
    fn a_tie_of_many_passages_at_the_cut_is_ordered_by_row() {
        // 30 passages of one text (one score) between 30 that score higher and 30 lower, their
        // documents in the reverse order of their rows: a k inside the tied group cuts through
        // 30 equal scores, and the rows kept must be the lowest of them, not the first met.
        let kinds = ["beta beta beta pad", "beta pad pad pad", "beta pad pad pad pad pad pad pad"];
        let texts: Vec<&str> = (0..90).map(|i| kinds[(i * 7) % 3]).collect();
        let rows: Vec<u64> = (0..90u64).rev().collect();
        let (_tmp, index) = index_with_rows("bigtie", &texts, &rows, texts.len());
        assert_eq!(index.searcher.segment_readers().len(), 1);
        let mut tied: Vec<u64> = (0..90).filter(|i| (i * 7) % 3 == 1).map(|i| rows[i]).collect();
        tied.sort_unstable();
        let terms = ["beta".to_string()];
        for k in [31, 35, 45, 59] {
            let hits = index.rank(&terms, k).unwrap();
            assert_eq!(hits.len(), k);
            assert!(hits[29].score > hits[30].score && hits[30..].windows(2).all(|w| w[0].score == w[1].score));
            let kept: Vec<u64> = hits[30..].iter().map(|h| h.row).collect();
            assert_eq!(kept, tied[..k - 30], "k = {k}");
        }
    }

    #[test]
    fn ranking_over_several_segments_equals_the_full_ordering() {
        // Indexes from before the one-segment build have several segments: the threshold and
        // the ties carry from one segment's WAND to the next. 60 passages in 3 segments, rows
        // shuffled, scores in 6 tied groups.
        let kinds = ["gamma pad", "gamma gamma pad pad", "gamma pad pad pad pad", "gamma gamma gamma", "gamma x", "y"];
        let texts: Vec<&str> = (0..60).map(|i| kinds[(i * 5) % 6]).collect();
        let rows: Vec<u64> = (0..60u64).map(|i| (i * 37) % 60).collect();
        let (_tmp, index) = index_with_rows("segments", &texts, &rows, 20);
        assert_eq!(index.searcher.segment_readers().len(), 3);
        let terms = ["gamma".to_string()];
        let all = index.rank(&terms, 60).unwrap();
        assert_eq!(all.len(), 50, "the passages without the term are not hits");
        assert!(all.windows(2).all(|w| w[0].score > w[1].score || (w[0].score == w[1].score && w[0].row < w[1].row)));
        for k in 1..=50 {
            assert_eq!(index.rank(&terms, k).unwrap(), all[..k], "k = {k}");
        }
    }

    #[test]
    fn a_build_can_be_cancelled_and_is_then_not_openable() {
        let tmp = TempDir::new("cancel");
        let corpus = tmp.0.join("corpus.jsonl");
        let line = r#"{"id": "0", "contents": "\"T\"\nsome text"}"#;
        std::fs::write(&corpus, format!("{line}\n").repeat(PROGRESS_EVERY as usize + 1)).unwrap();
        let dir = tmp.0.join("index");
        let err = build_index(&corpus, &dir, &BuildOptions::default(), &mut |_| false).err().unwrap();
        assert!(matches!(err, IndexError::Cancelled(_)), "{err}");
        assert!(SearchIndex::open(&dir).is_err());
    }

    #[test]
    fn an_index_of_another_version_or_tokenizer_is_refused() {
        let (tmp, _) = built("meta");
        let dir = tmp.0.join("index");
        let meta_path = dir.join(META_FILE);
        let original = std::fs::read_to_string(&meta_path).unwrap();
        let other_tokenizer = original.replace(TOKENIZER, "en-stem-v9");
        std::fs::write(&meta_path, other_tokenizer).unwrap();
        let err = SearchIndex::open(&dir).err().unwrap().to_string();
        assert!(err.contains("en-stem-v9") && err.contains("rebuild"), "{err}");
        let other_version = original.replace("\"version\": 1", "\"version\": 99");
        std::fs::write(&meta_path, other_version).unwrap();
        let err = SearchIndex::open(&dir).err().unwrap().to_string();
        assert!(err.contains("version 99"), "{err}");
        std::fs::remove_file(&meta_path).unwrap();
        let err = SearchIndex::open(&dir).err().unwrap().to_string();
        assert!(err.contains("not an agentgym search index"), "{err}");
    }

    #[test]
    fn a_non_empty_target_directory_is_refused() {
        let (tmp, _) = built("nonempty");
        let corpus = tmp.0.join("corpus.jsonl");
        let err = build_index(&corpus, &tmp.0, &BuildOptions::default(), &mut |_| true).err().unwrap();
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
