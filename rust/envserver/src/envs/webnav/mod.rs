//! Web navigation in WebArena's format over generated websites: a shop (catalogue, search,
//! product pages with reviews, cart, checkout, order history, account), a forum (forums,
//! posts, comments, votes, user pages, new comments and posts) and a code-hosting site
//! (projects, issues with filters, merge requests, members with roles and commit counts, user
//! profiles; closing, commenting on and labelling issues, inviting members).
//!
//! Task id `t` plays template `t % 45` (see `tasks.rs`) with seed `t / 45`; the seed generates
//! the template's site (`data.rs`, drawn from the crate's RNG, so the same on every machine)
//! and the task's parameters. Templates are WebArena's three kinds: information seeking
//! (answer checked by exact match or must-include after normalisation), navigation (the page
//! open at `stop`), and state changes (a program check of the site's state at `stop`).
//!
//! An observation is laid out as WebArena's prompt shows one: `OBSERVATION:` with the tab
//! line(s) and the accessibility tree (`[id] role 'name' props`, indented by depth, only the
//! lines in the viewport, with a note where content continues), then `URL:`, `OBJECTIVE:`,
//! `PREVIOUS ACTION:` (WebArena's description of the last action, `previous.rs`), and
//! `FEEDBACK:` when the action could not be done (agentgym's addition). Actions are
//! WebArena's grammar (`grammar.rs`); ids are positions in the page render, so only ids shown
//! can be acted on. `type` replaces a field's content (a combobox takes one of its options).
//! The episode ends at `stop [answer]` with reward 1 when the task's check accepts, else 0;
//! invalid actions cost a turn and say what was wrong. Each episode hosts one site: URLs of
//! the other sites are refused.
//!
//! Options (`EnvPool("webnav", **options)`): `viewport` (40: tree lines shown at once),
//! `max_answer_len` (200: longer answers are refused), `max_steps` (0: no limit of its own; the
//! pool's horizon cap applies), `num_seeds` (10000: task ids are `0..45 * num_seeds`),
//! `show_urls` (false: add `url:` to links).

pub mod browser;
pub mod code;
pub mod data;
pub mod expert;
pub mod forum;
pub mod grammar;
pub mod pages;
pub mod previous;
pub mod shop;
pub mod tasks;
pub mod tree;

use std::cell::OnceCell;
use std::fmt::Write;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

use crate::env::{check_option_keys, EnvError, EnvFactory, ExpertMove, Options, StepOutcome, TextEnv};
use crate::rng::Rng;
use browser::{Applied, Browser};
use data::{CodeHost, Forum, Shop};
use pages::{Form, Op, Page};
use tasks::{answer_accepted, state_accepted, Goal, SiteKind, Task, TEMPLATES};
use tree::Target;

const OPTION_KEYS: &[&str] = &["viewport", "max_answer_len", "max_steps", "num_seeds", "show_urls"];
const SITE_SEED: u64 = 0x7765_626e_6176_0001; // "webnav"
const TASK_SEED: u64 = 0x7765_626e_6176_0002;
/// Steps the planner may take when it measures a task's difficulty.
const MAX_PLAN_STEPS: u32 = 100;

/// The per-pool settings every session reads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub viewport: usize,
    pub max_answer_len: usize,
    pub max_steps: u32,
    pub num_seeds: u64,
    pub show_urls: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self { viewport: 40, max_answer_len: 200, max_steps: 0, num_seeds: 10_000, show_urls: false }
    }
}

/// The site of an episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
    Shop(Shop),
    Forum(Forum),
    Code(CodeHost),
}

/// What a button or form submission did: a page to open, a message to show, and whether the
/// typed values stay (after an error, so the user can fix them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub go: Option<Page>,
    pub notice: Option<String>,
    pub keep_form: bool,
}

impl Effect {
    pub fn go(page: Page, notice: Option<String>) -> Self {
        Self { go: Some(page), notice, keep_form: false }
    }

    pub fn stay(notice: String) -> Self {
        Self { go: None, notice: Some(notice), keep_form: false }
    }

    pub fn stay_quiet() -> Self {
        Self { go: None, notice: None, keep_form: true }
    }

    pub fn error(message: &str) -> Self {
        Self { go: None, notice: Some(message.to_string()), keep_form: true }
    }
}

impl Site {
    fn parts(&self) -> (Option<&Shop>, Option<&Forum>, Option<&CodeHost>) {
        match self {
            Site::Shop(s) => (Some(s), None, None),
            Site::Forum(f) => (None, Some(f), None),
            Site::Code(c) => (None, None, Some(c)),
        }
    }

