//! BabyAI as text, the way AgentGym's BabyAI server shows it: the agent's view in words, the
//! menu of high-level actions ("go to red ball 1", "toggle and go through blue closed door 1")
//! with the primitive moves each one expands to, and the explanations for actions that are
//! not possible. The behaviour is specified in `python/agentgym/envs/reference/BABYAI_TEXT.md`;
//! `babyai_text.py` there is the reference the parity tests compare against.

use std::fmt::{self, Write};

use super::grid::{Action, Color, DoorState, Obj, ObjKind, World, DIR_TO_VEC};
use super::planner::{Reach, SearchWindow};

/// minigrid's `agent_view_size` for BabyAI levels.
pub const VIEW_SIZE: i32 = 7;

const CELLS: usize = (VIEW_SIZE * VIEW_SIZE) as usize;

/// Object codes of minigrid's observation encoding (`OBJECT_TO_IDX`).
const UNSEEN: u8 = 0;
const EMPTY: u8 = 1;

pub const CHECK: &str = "check available actions";
pub const NOT_RECOGNIZED: &str = "The action is not recognized. Please check valid actions.";
pub const NO_CHANGE: &str = "No change in state.";
pub const COMPLETED: &str = "\n The task is completed.";

fn kind_code(kind: ObjKind) -> u8 {
    match kind {
        ObjKind::Wall => 2,
        ObjKind::Floor => 3,
        ObjKind::Door => 4,
        ObjKind::Key => 5,
        ObjKind::Ball => 6,
        ObjKind::Box => 7,
        ObjKind::Goal => 8,
        ObjKind::Lava => 9,
    }
}

fn kind_from_code(code: u8) -> Option<ObjKind> {
    ObjKind::ALL.into_iter().find(|&k| kind_code(k) == code)
}

fn color_code(color: Color) -> u8 {
    Color::ALL.iter().position(|&c| c == color).unwrap_or(0) as u8
}

fn door_state_code(state: DoorState) -> u8 {
    match state {
        DoorState::Open => 0,
        DoorState::Closed => 1,
        DoorState::Locked => 2,
    }
}

const DOOR_STATES: [DoorState; 3] = [DoorState::Open, DoorState::Closed, DoorState::Locked];

fn encode(obj: Option<&Obj>) -> [u8; 3] {
    match obj {
        None => [EMPTY, 0, 0],
        Some(o) => {
            let state = if o.kind == ObjKind::Door { door_state_code(o.door_state()) } else { 0 };
            [kind_code(o.kind), color_code(o.color), state]
        }
    }
}

fn add(a: (i32, i32), b: (i32, i32), k: i32) -> (i32, i32) {
    (a.0 + k * b.0, a.1 + k * b.1)
}

/// The agent's forward and right unit vectors.
fn axes(dir: u8) -> ((i32, i32), (i32, i32)) {
    (DIR_TO_VEC[dir as usize % 4], DIR_TO_VEC[(dir as usize + 1) % 4])
}

/// World cell of view cell `(i, j)`: `j` counts rows from the far edge, `i` columns from
/// the left, the agent sits at `(VIEW_SIZE / 2, VIEW_SIZE - 1)`.
fn view_cell(world: &World, i: i32, j: i32) -> (i32, i32) {
    let (f, r) = axes(world.agent_dir);
    let top_left = add(add(world.agent_pos, f, VIEW_SIZE - 1), r, -(VIEW_SIZE / 2));
    add(add(top_left, f, -j), r, i)
}

/// minigrid's encoded egocentric observation (`obs["image"]`): what the agent sees, with
/// occlusion, cells off the grid as walls, and the carried object in the agent's cell.
/// AgentGym compares two of these to decide whether a primitive move did anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewImage {
    /// `cells[i * VIEW_SIZE + j]` = (object, color, state) codes; `[0, 0, 0]` is unseen.
    cells: [[u8; 3]; CELLS],
}

