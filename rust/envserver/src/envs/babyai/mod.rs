//! BabyAI-text: minigrid's BabyAI levels behind AgentGym's text interface.
//!
//! Task id `t` plays level `t % 40` (AgentGym's order) with seed `t / 40`. Observations and
//! the high-level action vocabulary follow AgentGym's BabyAI server (`text.rs`); high-level
//! actions become primitive moves by breadth-first search over the visible grid
//! (`planner.rs`). The behaviour is specified in
//! `python/agentgym/envs/reference/BABYAI_TEXT.md`.
//!
//! Options (`EnvPool("babyai", **options)`):
//! - `num_seeds` (default 1000000): seeds per level; `num_tasks` is `40 * num_seeds`, the ids
//!   random tasks are drawn from. With `worlds="agentgym"` every id is playable, as on
//!   AgentGym's server (which has no last id); with `"own"` ids past the end are refused.
//! - `primitive` (`"true"`/`"false"`, default false): actions are minigrid's primitive
//!   names (left, right, forward, pickup, drop, toggle, done); observations stay text.
//! - `layout`: a world as JSON (`layout.rs`); every reset starts from it, whatever the
//!   task id. Used to replay worlds exported from minigrid in parity tests.
//! - `worlds` (`"agentgym"`, default, or `"own"`): `"agentgym"` gives minigrid's world for
//!   the task's seed, the one AgentGym's server shows for the same `data_idx` (numpy's
//!   generator reproduced, `levels.rs`); `"own"` gives the worlds of agentgym's own random
//!   stream (same levels and rules, other worlds).

pub mod bot;
pub mod grid;
pub mod instr;
pub mod layout;
pub mod levels;
pub mod planner;
pub mod roomgrid;
pub mod text;

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::env::{check_option_keys, EnvError, EnvFactory, ExpertMove, Options, StepOutcome, TextEnv};
use grid::{Action, World};
use levels::Worlds;
use text::{goal_text, push_actions, Menu, Scene, ViewImage};

/// Levels per seed: AgentGym's 40.
pub const NUM_LEVELS: u64 = levels::LEVELS.len() as u64;
const DEFAULT_NUM_SEEDS: u64 = 1_000_000;
const OPTION_KEYS: &[&str] = &["layout", "num_seeds", "primitive", "worlds"];

/// Where episodes come from.
#[derive(Debug, Clone)]
enum Source {
    /// Level generators: `task_id % 40` picks the level, `task_id / 40` the seed.
    Levels(Worlds),
    /// One fixed world, cloned at every reset.
    Layout(Arc<World>),
}

impl Source {
    fn world(&self, task_id: u64) -> Result<World, EnvError> {
        match self {
            Source::Layout(world) => Ok(World::clone(world)),
            Source::Levels(worlds) => levels::generate((task_id % NUM_LEVELS) as usize, task_id / NUM_LEVELS, *worlds),
        }
    }
}

/// Builds BabyAI-text sessions.
#[derive(Debug)]
pub struct BabyAiFactory {
    source: Source,
    num_seeds: u64,
    primitive: bool,
}

impl BabyAiFactory {
    /// Reads the options documented in the module docs; unknown keys are rejected.
    pub fn new(options: &Options) -> Result<Self, EnvError> {
        check_option_keys(options, OPTION_KEYS)?;
        let primitive = match options.get("primitive").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(invalid("primitive", format!("{other:?} is not \"true\" or \"false\""))),
        };
        let num_seeds = match options.get("num_seeds") {
            None => DEFAULT_NUM_SEEDS,
            Some(s) => parse_num_seeds(s)?,
        };
        let worlds = match options.get("worlds").map(String::as_str) {
            None | Some("agentgym") => Worlds::AgentGym,
            Some("own") => Worlds::Own,
            Some(other) => return Err(invalid("worlds", format!("{other:?} is not \"agentgym\" or \"own\""))),
        };
        let source = match options.get("layout") {
            None => Source::Levels(worlds),
            Some(json) => Source::Layout(Arc::new(parse_layout(json)?)),
        };
        Ok(Self { source, num_seeds, primitive })
    }
}

fn invalid(key: &str, message: String) -> EnvError {
    EnvError::InvalidOption { key: key.to_string(), message }
}