    pub fn home(&self) -> Page {
        match self {
            Site::Shop(_) => Page::ShopHome,
            Site::Forum(_) => Page::ForumHome,
            Site::Code(_) => code::CodePage::HOME,
        }
    }

    pub fn url(&self, page: &Page) -> String {
        let (s, f, c) = self.parts();
        pages::url(s, f, c, page)
    }

    pub fn parse_url(&self, text: &str) -> Result<Page, String> {
        let (s, f, c) = self.parts();
        pages::parse_url(s, f, c, text)
    }

    pub fn title(&self, page: &Page) -> String {
        match (self, page) {
            (_, Page::Blank) => "New Tab".into(),
            (Site::Shop(s), _) => shop::title(s, page),
            (Site::Forum(f), _) => forum::title(f, page),
            (Site::Code(c), Page::Code(p)) => code::title(c, p),
            (Site::Code(c), _) => c.site_name().into(),
        }
    }

    pub fn render(&self, page: &Page, form: &Form, notice: Option<&str>, tree: &mut tree::Tree) {
        match (self, page) {
            (_, Page::Blank) => {
                tree.title = "New Tab".into();
                tree.push(0, tree::Role::RootWebArea, "New Tab", Target::None);
            }
            (Site::Shop(s), _) => shop::render(s, page, form, notice, tree),
            (Site::Forum(f), _) => forum::render(f, page, form, notice, tree),
            (Site::Code(c), Page::Code(p)) => code::render(c, p, form, notice, tree),
            (Site::Code(c), _) => code::render(c, &code::CodePage::Home(code::ProjectSort::Name), form, notice, tree),
        }
    }

    pub fn apply(&mut self, op: Op, form: &Form) -> Effect {
        match self {
            Site::Shop(s) => shop::apply(s, op, form),
            Site::Forum(f) => forum::apply(f, op, form),
            Site::Code(c) => code::apply(c, op, form),
        }
    }
}

/// "1 comment", "3 comments".
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Recently generated sites, by site kind and seed, direct-mapped. The 45 tasks of a seed
/// share one site and a GRPO group replays one task, so most resets clone a site here
/// instead of generating it again (a clone is several times cheaper).
pub struct SiteCache {
    slots: Mutex<Vec<Option<CachedSite>>>,
}

/// A cache slot: the site of (kind, seed).
type CachedSite = (SiteKind, u64, Arc<Site>);

const CACHE_SLOTS: usize = 256;

impl SiteCache {
    fn new() -> Self {
        Self { slots: Mutex::new(vec![None; CACHE_SLOTS]) }
    }

    /// The site of `kind` for `seed`, generated on a miss.
    fn site(&self, kind: SiteKind, seed: u64) -> Site {
        let slot = (seed.wrapping_mul(3).wrapping_add(kind as u64) % CACHE_SLOTS as u64) as usize;
        let hit = match &self.slots.lock()[slot] {
            Some((k, s, site)) if *k == kind && *s == seed => Some(site.clone()),
            _ => None,
        };
        if let Some(site) = hit {
            return Site::clone(&site);
        }
        let site = match kind {
            SiteKind::Shop => Site::Shop(data::generate_shop(&mut Rng::derive(SITE_SEED, seed))),
            SiteKind::Forum => Site::Forum(data::generate_forum(&mut Rng::derive(SITE_SEED ^ 1, seed))),
            SiteKind::Code => Site::Code(data::generate_code(&mut Rng::derive(SITE_SEED ^ 2, seed))),
        };
        self.slots.lock()[slot] = Some((kind, seed, Arc::new(site.clone())));
        site
    }
}

/// Builds webnav sessions.
pub struct WebNavFactory {
    settings: Arc<Settings>,
    cache: Arc<SiteCache>,
}