impl ViewImage {
    /// The view of `world` as minigrid's `gen_obs` encodes it.
    pub fn of(world: &World) -> Self {
        let n = VIEW_SIZE as usize;
        let mut objs: [Option<&Obj>; CELLS] = [None; CELLS];
        let mut opaque = [false; CELLS];
        let mut outside = [false; CELLS];
        for i in 0..n {
            for j in 0..n {
                let (x, y) = view_cell(world, i as i32, j as i32);
                let k = i * n + j;
                if world.grid.in_bounds(x, y) {
                    objs[k] = world.grid.get(x, y);
                    opaque[k] = objs[k].is_some_and(|o| !o.see_behind());
                } else {
                    outside[k] = true;
                    opaque[k] = true;
                }
            }
        }
        let visible = visibility(&opaque);
        let mut cells = [[UNSEEN, 0, 0]; CELLS];
        let wall = [kind_code(ObjKind::Wall), color_code(Color::Grey), 0];
        for k in 0..CELLS {
            if visible[k] {
                cells[k] = if outside[k] { wall } else { encode(objs[k]) };
            }
        }
        let agent = (n / 2) * n + (n - 1);
        cells[agent] = encode(world.carrying.as_ref());
        Self { cells }
    }

    fn get(&self, i: usize, j: usize) -> [u8; 3] {
        self.cells[i * VIEW_SIZE as usize + j]
    }
}

/// minigrid's `Grid.process_vis` on the view: light spreads from the agent's cell
/// sideways and forward through cells that can be seen behind.
fn visibility(opaque: &[bool; CELLS]) -> [bool; CELLS] {
    let n = VIEW_SIZE as usize;
    let at = |i: usize, j: usize| i * n + j;
    let mut mask = [false; CELLS];
    mask[at(n / 2, n - 1)] = true;
    for j in (0..n).rev() {
        for i in 0..n - 1 {
            if !mask[at(i, j)] || opaque[at(i, j)] {
                continue;
            }
            mask[at(i + 1, j)] = true;
            if j > 0 {
                mask[at(i + 1, j - 1)] = true;
                mask[at(i, j - 1)] = true;
            }
        }
        for i in (1..n).rev() {
            if !mask[at(i, j)] || opaque[at(i, j)] {
                continue;
            }
            mask[at(i - 1, j)] = true;
            if j > 0 {
                mask[at(i - 1, j - 1)] = true;
                mask[at(i, j - 1)] = true;
            }
        }
    }
    mask
}

/// What a thing is called: "red ball", "blue closed door", "grey wall".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    pub kind: ObjKind,
    pub color: Color,
    pub door: Option<DoorState>,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.door {
            Some(state) => write!(f, "{} {} door", self.color.name(), state.name()),
            None => write!(f, "{} {}", self.color.name(), self.kind.name()),
        }
    }
}

/// Whether the planner routes around this kind and `drop` refuses to drop onto it.
fn blocks(kind: ObjKind) -> bool {
    matches!(kind, ObjKind::Wall | ObjKind::Box | ObjKind::Lava | ObjKind::Ball | ObjKind::Key)
}

/// A named cell in view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thing {
    pub label: Label,
    pub pos: (i32, i32),
    /// Manhattan distance from the agent.
    pub dist: i32,
}

/// The agent's view read as AgentGym reads it.
#[derive(Debug, Clone)]
pub struct Scene {
    /// Named cells (walls included), nearest first; ties in view order (far rows first,
    /// then left to right).
    pub things: Vec<Thing>,
    /// The nearest wall or box straight ahead and its distance in steps.
    pub ahead: Option<(ObjKind, i32)>,
    pub window: SearchWindow,
    /// Cells of `window` (bit = `window.cell_index`) holding a blocking thing: the planner's
    /// obstacles.
    blocked_cells: u64,
    pub pos: (i32, i32),
    pub dir: u8,
}