fn parse_num_seeds(s: &str) -> Result<u64, EnvError> {
    let n: u64 = s.trim().parse().map_err(|_| invalid("num_seeds", format!("{s:?} is not a positive integer")))?;
    if n == 0 || n.checked_mul(NUM_LEVELS).is_none() {
        return Err(invalid("num_seeds", format!("{n} is out of range (1..={})", u64::MAX / NUM_LEVELS)));
    }
    Ok(n)
}

fn parse_layout(json: &str) -> Result<World, EnvError> {
    World::from_layout_json(json).map_err(|e| invalid("layout", e.to_string()))
}

impl EnvFactory for BabyAiFactory {
    fn name(&self) -> &str {
        "babyai"
    }

    fn steps_are_cheap(&self) -> bool {
        true
    }

    fn num_tasks(&self) -> u64 {
        NUM_LEVELS * self.num_seeds
    }

    fn takes_ids_past_end(&self) -> bool {
        matches!(self.source, Source::Levels(Worlds::AgentGym))
    }

    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(BabyAiEnv::new(self.source.clone(), self.primitive))
    }
}

/// One BabyAI-text session.
pub struct BabyAiEnv {
    source: Source,
    primitive: bool,
    episode: Option<Episode>,
    /// What the last reset or step showed; [`TextEnv::observation`] writes the text again from
    /// it. A session does not keep its text: with thousands of sessions, storing and copying
    /// each step's text (and freeing the last one) was much of a step's memory traffic.
    shown: Shown,
}

/// What the last observation said before its action list.
enum Shown {
    /// Nothing yet: no episode has started.
    Nothing,
    /// The goal, then the view: a reset.
    Goal,
    /// The view after a move, and the completion note where the episode ended.
    View,
    /// A reply to an action that moved nothing.
    Reply(Cow<'static, str>),
}

/// The state of a started episode.
struct Episode {
    task_id: u64,
    world: World,
    /// The view after the last move; a move that leaves it unchanged stops a macro.
    image: ViewImage,
    menu: Menu,
}

impl BabyAiEnv {
    fn new(source: Source, primitive: bool) -> Self {
        Self { source, primitive, episode: None, shown: Shown::Nothing }
    }

    fn action_names(&self) -> Vec<&str> {
        match (&self.episode, self.primitive) {
            (_, true) => Action::ALL.iter().map(|a| a.name()).collect(),
            (Some(ep), false) => ep.menu.actions.keys().collect(),
            (None, false) => Vec::new(),
        }
    }

    /// `text` plus the available-actions suffix: the observation.
    fn publish(&self, mut text: String) -> String {
        push_actions(&mut text, self.action_names());
        text
    }
}

impl Episode {
    /// Re-reads the view, rebuilds the action menu and writes the description into `out`.
    fn refresh(&mut self, out: &mut String) {
        let scene = Scene::read(&self.world, &self.image);
        self.menu.rebuild(&scene, self.world.carrying.as_ref());
        scene.describe(self.world.carrying.as_ref(), out);
    }

    /// Writes the description [`Episode::refresh`] wrote last, the world being unchanged since.
    fn describe(&self, out: &mut String) {
        Scene::read(&self.world, &self.image).describe(self.world.carrying.as_ref(), out);
    }

    /// The line a reset's text starts with.
    fn push_goal(&self, out: &mut String) {
        out.push_str("Your goal: ");
        out.push_str(&goal_text(&self.world.mission));
        out.push('\n');
    }

    /// The completion note, where the episode has ended.
    fn push_completed(&self, out: &mut String) {
        if self.world.terminated {
            out.push_str(text::COMPLETED);
        }
    }

    /// The view after a move: the description, and the completion note where the episode ended.
    fn view_text(&self, out: &mut String) {
        self.describe(out);
        self.push_completed(out);
    }

    /// The goal, then the view: what a reset shows.
    fn goal_text(&self, out: &mut String) {
        self.push_goal(out);
        self.describe(out);
    }

    /// Plays `moves` (see [`play`]) and writes the view into `out`. Returns what it showed,
    /// the reward of the last move, and whether the episode ended.
    fn run(&mut self, moves: &[Action], out: &mut String) -> (Shown, f32, bool) {
        let (reward, done) = play(&mut self.world, &mut self.image, moves);
        self.refresh(out);
        self.push_completed(out);
        (Shown::View, reward, done)
    }