impl WebNavFactory {
    /// The factory for `EnvPool("webnav", **options)` (see the module docstring for the keys).
    pub fn new(options: &Options) -> Result<Self, EnvError> {
        check_option_keys(options, OPTION_KEYS)?;
        let d = Settings::default();
        let number = |key: &str, default: u64, min: u64, max: u64| -> Result<u64, EnvError> {
            let Some(text) = options.get(key) else { return Ok(default) };
            match text.trim().parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(EnvError::InvalidOption {
                    key: key.into(),
                    message: format!("{text:?} is not an integer from {min} to {max}"),
                }),
            }
        };
        let show_urls = match options.get("show_urls").map(|s| s.trim().to_ascii_lowercase()) {
            None => d.show_urls,
            Some(v) if matches!(v.as_str(), "true" | "1") => true,
            Some(v) if matches!(v.as_str(), "false" | "0") => false,
            Some(v) => {
                return Err(EnvError::InvalidOption {
                    key: "show_urls".into(),
                    message: format!("{v:?} is not true or false"),
                })
            }
        };
        let settings = Settings {
            viewport: number("viewport", d.viewport as u64, 5, 10_000)? as usize,
            max_answer_len: number("max_answer_len", d.max_answer_len as u64, 1, 100_000)? as usize,
            max_steps: number("max_steps", u64::from(d.max_steps), 0, u64::from(u32::MAX))? as u32,
            num_seeds: number("num_seeds", d.num_seeds, 1, u64::MAX / TEMPLATES.len() as u64)?,
            show_urls,
        };
        Ok(Self { settings: Arc::new(settings), cache: Arc::new(SiteCache::new()) })
    }

    fn session(&self) -> WebNav {
        WebNav { settings: self.settings.clone(), cache: self.cache.clone(), episode: None, observation: String::new() }
    }
}

impl EnvFactory for WebNavFactory {
    fn name(&self) -> &str {
        "webnav"
    }

    fn num_tasks(&self) -> u64 {
        TEMPLATES.len() as u64 * self.settings.num_seeds
    }

    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(self.session())
    }
}

/// One episode: the task, its site, the browser, and how it ended.
#[derive(Debug, Clone)]
struct Episode {
    task_id: u64,
    task: Task,
    site: Site,
    browser: Browser,
    steps: u32,
    previous: String,
    feedback: Option<String>,
    answer: Option<String>,
    success: Option<bool>,
    difficulty: OnceCell<u32>,
}

impl Episode {
    fn new(task_id: u64, settings: &Settings, cache: &SiteCache) -> Self {
        let index = (task_id % TEMPLATES.len() as u64) as usize;
        let seed = task_id / TEMPLATES.len() as u64;
        let template = &TEMPLATES[index];
        let site = cache.site(template.site, seed);
        let task = template.make(index, &site, &mut Rng::derive(TASK_SEED, task_id));
        let mut browser = Browser::new(site.home(), settings.viewport);
        browser.refresh(&site);
        Self {
            task_id,
            task,
            site,
            browser,
            steps: 0,
            previous: "None".into(),
            feedback: None,
            answer: None,
            success: None,
            difficulty: OnceCell::new(),
        }
    }

    fn done(&self) -> bool {
        self.success.is_some()
    }

    /// Applies one action; returns the reward.
    fn step(&mut self, action: &str, settings: &Settings) -> f32 {
        self.steps += 1;
        self.feedback = None;
        let parsed = grammar::parse(action);
        self.previous = previous::describe(action, &parsed, &self.browser, &self.site, settings.show_urls);
        match parsed {
            Err(feedback) => self.feedback = Some(feedback),
            Ok(parsed) => match self.browser.apply(&mut self.site, &parsed) {
                Err(feedback) => self.feedback = Some(feedback),
                Ok(Applied::Continue) => {}
                Ok(Applied::Stop(answer)) => {
                    let chars = answer.chars().count();
                    if chars > settings.max_answer_len {
                        self.feedback = Some(format!(
                            "The answer is too long ({chars} characters; at most {}). Stop with a shorter answer.",
                            settings.max_answer_len
                        ));
                    } else {
                        let success = self.judge(&answer);
                        self.feedback = Some(format!("The episode ended with the answer '{answer}'."));
                        self.answer = Some(answer);
                        self.success = Some(success);
                    }
                }
            },
        }
        self.browser.refresh(&self.site);
        if !self.done() && settings.max_steps > 0 && self.steps >= settings.max_steps {
            self.feedback = Some(format!("The step limit ({}) is reached.", settings.max_steps));
            self.success = Some(false);
        }
        if self.success == Some(true) {
            1.0
        } else {
            0.0
        }
    }

    fn judge(&self, answer: &str) -> bool {
        match &self.task.goal {
            Goal::Answer { rule, .. } => answer_accepted(rule, answer),
            Goal::Url(page) => self.browser.tab().page() == page,
            Goal::State(check) => state_accepted(check, &self.site),
        }
    }