impl Scene {
    /// Reads `image` (the current view of `world`).
    pub fn read(world: &World, image: &ViewImage) -> Self {
        let pos = world.agent_pos;
        let (f, _) = axes(world.agent_dir);
        let n = VIEW_SIZE as usize;
        let mut things = Vec::with_capacity(16);
        let mut ahead: Option<(ObjKind, i32)> = None;
        for j in 0..n {
            for i in 0..n {
                let cell = view_cell(world, i as i32, j as i32);
                if cell.0 < 0 || cell.1 < 0 || cell == pos {
                    continue;
                }
                let [kind, color, state] = image.get(i, j);
                let Some(kind) = kind_from_code(kind) else {
                    continue;
                };
                if kind == ObjKind::Floor {
                    continue;
                }
                let rel = (cell.0 - pos.0, cell.1 - pos.1);
                let label = Label {
                    kind,
                    color: Color::ALL[color as usize % 6],
                    door: (kind == ObjKind::Door).then(|| DOOR_STATES[state as usize % 3]),
                };
                things.push(Thing { label, pos: cell, dist: rel.0.abs() + rel.1.abs() });
                let in_line = f.0 * rel.1 - f.1 * rel.0 == 0;
                if matches!(kind, ObjKind::Box | ObjKind::Wall) && in_line {
                    let steps = f.0 * rel.0 + f.1 * rel.1;
                    if ahead.is_none_or(|(_, s)| steps < s) {
                        ahead = Some((kind, steps));
                    }
                }
            }
        }
        // Stable: equal distances keep view order, as Python's sort does.
        things.sort_by_key(|t| t.dist);
        let window = SearchWindow::around(pos, world.agent_dir, VIEW_SIZE);
        let blocked_cells = things
            .iter()
            .filter(|t| blocks(t.label.kind) && window.contains(t.pos))
            .fold(0u64, |bits, t| bits | (1u64 << window.cell_index(t.pos)));
        Self { things, ahead, window, blocked_cells, pos, dir: world.agent_dir }
    }

    /// Whether a blocking thing occupies `pos`.
    pub fn blocked(&self, pos: (i32, i32)) -> bool {
        self.window.contains(pos) && self.blocked_cells & (1u64 << self.window.cell_index(pos)) != 0
    }

    fn offset(&self, thing: &Thing, out: &mut String) {
        let (f, r) = axes(self.dir);
        let rel = (thing.pos.0 - self.pos.0, thing.pos.1 - self.pos.1);
        let front = f.0 * rel.0 + f.1 * rel.1;
        let right = r.0 * rel.0 + r.1 * rel.1;
        let _ = match right.cmp(&0) {
            std::cmp::Ordering::Equal => write!(out, "right in front of you {front} steps away. "),
            std::cmp::Ordering::Greater => {
                write!(out, "{front} steps in front of you and {right} steps to your right. ")
            }
            std::cmp::Ordering::Less => {
                write!(out, "{front} steps in front of you and {} steps to your left. ", -right)
            }
        };
    }

    /// The observation text (without goal line or action list) into `out`.
    pub fn describe(&self, carrying: Option<&Obj>, out: &mut String) {
        if self.things.is_empty() {
            out.push_str("You cannot see any objects within sight.");
        } else {
            out.push_str("In front of you in this room, you can see several objects: ");
            let mut seen = Counts::default();
            for thing in self.things.iter().filter(|t| t.label.kind != ObjKind::Wall) {
                let n = seen.bump(thing.label);
                let _ = write!(out, "There is a {} {n} ", thing.label);
                self.offset(thing, out);
                out.push(' ');
            }
        }
        out.push_str("The room has walls around you. ");
        if let Some((kind, steps)) = self.ahead {
            let _ = write!(out, "You are facing a {} {steps} steps away. ", kind.name());
        }
        match carrying {
            None => out.push_str("You are not carrying anything."),
            Some(o) => {
                let _ = write!(out, "You are carrying a {} {}.", o.color.name(), o.kind.name());
            }
        }
    }
}

/// Per-label counters in first-seen order (AgentGym numbers things by name).
#[derive(Debug, Default)]
struct Counts(Vec<(Label, u32)>);

impl Counts {
    fn get(&self, label: Label) -> u32 {
        self.0.iter().find(|(l, _)| *l == label).map_or(0, |(_, n)| *n)
    }

    fn set(&mut self, label: Label, n: u32) {
        match self.0.iter_mut().find(|(l, _)| *l == label) {
            Some(entry) => entry.1 = n,
            None => self.0.push((label, n)),
        }
    }