    /// AgentGym's high-level step (the action already lower-cased and trimmed); the text goes
    /// into `out`.
    fn step_text(&mut self, action: &str, out: &mut String) -> (Shown, f32, bool) {
        let mut reply = |s: Cow<'static, str>| {
            out.push_str(&s);
            (Shown::Reply(s), 0.0, false)
        };
        if action.contains("check") {
            let names: Vec<&str> = self.menu.actions.keys().collect();
            return reply(format!("You can take the following actions: {}", names.join(", ")).into());
        }
        if action.is_empty() {
            return reply(text::NO_CHANGE.into());
        }
        let Some(moves) = self.menu.moves(action) else {
            return reply(match self.menu.errors.get(action) {
                Some(why) => why.to_string().into(),
                None => text::NOT_RECOGNIZED.into(),
            });
        };
        if moves.is_empty() {
            return reply(text::NO_CHANGE.into());
        }
        self.run(&moves, out)
    }

    fn step_primitive(&mut self, action: &str, out: &mut String) -> (Shown, f32, bool) {
        match Action::from_name(action) {
            Some(a) => self.run(&[a], out),
            None => {
                out.push_str(text::NOT_RECOGNIZED);
                (Shown::Reply(text::NOT_RECOGNIZED.into()), 0.0, false)
            }
        }
    }
}

/// Plays the primitive `moves` of one high-level action on `world` (whose current view is
/// `image`, kept up to date) until one leaves the view unchanged (it failed) or the episode
/// ends. Returns the reward of the last move and whether the episode ended.
pub(crate) fn play(world: &mut World, image: &mut ViewImage, moves: &[Action]) -> (f32, bool) {
    let mut reward = 0.0;
    let mut done = false;
    for &m in moves {
        (reward, done) = world.step_primitive(m);
        let next = ViewImage::of(world);
        let unchanged = next == *image;
        *image = next;
        if done || unchanged {
            break;
        }
    }
    (reward, done)
}

impl TextEnv for BabyAiEnv {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        let world = self.source.world(task_id)?;
        let image = ViewImage::of(&world);
        let mut ep = Episode { task_id, world, image, menu: Menu::default() };
        let mut text = String::with_capacity(768);
        ep.push_goal(&mut text);
        ep.refresh(&mut text);
        self.episode = Some(ep);
        self.shown = Shown::Goal;
        Ok(self.publish(text))
    }

    fn step(&mut self, action: &str) -> StepOutcome {
        let primitive = self.primitive;
        let Some(ep) = self.episode.as_mut() else {
            let observation = "The episode has not started: reset first.".to_string();
            return StepOutcome { observation, reward: 0.0, done: false };
        };
        let action = action.trim().to_lowercase();
        let mut text = String::with_capacity(768);
        let (shown, reward, done) =
            if primitive { ep.step_primitive(&action, &mut text) } else { ep.step_text(&action, &mut text) };
        self.shown = shown;
        StepOutcome { observation: self.publish(text), reward, done }
    }

    fn observation(&self) -> String {
        let Some(ep) = &self.episode else {
            return String::new();
        };
        let mut text = String::with_capacity(768);
        match &self.shown {
            Shown::Nothing => return String::new(),
            Shown::Goal => ep.goal_text(&mut text),
            Shown::View => ep.view_text(&mut text),
            Shown::Reply(reply) => text.push_str(reply),
        }
        self.publish(text)
    }

    fn available_actions(&self) -> Option<Vec<String>> {
        Some(self.action_names().into_iter().map(str::to_string).collect())
    }

    /// The `pick`-th action name, read straight from the menu: a random policy's draw touches
    /// one key rather than listing them all.
    fn sample_action(&self, pick: &mut dyn FnMut(usize) -> usize) -> Option<String> {
        match (&self.episode, self.primitive) {
            (_, true) => Some(Action::ALL[pick(Action::ALL.len())].name().to_string()),
            (Some(ep), false) if !ep.menu.actions.is_empty() => {
                let k = pick(ep.menu.actions.len());
                ep.menu.actions.key_at(k).map(str::to_string)
            }
            _ => None,
        }
    }

    /// The bot of `bot.rs`: the best listed action (primitive mode: primitive action) now.
    fn expert(&self) -> Result<ExpertMove, EnvError> {
        let ep = self.episode.as_ref().ok_or_else(|| EnvError::Unsupported("the episode has not started".into()))?;
        let menu_moves = if self.primitive { Vec::new() } else { ep.menu.all_moves() };
        let candidates: Vec<(&str, &[Action])> = if self.primitive {
            Action::ALL[..6].iter().map(|a| (a.name(), std::slice::from_ref(a))).collect()
        } else {
            menu_moves.iter().map(|(name, moves)| (*name, moves.as_slice())).collect()
        };
        bot::choose(&ep.world, &ep.image, &candidates, self.primitive).map_err(EnvError::Unsupported)
    }

    fn info(&self) -> Value {
        let Some(ep) = &self.episode else {
            return Value::Null;
        };
        let mut info = ep.world.state_json();
        info["task_id"] = json!(ep.task_id);
        info["goal"] = json!(goal_text(&ep.world.mission));
        info["minigrid_hangs"] = json!(ep.world.minigrid_hangs);
        info
    }
}