    fn observation(&self, settings: &Settings) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("OBSERVATION:\n");
        out.push_str(&self.browser.tab_header(&self.site));
        out.push_str("\n\n");
        let site = &self.site;
        let urls = |page: &Page| site.url(page);
        let urls: Option<&dyn Fn(&Page) -> String> = if settings.show_urls { Some(&urls) } else { None };
        tree::render(&mut out, &self.browser.tree, &self.browser.view(), urls);
        let _ = write!(
            out,
            "URL: {}\nOBJECTIVE: {}\nPREVIOUS ACTION: {}",
            self.site.url(self.browser.tab().page()),
            self.task.intent,
            self.previous
        );
        if let Some(feedback) = &self.feedback {
            let _ = write!(out, "\nFEEDBACK: {feedback}");
        }
        out
    }

    fn expert(&self) -> Result<ExpertMove, EnvError> {
        if self.done() {
            return Err(EnvError::Unsupported("the episode is over".into()));
        }
        let (action, thought) = expert::next_step(&self.site, &self.browser, &self.task);
        Ok(ExpertMove { action, thought })
    }

    /// Actions the planner needs from the start of this task (its difficulty).
    fn difficulty(&self, settings: &Settings, cache: &SiteCache) -> u32 {
        *self.difficulty.get_or_init(|| {
            let mut sim = Episode::new(self.task_id, settings, cache);
            while !sim.done() && sim.steps < MAX_PLAN_STEPS {
                let Ok(step) = sim.expert() else { break };
                sim.step(&step.action, settings);
            }
            sim.steps
        })
    }
}

/// One webnav session.
pub struct WebNav {
    settings: Arc<Settings>,
    cache: Arc<SiteCache>,
    episode: Option<Episode>,
    observation: String,
}

impl TextEnv for WebNav {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        let num_tasks = TEMPLATES.len() as u64 * self.settings.num_seeds;
        if task_id >= num_tasks {
            return Err(EnvError::TaskOutOfRange { env: "webnav".into(), task_id, num_tasks });
        }
        let episode = Episode::new(task_id, &self.settings, &self.cache);
        self.observation = episode.observation(&self.settings);
        self.episode = Some(episode);
        Ok(self.observation.clone())
    }

    fn step(&mut self, action: &str) -> StepOutcome {
        let Some(episode) = self.episode.as_mut() else {
            return StepOutcome { observation: "The episode has not started.".into(), reward: 0.0, done: true };
        };
        if episode.done() {
            return StepOutcome { observation: self.observation.clone(), reward: 0.0, done: true };
        }
        let reward = episode.step(action, &self.settings);
        self.observation = episode.observation(&self.settings);
        StepOutcome { observation: self.observation.clone(), reward, done: episode.done() }
    }

    fn observation(&self) -> String {
        self.observation.clone()
    }

    /// `click` on every link and button in view, the scrolls that move the view, `go_back`
    /// when there is history: valid moves for random exploration.
    fn available_actions(&self) -> Option<Vec<String>> {
        let episode = self.episode.as_ref().filter(|e| !e.done())?;
        let browser = &episode.browser;
        let view = browser.view();
        let mut out: Vec<String> = (0..browser.tree.nodes.len())
            .filter(|&i| view.shows(i) && matches!(browser.tree.nodes[i].target, Target::Go(_) | Target::Op(_)))
            .map(|i| format!("click [{}]", i + 1))
            .collect();
        if view.scroll < view.max_scroll(browser.tree.nodes.len()) {
            out.push("scroll [down]".into());
        }
        if view.scroll > 0 {
            out.push("scroll [up]".into());
        }
        if browser.tab().can_go_back() {
            out.push("go_back".into());
        }
        Some(out)
    }

    fn info(&self) -> serde_json::Value {
        let Some(e) = self.episode.as_ref() else { return serde_json::Value::Null };
        let template = &TEMPLATES[e.task.template];
        json!({
            "task_id": e.task_id,
            "template": template.name,
            "kind": template.kind.name(),
            "site": template.site.name(),
            "intent": e.task.intent,
            "difficulty": e.difficulty(&self.settings, &self.cache),
            "steps": e.steps,
            "url": e.site.url(e.browser.tab().page()),
            "answer": e.answer,
            "success": e.success,
        })
    }

    fn expert(&self) -> Result<ExpertMove, EnvError> {
        self.episode.as_ref().ok_or_else(|| EnvError::Unsupported("reset the session first".into()))?.expert()
    }
}

#[cfg(test)]
mod tests;