    fn bump(&mut self, label: Label) -> u32 {
        let n = self.get(label) + 1;
        self.set(label, n);
        n
    }

    /// Python's `str(dict)` of the counters, as AgentGym prints it in one message.
    fn python_repr(&self) -> String {
        let items: Vec<String> = self.0.iter().map(|(l, n)| format!("'{l}': {n}")).collect();
        format!("{{{}}}", items.join(", "))
    }
}

/// The buffer an [`Ordered`] keeps its values in, back to back.
pub trait Values: Default {
    type Item: ?Sized;
    /// Where the next value would start.
    fn end(&self) -> usize;
    fn clear(&mut self);
    fn get(&self, range: std::ops::Range<usize>) -> &Self::Item;
}

impl Values for String {
    type Item = str;
    fn end(&self) -> usize {
        self.len()
    }
    fn clear(&mut self) {
        self.clear();
    }
    fn get(&self, range: std::ops::Range<usize>) -> &str {
        &self[range]
    }
}

impl Values for Vec<Action> {
    type Item = [Action];
    fn end(&self) -> usize {
        self.len()
    }
    fn clear(&mut self) {
        self.clear();
    }
    fn get(&self, range: std::ops::Range<usize>) -> &[Action] {
        &self[range]
    }
}

/// An insertion-ordered map with small linear lookups; re-inserting keeps the first
/// position, as a Python dict does. Keys sit back to back in one `String` and values in one
/// `V`, so a menu is a handful of contiguous buffers (cache-friendly with thousands of
/// sessions), and `clear` keeps them: a menu rebuilt every step allocates only when it grows.
#[derive(Debug, Clone, Default)]
pub struct Ordered<V: Values> {
    keys: String,
    values: V,
    /// Per entry: where its key ends in `keys` (it starts where the previous one ends) and its
    /// value's range in `values`.
    entries: Vec<(u32, u32, u32)>,
}

impl<V: Values> Ordered<V> {
    pub fn clear(&mut self) {
        self.keys.clear();
        self.entries.clear();
        self.values.clear();
    }

    fn ranges(&self) -> impl Iterator<Item = (&str, std::ops::Range<usize>)> {
        let mut start = 0;
        self.entries.iter().map(move |&(key_end, v0, v1)| {
            let key = &self.keys[start..key_end as usize];
            start = key_end as usize;
            (key, v0 as usize..v1 as usize)
        })
    }

    /// Inserts `key` with the value `write` appends to the values buffer; an existing key
    /// keeps its position and takes the new value (the old one stays unused until `clear`).
    pub fn insert_with(&mut self, key: &str, write: impl FnOnce(&mut V)) {
        let start = self.values.end();
        write(&mut self.values);
        let value = (start as u32, self.values.end() as u32);
        let existing = self.ranges().position(|(k, _)| k == key);
        match existing {
            Some(i) => (self.entries[i].1, self.entries[i].2) = value,
            None => {
                self.keys.push_str(key);
                self.entries.push((self.keys.len() as u32, value.0, value.1));
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&V::Item> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.ranges().map(|(k, _)| k)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V::Item)> {
        self.ranges().map(|(k, r)| (k, self.values.get(r)))
    }
}

impl Ordered<Vec<Action>> {
    pub fn insert(&mut self, key: &str, moves: &[Action]) {
        self.insert_with(key, |values| values.extend_from_slice(moves));
    }
}

impl Ordered<String> {
    pub fn insert(&mut self, key: &str, message: fmt::Arguments<'_>) {
        self.insert_with(key, |values| {
            let _ = values.write_fmt(message);
        });
    }
}

/// The high-level actions available now, each with its primitive moves, and the messages
/// for actions that were considered but are not possible.
#[derive(Debug, Clone, Default)]
pub struct Menu {
    pub actions: Ordered<Vec<Action>>,
    pub errors: Ordered<String>,
    /// Scratch buffers kept across rebuilds: the key being written, the path being planned.
    key: String,
    path: Vec<Action>,
}

/// Path search from the scene's agent state: one search, run on the first request, answers
/// every (target, arrive) the menu asks about.
struct Planner<'a> {
    scene: &'a Scene,
    reach: Option<Reach>,
}

impl Planner<'_> {
    /// Writes the path into `out`; false (and `out` unspecified) when there is none.
    fn path(&mut self, target: (i32, i32), arrive: bool, out: &mut Vec<Action>) -> bool {
        let scene = self.scene;
        let reach =
            self.reach.get_or_insert_with(|| Reach::new(scene.pos, scene.dir, &scene.window, scene.blocked_cells));
        reach.path_into(target, arrive, out)
    }
}