#[cfg(test)]
mod tests {
    use super::grid::{Color, Grid, ObjKind, RoomGeom};
    use super::instr::{Instr, ObjDesc};
    use super::*;
    use crate::rng::Rng;

    /// An 8x8 room; the agent at (2, 3) facing east; a red ball at (5, 5), a grey key at
    /// (5, 2) and a blue ball at (3, 6). Mission: go to the red ball.
    fn room() -> World {
        let mut grid = Grid::new(8, 8);
        grid.wall_rect(0, 0, 8, 8);
        for (x, y, kind, color) in
            [(5, 5, ObjKind::Ball, Color::Red), (5, 2, ObjKind::Key, Color::Grey), (3, 6, ObjKind::Ball, Color::Blue)]
        {
            let obj = grid.make(kind, color);
            grid.set(x, y, Some(obj));
        }
        let rooms = RoomGeom { room_size: 8, num_rows: 1, num_cols: 1 };
        let mut world = World::new(grid, (2, 3), rooms);
        world.max_steps = 64;
        world.mission = "go to the red ball".into();
        world.instr = Some(Instr::goto(ObjDesc::new(Some(ObjKind::Ball), Some(Color::Red), None)));
        world.reset_verifier();
        world
    }

    /// Two rooms split by a wall at x = 4 with a closed yellow door at (4, 3); a green ball
    /// in the east room. Mission: pick up the green ball.
    fn two_rooms() -> World {
        let mut grid = Grid::new(9, 7);
        grid.wall_rect(0, 0, 9, 7);
        grid.vert_wall(4, 0, 7);
        let door = grid.make_door(Color::Yellow, false, false);
        grid.set(4, 3, Some(door));
        let ball = grid.make(ObjKind::Ball, Color::Green);
        grid.set(6, 2, Some(ball));
        let rooms = RoomGeom { room_size: 5, num_rows: 1, num_cols: 2 };
        let mut world = World::new(grid, (2, 3), rooms);
        world.max_steps = 100;
        world.mission = "pick up the green ball".into();
        let desc = ObjDesc::new(Some(ObjKind::Ball), Some(Color::Green), None);
        world.instr = Some(Instr::pickup(desc, false));
        world.reset_verifier();
        world
    }

    fn env(world: World, primitive: bool) -> BabyAiEnv {
        BabyAiEnv::new(Source::Layout(Arc::new(world)), primitive)
    }

    #[test]
    fn reset_text_has_goal_view_and_actions() {
        let mut e = env(room(), false);
        let obs = e.reset(0).unwrap();
        // The same text as the Python reference gives on this world.
        let expected = "Your goal: go to the red ball\n\
            In front of you in this room, you can see several objects: \
            There is a grey key 1 3 steps in front of you and 1 steps to your left.  \
            There is a blue ball 1 1 steps in front of you and 3 steps to your right.  \
            There is a red ball 1 3 steps in front of you and 2 steps to your right.  \
            The room has walls around you. You are facing a wall 5 steps away. \
            You are not carrying anything.\n\
            Available actions: [\"turn left\", \"turn right\", \"move forward\", \
            \"pickup grey key 1\", \"pickup blue ball 1\", \"pickup red ball 1\", \
            \"go to grey key 1\", \"go to blue ball 1\", \"go to red ball 1\", \
            \"check available actions\"]";
        assert_eq!(obs, expected);
        assert_eq!(e.observation(), obs);
        let actions = e.available_actions().unwrap();
        assert_eq!(actions.first().map(String::as_str), Some("turn left"));
        assert_eq!(actions.last().map(String::as_str), Some(text::CHECK));
    }