const NO_PATH: &str = "as there is no path leading to it";

impl Menu {
    /// Rebuilds AgentGym's action menu, in its order: turns, move forward, pickups, drop,
    /// door actions, go to goal, go to objects, check available actions.
    pub fn rebuild(&mut self, scene: &Scene, carrying: Option<&Obj>) {
        self.actions.clear();
        self.errors.clear();
        let mut plan = Planner { scene, reach: None };
        self.actions.insert("turn left", &[Action::Left]);
        self.actions.insert("turn right", &[Action::Right]);
        match scene.ahead {
            Some((_, steps)) if steps <= 1 => self
                .errors
                .insert("move forward", format_args!("There is a barrier in front of you, you can't move forward.")),
            _ => self.actions.insert("move forward", &[Action::Forward]),
        }
        if carrying.is_none() {
            self.pickups(scene, &mut plan);
        }
        self.drop(scene, carrying);
        self.doors(scene, &mut plan, carrying);
        self.goals(scene, &mut plan);
        self.gotos(scene, &mut plan);
        self.actions.insert(CHECK, &[]);
    }

    /// Sets the scratch key to `args`.
    fn set_key(&mut self, args: fmt::Arguments<'_>) {
        self.key.clear();
        let _ = self.key.write_fmt(args);
    }

    /// "<verb> <name> <n>", n counting the reachable things of that name so far; an
    /// unreachable thing leaves an error under the next number instead. The path is
    /// `self.path` when `reachable`.
    fn numbered(&mut self, counts: &mut Counts, verb: &str, label: Label, reachable: bool) {
        let n = counts.get(label) + 1;
        self.set_key(format_args!("{verb} {label} {n}"));
        if reachable {
            counts.set(label, n);
            self.actions.insert(&self.key, &self.path);
        } else {
            self.errors.insert(&self.key, format_args!("You cannot {}, {NO_PATH}.", self.key));
        }
    }

    fn pickups(&mut self, scene: &Scene, plan: &mut Planner) {
        let mut counts = Counts::default();
        for t in &scene.things {
            if matches!(t.label.kind, ObjKind::Wall | ObjKind::Door | ObjKind::Goal) {
                continue;
            }
            let reachable = plan.path(t.pos, false, &mut self.path);
            if reachable {
                self.path.push(Action::Pickup);
            }
            self.numbered(&mut counts, "pickup", t.label, reachable);
        }
    }

    fn drop(&mut self, scene: &Scene, carrying: Option<&Obj>) {
        let (f, _) = axes(scene.dir);
        let msg = if carrying.is_none() {
            "You cannot drop the object, as you are not carrying anything."
        } else if scene.blocked(add(scene.pos, f, 1)) {
            "You cannot drop the object, as there is already an object in front of you."
        } else {
            self.actions.insert("drop", &[Action::Drop]);
            return;
        };
        self.errors.insert("drop", format_args!("{msg}"));
    }