    #[test]
    fn go_to_reaches_the_goal_with_minigrid_reward() {
        let mut e = env(room(), false);
        e.reset(0).unwrap();
        let out = e.step("  Go To Red Ball 1 ");
        assert!(out.done);
        let steps = e.info()["step_count"].as_u64().unwrap();
        assert!(steps >= 4, "a real path was walked: {steps} moves");
        let expected = 1.0 - 0.9 * steps as f32 / 64.0;
        assert!((out.reward - expected).abs() < 1e-6, "{} vs {expected}", out.reward);
        assert!(out.observation.contains("There is a red ball 1 right in front of you 1 steps away."));
        assert!(out.observation.contains(text::COMPLETED));
    }

    #[test]
    fn invalid_and_meta_actions_change_nothing() {
        let mut e = env(room(), false);
        let first = e.reset(0).unwrap();
        let before = e.info();
        let menu = &first[first.find("\nAvailable").unwrap()..];
        for (action, reply) in [
            ("fly away", text::NOT_RECOGNIZED),
            ("", text::NO_CHANGE),
            ("drop", "You cannot drop the object, as you are not carrying anything."),
            ("pickup red ball 7", text::NOT_RECOGNIZED),
        ] {
            let out = e.step(action);
            assert_eq!(out.observation, format!("{reply}{menu}"), "action {action:?}");
            assert_eq!((out.reward, out.done), (0.0, false));
        }
        let out = e.step("check available actions");
        assert!(out
            .observation
            .starts_with("You can take the following actions: turn left, turn right, move forward, pickup grey key 1"));
        assert_eq!(e.info(), before, "no primitive step was taken");
    }

    #[test]
    fn pickup_then_drop() {
        let mut e = env(room(), false);
        e.reset(0).unwrap();
        let out = e.step("pickup grey key 1");
        assert!(out.observation.contains("You are carrying a grey key."));
        assert!(!out.observation.contains("pickup "), "no pickups while carrying");
        assert!(out.observation.contains("\"drop\""));
        let out = e.step("drop");
        assert!(out.observation.contains("You are not carrying anything."));
        assert_eq!(e.info()["carrying"], Value::Null);
    }

    #[test]
    fn doors_toggle_and_go_through() {
        let mut e = env(two_rooms(), false);
        let obs = e.reset(0).unwrap();
        assert!(obs.contains("There is a yellow closed door 1 right in front of you 2 steps away."));
        assert!(obs.contains("\"toggle and go through yellow closed door 1\""));
        let view = &obs[obs.find('\n').unwrap()..];
        assert!(!view.contains("green ball"), "the closed door hides the east room");
        let out = e.step("go through yellow closed door 1");
        assert!(out
            .observation
            .starts_with("You cannot go through yellow closed door 1, as it is closed. You should toggle it first."));
        let out = e.step("toggle and go through yellow closed door 1");
        let info = e.info();
        assert_eq!(info["agent_pos"], json!([4, 3]));
        assert_eq!(info["doors"][0]["state"], "open");
        assert!(out.observation.contains("There is a green ball 1"), "{}", out.observation);
        let out = e.step("pickup green ball 1");
        assert!(out.done && out.reward > 0.0);
    }

    #[test]
    fn toggle_is_offered_when_facing_a_closed_door() {
        let mut e = env(two_rooms(), false);
        e.reset(0).unwrap();
        let out = e.step("move forward");
        assert!(out.observation.contains("\"toggle\""), "{}", out.observation);
        let out = e.step("toggle");
        assert!(out.observation.contains("yellow open door 1"));
        assert!(out.observation.contains("\"go through yellow open door 1\""));
    }

    #[test]
    fn primitive_mode_takes_minigrid_action_names() {
        let mut e = env(room(), true);
        let obs = e.reset(0).unwrap();
        assert!(obs.ends_with(
            "Available actions: [\"left\", \"right\", \"forward\", \"pickup\", \"drop\", \"toggle\", \"done\"]"
        ));
        e.step("forward");
        assert_eq!(e.info()["agent_pos"], json!([3, 3]));
        e.step("RIGHT");
        assert_eq!(e.info()["agent_dir"], json!(1));
        let out = e.step("go to red ball 1");
        assert!(out.observation.starts_with(text::NOT_RECOGNIZED));
        assert_eq!(e.info()["step_count"], json!(2));
    }

    #[test]
    fn a_move_that_changes_nothing_stops_the_macro() {
        // Facing a ball one step ahead, "move forward" is offered (balls are not barriers),
        // but the move fails: one primitive step is spent and the view is unchanged.
        let mut e = env(room(), false);
        e.reset(0).unwrap();
        e.step("go to blue ball 1");
        let before = e.info()["agent_pos"].clone();
        let steps = e.info()["step_count"].as_u64().unwrap();
        let out = e.step("move forward");
        assert!(!out.done);
        assert_eq!(e.info()["agent_pos"], before);
        assert_eq!(e.info()["step_count"].as_u64().unwrap(), steps + 1);
    }

    #[test]
    fn step_limit_ends_the_episode_without_reward() {
        let mut world = room();
        world.max_steps = 3;
        let mut e = env(world, false);
        e.reset(0).unwrap();
        assert!(!e.step("turn left").done);
        assert!(!e.step("turn left").done);
        let out = e.step("turn left");
        assert!(out.done && out.reward == 0.0);
        assert!(!out.observation.contains(text::COMPLETED));
    }

    /// Plays `n` random available actions; returns the observations.
    fn rollout(e: &mut BabyAiEnv, seed: u64, n: usize) -> Vec<String> {
        let mut rng = Rng::new(seed);
        let mut seen = vec![e.observation()];
        for _ in 0..n {
            let actions = e.available_actions().unwrap();
            let action = rng.choice(&actions).clone();
            let out = e.step(&action);
            seen.push(out.observation);
            if out.done {
                break;
            }
        }
        seen
    }

    #[test]
    fn same_layout_same_trajectory() {
        let mut a = env(two_rooms(), false);
        let mut b = env(two_rooms(), false);
        a.reset(3).unwrap();
        b.reset(3).unwrap();
        assert_eq!(rollout(&mut a, 9, 30), rollout(&mut b, 9, 30));
    }

    fn level_env(task_id: u64) -> BabyAiEnv {
        let mut e = BabyAiEnv::new(Source::Levels(Worlds::AgentGym), false);
        e.reset(task_id).unwrap();
        e
    }

    /// `observation()` writes the text again from what the last reset or step showed: it must
    /// equal what that call returned, after moves, replies to wrong or empty actions, "check",
    /// the episode's end, and in both action modes.
    #[test]
    fn observation_repeats_the_last_text_exactly() {
        let e = BabyAiEnv::new(Source::Levels(Worlds::AgentGym), false);
        assert_eq!(e.observation(), "");
        let odd = ["", "fly away", "check available actions", "go to purple key 9", "toggle", "drop"];
        for primitive in [false, true] {
            for task in 0..3 * NUM_LEVELS {
                let mut e = BabyAiEnv::new(Source::Levels(Worlds::AgentGym), primitive);
                let first = e.reset(task).unwrap();
                assert_eq!(e.observation(), first, "task {task}, after reset");
                let mut rng = Rng::new(task);
                for k in 0..40 {
                    let action = if rng.index(4) == 0 {
                        odd[rng.index(odd.len())].to_string()
                    } else {
                        rng.choice(&e.available_actions().unwrap()).clone()
                    };
                    let out = e.step(&action);
                    assert_eq!(e.observation(), out.observation, "task {task}, step {k}, action {action:?}");
                }
            }
        }
    }