    fn doors(&mut self, scene: &Scene, plan: &mut Planner, carrying: Option<&Obj>) {
        let mut counts = Counts::default();
        for t in scene.things.iter().filter(|t| t.label.kind == ObjKind::Door) {
            let label = t.label;
            let n = counts.bump(label);
            let state = label.door.unwrap_or(DoorState::Closed);
            if state == DoorState::Open {
                self.set_key(format_args!("go through {label} {n}"));
                if plan.path(t.pos, true, &mut self.path) {
                    self.actions.insert(&self.key, &self.path);
                } else {
                    self.errors.insert(&self.key, format_args!("You cannot {}, {NO_PATH}.", self.key));
                }
                continue;
            }
            self.set_key(format_args!("toggle and go through {label} {n}"));
            if state == DoorState::Locked {
                let reason = match carrying {
                    Some(o) if o.kind == ObjKind::Key && o.color == label.color => None,
                    Some(o) if o.kind == ObjKind::Key => {
                        Some("the color of the key you are carrying does not match the color of door")
                    }
                    _ => Some("you are not carrying a key"),
                };
                if let Some(reason) = reason {
                    self.errors.insert(&self.key, format_args!("You cannot {}, as {reason}.", self.key));
                    continue;
                }
            }
            let reachable = plan.path(t.pos, false, &mut self.path);
            let facing = reachable && self.path.is_empty();
            if reachable {
                self.path.extend([Action::Toggle, Action::Forward]);
                self.actions.insert(&self.key, &self.path);
            } else {
                // AgentGym prints its whole door-count table here; kept for fidelity.
                let table = counts.python_repr();
                self.errors
                    .insert(&self.key, format_args!("You cannot toggle and go through {label} {table}, {NO_PATH}."));
            }
            if facing {
                self.actions.insert("toggle", &[Action::Toggle]);
            }
            if state == DoorState::Closed {
                self.set_key(format_args!("go through {label} {n}"));
                self.errors.insert(
                    &self.key,
                    format_args!("You cannot {}, as it is closed. You should toggle it first.", self.key),
                );
            }
        }
    }

    fn goals(&mut self, scene: &Scene, plan: &mut Planner) {
        for t in scene.things.iter().filter(|t| t.label.kind == ObjKind::Goal) {
            if plan.path(t.pos, true, &mut self.path) {
                self.actions.insert("go to goal", &self.path);
            } else {
                self.errors.insert("go to goal", format_args!("You cannot go to the goal, {NO_PATH}."));
            }
        }
    }

    fn gotos(&mut self, scene: &Scene, plan: &mut Planner) {
        let mut counts = Counts::default();
        for t in &scene.things {
            if matches!(t.label.kind, ObjKind::Wall | ObjKind::Goal) {
                continue;
            }
            let reachable = plan.path(t.pos, false, &mut self.path);
            self.numbered(&mut counts, "go to", t.label, reachable);
        }
    }
}

/// AgentGym's goal line: "then" and "after you" in the mission become "and".
pub fn goal_text(mission: &str) -> String {
    mission.replace("then", "and").replace("after you", "and")
}

/// Appends `\nAvailable actions: ["a", "b"]`.
pub fn push_actions<'a>(out: &mut String, names: impl IntoIterator<Item = &'a str>) {
    out.push_str("\nAvailable actions: [");
    for (k, name) in names.into_iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        out.push('"');
        out.push_str(name);
        out.push('"');
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_keeps_first_position_takes_last_value_and_reuses_buffers() {
        let mut menu: Ordered<Vec<Action>> = Ordered::default();
        for round in 0..3 {
            menu.clear();
            menu.insert("turn left", &[Action::Left]);
            menu.insert("toggle", &[Action::Toggle]);
            menu.insert("go to red ball 1", &[Action::Forward, Action::Forward]);
            menu.insert("toggle", &[Action::Toggle, Action::Forward]);
            menu.insert("check available actions", &[]);
            let entries: Vec<(&str, &[Action])> = menu.iter().collect();
            assert_eq!(
                entries,
                vec![
                    ("turn left", &[Action::Left][..]),
                    ("toggle", &[Action::Toggle, Action::Forward][..]),
                    ("go to red ball 1", &[Action::Forward, Action::Forward][..]),
                    ("check available actions", &[][..]),
                ],
                "round {round}"
            );
            assert_eq!(menu.get("go to red ball 1"), Some(&[Action::Forward, Action::Forward][..]));
            assert_eq!(menu.get("go to red ball"), None);
        }
        let mut errors: Ordered<String> = Ordered::default();
        errors.insert("drop", format_args!("You cannot drop the object, as {}.", "you are not carrying anything"));
        assert_eq!(errors.get("drop"), Some("You cannot drop the object, as you are not carrying anything."));
        errors.clear();
        assert_eq!(errors.keys().count(), 0);
    }
}