    /// A draw reads one key of the menu; it must be the listed action at the drawn index.
    #[test]
    fn sampled_action_is_the_listed_one_at_the_drawn_index() {
        for primitive in [false, true] {
            let mut e = BabyAiEnv::new(Source::Levels(Worlds::AgentGym), primitive);
            if primitive {
                assert_eq!(e.sample_action(&mut |_| 0).as_deref(), Some("left"));
            } else {
                assert_eq!(e.sample_action(&mut |_| 0), None, "no menu before the first reset");
            }
            for task in 0..NUM_LEVELS {
                e.reset(task).unwrap();
                let mut rng = Rng::new(task);
                for _ in 0..20 {
                    let listed = e.available_actions().unwrap();
                    for k in 0..listed.len() {
                        let mut asked = 0;
                        let drawn = e.sample_action(&mut |n| {
                            asked = n;
                            k
                        });
                        assert_eq!(asked, listed.len());
                        assert_eq!(drawn.as_deref(), Some(listed[k].as_str()), "task {task}, index {k}");
                    }
                    let action = rng.choice(&listed).clone();
                    if e.step(&action).done {
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn same_task_same_episode_on_every_level() {
        for level in 0..NUM_LEVELS {
            let task = level + NUM_LEVELS * 3;
            let (mut a, mut b) = (level_env(task), level_env(task));
            assert_eq!(rollout(&mut a, level, 25), rollout(&mut b, level, 25), "level {level}");
            assert_eq!(a.info(), b.info());
        }
    }

    #[test]
    fn different_seeds_give_different_episodes() {
        for level in 0..NUM_LEVELS {
            let first: Vec<String> = (0..4).map(|seed| level_env(level + NUM_LEVELS * seed).observation()).collect();
            let distinct = first.iter().filter(|o| **o != first[0]).count();
            assert!(distinct >= 1, "level {level}: four seeds, one episode");
        }
    }

    #[test]
    fn level_info_names_the_level_and_goal() {
        let e = level_env(7 + NUM_LEVELS * 2);
        let info = e.info();
        assert_eq!(info["level"], levels::LEVELS[7]);
        assert_eq!(info["task_id"], json!(7 + NUM_LEVELS * 2));
        assert!(e.observation().starts_with(&format!("Your goal: {}\n", info["goal"].as_str().unwrap())));
    }

    #[test]
    fn go_to_paths_end_facing_their_target() {
        // Every planned "go to" that runs to completion leaves the agent facing a thing of the
        // named kind (it may stop early when a move fails, e.g. through an unseen wall).
        let mut completed = 0;
        for task in 0..NUM_LEVELS * 3 {
            let e = level_env(task);
            let ep = e.episode.as_ref().unwrap();
            for (name, moves) in ep.menu.all_moves() {
                let Some(target) = name.strip_prefix("go to ").and_then(|n| n.rsplit_once(' ')) else { continue };
                let mut ep2 =
                    Episode { task_id: task, world: ep.world.clone(), image: ep.image.clone(), menu: Menu::default() };
                let start = ep2.world.step_count;
                let (_, _, done) = ep2.run(&moves, &mut String::new());
                if done || (ep2.world.step_count - start) as usize != moves.len() {
                    continue;
                }
                let front = ep2.world.front_obj().expect("facing something");
                let label = text::Label {
                    kind: front.kind,
                    color: front.color,
                    door: (front.kind == grid::ObjKind::Door).then(|| front.door_state()),
                };
                assert_eq!(label.to_string(), target.0, "task {task}, action {name:?}");
                completed += 1;
            }
        }
        assert!(completed > 100, "only {completed} go-to macros ran to completion");
    }

    #[test]
    fn random_play_on_every_level_never_panics() {
        for task in 0..NUM_LEVELS * 2 {
            let mut e = level_env(task);
            let seen = rollout(&mut e, task, 40);
            assert!(seen.iter().all(|o| o.contains("\nAvailable actions: [")));
        }
    }

    #[test]
    fn options_are_checked() {
        let opts =
            |pairs: &[(&str, &str)]| -> Options { pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
        let f = BabyAiFactory::new(&opts(&[])).unwrap();
        assert_eq!(f.num_tasks(), 40 * DEFAULT_NUM_SEEDS);
        assert!(matches!(f.source, Source::Levels(Worlds::AgentGym)) && f.takes_ids_past_end());
        let f = BabyAiFactory::new(&opts(&[("num_seeds", "5"), ("primitive", "true"), ("worlds", "own")])).unwrap();
        assert_eq!(f.num_tasks(), 200);
        assert!(f.primitive);
        assert!(matches!(f.source, Source::Levels(Worlds::Own)) && !f.takes_ids_past_end());
        for bad in [
            opts(&[("colour", "red")]),
            opts(&[("primitive", "yes")]),
            opts(&[("num_seeds", "0")]),
            opts(&[("num_seeds", "-3")]),
            opts(&[("layout", "{not json")]),
            opts(&[("worlds", "minigrid")]),
        ] {
            assert!(matches!(BabyAiFactory::new(&bad), Err(EnvError::InvalidOption { .. })));
        }
    }
}
