//! BabyAI as text, the way AgentGym's BabyAI server shows it: the agent's view in words, the
//! menu of high-level actions ("go to red ball 1", "toggle and go through blue closed door 1")
//! with the primitive moves each one expands to, and the explanations for actions that are
//! not possible. The behaviour is specified in `python/agentgym/envs/reference/BABYAI_TEXT.md`;
//! `babyai_text.py` there is the reference the parity tests compare against.

use std::fmt::{self, Write};

use super::grid::{Action, Color, DoorState, Obj, ObjKind, World, DIR_TO_VEC};
use super::planner::{Reach, Reachable, SearchWindow};

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

const fn kind_code(kind: ObjKind) -> u8 {
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

/// The kind of each object code (`KINDS[code]`), `None` for unseen, empty and unknown codes.
const KINDS: [Option<ObjKind>; 16] = {
    let mut kinds = [None; 16];
    let mut k = 0;
    while k < ObjKind::ALL.len() {
        kinds[kind_code(ObjKind::ALL[k]) as usize] = Some(ObjKind::ALL[k]);
        k += 1;
    }
    kinds
};

fn kind_from_code(code: u8) -> Option<ObjKind> {
    KINDS.get(code as usize).copied().flatten()
}

/// minigrid's color index: `Color` is declared in `COLOR_TO_IDX` order (`Color::ALL`).
fn color_code(color: Color) -> u8 {
    color as u8
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

/// Where the view lies on the grid: the world cell of view cell `(0, 0)` and the world steps
/// of one view column (`i + 1`) and one view row (`j + 1`). View cell `(i, j)`: `j` counts
/// rows from the far edge, `i` columns from the left; the agent sits at
/// `(VIEW_SIZE / 2, VIEW_SIZE - 1)`.
#[derive(Clone, Copy)]
struct ViewFrame {
    top_left: (i32, i32),
    column: (i32, i32),
    row: (i32, i32),
}

impl ViewFrame {
    fn of(world: &World) -> Self {
        let (f, r) = axes(world.agent_dir);
        let top_left = add(add(world.agent_pos, f, VIEW_SIZE - 1), r, -(VIEW_SIZE / 2));
        Self { top_left, column: r, row: (-f.0, -f.1) }
    }
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
        let frame = ViewFrame::of(world);
        // Every cell encoded (cells off the grid as grey walls), then the unseen ones cleared.
        let mut cells = [[UNSEEN, 0, 0]; CELLS];
        let mut opaque = [false; CELLS];
        let wall = [kind_code(ObjKind::Wall), color_code(Color::Grey), 0];
        for i in 0..n {
            let mut cell = add(frame.top_left, frame.column, i as i32);
            for j in 0..n {
                let k = i * n + j;
                if world.grid.in_bounds(cell.0, cell.1) {
                    let obj = world.grid.get(cell.0, cell.1);
                    cells[k] = encode(obj);
                    opaque[k] = obj.is_some_and(|o| !o.see_behind());
                } else {
                    cells[k] = wall;
                    opaque[k] = true;
                }
                cell = add(cell, frame.row, 1);
            }
        }
        let visible = visibility(&opaque);
        for (code, seen) in cells.iter_mut().zip(visible) {
            if !seen {
                *code = [UNSEEN, 0, 0];
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

impl Label {
    /// Appends the name (what `Display` shows) without the formatting machinery: names are
    /// written several times per step, into the observation and the menu's keys.
    pub fn push_to(&self, out: &mut String) {
        out.push_str(self.color.name());
        out.push(' ');
        match self.door {
            Some(state) => {
                out.push_str(state.name());
                out.push_str(" door");
            }
            None => out.push_str(self.kind.name()),
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut name = String::with_capacity(24);
        self.push_to(&mut name);
        f.write_str(&name)
    }
}

/// Appends `n` in decimal (as `{n}` formats it), without the formatting machinery.
fn push_int(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| d as char));
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
        let frame = ViewFrame::of(world);
        let mut things = Vec::with_capacity(16);
        let mut ahead: Option<(ObjKind, i32)> = None;
        for j in 0..n {
            let row_start = add(frame.top_left, frame.row, j as i32);
            for i in 0..n {
                let cell = add(row_start, frame.column, i as i32);
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
        let front = i64::from(f.0 * rel.0 + f.1 * rel.1);
        let right = i64::from(r.0 * rel.0 + r.1 * rel.1);
        if right == 0 {
            out.push_str("right in front of you ");
            push_int(out, front);
            out.push_str(" steps away. ");
            return;
        }
        push_int(out, front);
        out.push_str(" steps in front of you and ");
        push_int(out, right.abs());
        out.push_str(if right > 0 { " steps to your right. " } else { " steps to your left. " });
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
                out.push_str("There is a ");
                thing.label.push_to(out);
                out.push(' ');
                push_int(out, i64::from(n));
                out.push(' ');
                self.offset(thing, out);
                out.push(' ');
            }
        }
        out.push_str("The room has walls around you. ");
        if let Some((kind, steps)) = self.ahead {
            out.push_str("You are facing a ");
            out.push_str(kind.name());
            out.push(' ');
            push_int(out, i64::from(steps));
            out.push_str(" steps away. ");
        }
        match carrying {
            None => out.push_str("You are not carrying anything."),
            Some(o) => {
                out.push_str("You are carrying a ");
                out.push_str(o.color.name());
                out.push(' ');
                out.push_str(o.kind.name());
                out.push('.');
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

impl<T: Clone> Values for Vec<T> {
    type Item = [T];
    fn end(&self) -> usize {
        self.len()
    }
    fn clear(&mut self) {
        self.clear();
    }
    fn get(&self, range: std::ops::Range<usize>) -> &[T] {
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

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `i`-th key in insertion order, read without walking the keys before it.
    pub fn key_at(&self, i: usize) -> Option<&str> {
        let end = self.entries.as_slice().get(i)?.0 as usize;
        let start = if i == 0 { 0 } else { self.entries[i - 1].0 as usize };
        Some(&self.keys[start..end])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V::Item)> {
        self.ranges().map(|(k, r)| (k, self.values.get(r)))
    }
}

impl<T: Clone> Ordered<Vec<T>> {
    pub fn insert(&mut self, key: &str, values: &[T]) {
        self.insert_with(key, |buffer| buffer.extend_from_slice(values));
    }
}

impl Ordered<String> {
    pub fn insert(&mut self, key: &str, message: fmt::Arguments<'_>) {
        self.insert_with(key, |values| {
            let _ = values.write_fmt(message);
        });
    }
}

/// How a menu action becomes primitive moves: a path the planner finds from the agent's
/// state when the menu was built (to `target`, onto it when `arrive`, else facing it), if
/// any, then the moves of `then`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    path_to: Option<((i32, i32), bool)>,
    then: [Action; 2],
    then_len: u8,
}

impl Plan {
    /// Just these moves (at most two).
    fn moves(moves: &[Action]) -> Self {
        let mut then = [Action::Done; 2];
        then[..moves.len()].copy_from_slice(moves);
        Self { path_to: None, then, then_len: moves.len() as u8 }
    }

    /// The path to `target`, then `moves`.
    fn path(target: (i32, i32), arrive: bool, moves: &[Action]) -> Self {
        Self { path_to: Some((target, arrive)), ..Self::moves(moves) }
    }

    fn then(&self) -> &[Action] {
        &self.then[..usize::from(self.then_len)]
    }

    /// The primitive moves, the path searched with `reach` (a search from the menu's agent
    /// state); empty if the planned target cannot be reached, which the menu never offers.
    fn expand(&self, reach: &mut Reach) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some((target, arrive)) = self.path_to {
            let found = reach.path_into(target, arrive, &mut out);
            debug_assert!(found, "the menu offered an unreachable target {target:?}");
            if !found {
                return Vec::new();
            }
        }
        out.extend_from_slice(self.then());
        out
    }
}

/// The agent's state a menu was built from: where its planned paths start.
#[derive(Debug, Clone, Copy)]
struct Origin {
    pos: (i32, i32),
    dir: u8,
    window: SearchWindow,
    blocked: u64,
}

impl Origin {
    fn search(&self) -> Reach {
        Reach::new(self.pos, self.dir, &self.window, self.blocked)
    }
}

/// The high-level actions available now, each with how it becomes primitive moves, and the
/// messages for actions that were considered but are not possible.
///
/// Which actions are possible needs only which targets are reachable ([`Reachable`]); the
/// path of an action is searched when it is taken ([`Menu::moves`]): a step plans one path,
/// not one per thing in view.
#[derive(Debug, Clone, Default)]
pub struct Menu {
    pub actions: Ordered<Vec<Plan>>,
    pub errors: Ordered<String>,
    origin: Option<Origin>,
    /// Scratch buffer kept across rebuilds: the key being written.
    key: String,
}

const NO_PATH: &str = "as there is no path leading to it";

impl Menu {
    /// The primitive moves of action `name`; `None` when the menu has no such action.
    pub fn moves(&self, name: &str) -> Option<Vec<Action>> {
        let plan = self.actions.get(name)?.first()?;
        Some(match (plan.path_to, self.origin) {
            (Some(_), Some(origin)) => plan.expand(&mut origin.search()),
            _ => plan.then().to_vec(),
        })
    }

    /// Every action with its primitive moves, in menu order (one search for all paths).
    pub fn all_moves(&self) -> Vec<(&str, Vec<Action>)> {
        let mut reach = self.origin.map(|o| o.search());
        self.actions
            .iter()
            .filter_map(|(name, plans)| {
                let plan = plans.first()?;
                let moves = match reach.as_mut() {
                    Some(reach) => plan.expand(reach),
                    None => plan.then().to_vec(),
                };
                Some((name, moves))
            })
            .collect()
    }

    /// Rebuilds AgentGym's action menu, in its order: turns, move forward, pickups, drop,
    /// door actions, go to goal, go to objects, check available actions.
    pub fn rebuild(&mut self, scene: &Scene, carrying: Option<&Obj>) {
        self.actions.clear();
        self.errors.clear();
        let origin = Origin { pos: scene.pos, dir: scene.dir, window: scene.window, blocked: scene.blocked_cells };
        self.origin = Some(origin);
        let reach = Reachable::new(origin.pos, origin.dir, &origin.window, origin.blocked);
        self.actions.insert("turn left", &[Plan::moves(&[Action::Left])]);
        self.actions.insert("turn right", &[Plan::moves(&[Action::Right])]);
        match scene.ahead {
            Some((_, steps)) if steps <= 1 => self
                .errors
                .insert("move forward", format_args!("There is a barrier in front of you, you can't move forward.")),
            _ => self.actions.insert("move forward", &[Plan::moves(&[Action::Forward])]),
        }
        if carrying.is_none() {
            self.pickups(scene, &reach);
        }
        self.drop(scene, carrying);
        self.doors(scene, &reach, carrying);
        self.goals(scene, &reach);
        self.gotos(scene, &reach);
        self.actions.insert(CHECK, &[Plan::moves(&[])]);
    }

    /// Sets the scratch key to `args`.
    fn set_key(&mut self, args: fmt::Arguments<'_>) {
        self.key.clear();
        let _ = self.key.write_fmt(args);
    }

    /// "<verb> <name> <n>", n counting the reachable things of that name so far; an
    /// unreachable thing (`plan` None) leaves an error under the next number instead.
    fn numbered(&mut self, counts: &mut Counts, verb: &str, label: Label, plan: Option<Plan>) {
        let n = counts.get(label) + 1;
        self.key.clear();
        self.key.push_str(verb);
        self.key.push(' ');
        label.push_to(&mut self.key);
        self.key.push(' ');
        push_int(&mut self.key, i64::from(n));
        match plan {
            Some(plan) => {
                counts.set(label, n);
                self.actions.insert(&self.key, &[plan]);
            }
            None => self.errors.insert(&self.key, format_args!("You cannot {}, {NO_PATH}.", self.key)),
        }
    }

    fn pickups(&mut self, scene: &Scene, reach: &Reachable) {
        let mut counts = Counts::default();
        for t in &scene.things {
            if matches!(t.label.kind, ObjKind::Wall | ObjKind::Door | ObjKind::Goal) {
                continue;
            }
            let plan = reach.reaches(t.pos, false).then(|| Plan::path(t.pos, false, &[Action::Pickup]));
            self.numbered(&mut counts, "pickup", t.label, plan);
        }
    }

    fn drop(&mut self, scene: &Scene, carrying: Option<&Obj>) {
        let (f, _) = axes(scene.dir);
        let msg = if carrying.is_none() {
            "You cannot drop the object, as you are not carrying anything."
        } else if scene.blocked(add(scene.pos, f, 1)) {
            "You cannot drop the object, as there is already an object in front of you."
        } else {
            self.actions.insert("drop", &[Plan::moves(&[Action::Drop])]);
            return;
        };
        self.errors.insert("drop", format_args!("{msg}"));
    }

    fn doors(&mut self, scene: &Scene, reach: &Reachable, carrying: Option<&Obj>) {
        let mut counts = Counts::default();
        for t in scene.things.iter().filter(|t| t.label.kind == ObjKind::Door) {
            let label = t.label;
            let n = counts.bump(label);
            let state = label.door.unwrap_or(DoorState::Closed);
            if state == DoorState::Open {
                self.set_key(format_args!("go through {label} {n}"));
                if reach.reaches(t.pos, true) {
                    self.actions.insert(&self.key, &[Plan::path(t.pos, true, &[])]);
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
            let reachable = reach.reaches(t.pos, false);
            if reachable {
                self.actions.insert(&self.key, &[Plan::path(t.pos, false, &[Action::Toggle, Action::Forward])]);
            } else {
                // AgentGym prints its whole door-count table here; kept for fidelity.
                let table = counts.python_repr();
                self.errors
                    .insert(&self.key, format_args!("You cannot toggle and go through {label} {table}, {NO_PATH}."));
            }
            if reachable && reach.at_start(t.pos, false) {
                self.actions.insert("toggle", &[Plan::moves(&[Action::Toggle])]);
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

    fn goals(&mut self, scene: &Scene, reach: &Reachable) {
        for t in scene.things.iter().filter(|t| t.label.kind == ObjKind::Goal) {
            if reach.reaches(t.pos, true) {
                self.actions.insert("go to goal", &[Plan::path(t.pos, true, &[])]);
            } else {
                self.errors.insert("go to goal", format_args!("You cannot go to the goal, {NO_PATH}."));
            }
        }
    }

    fn gotos(&mut self, scene: &Scene, reach: &Reachable) {
        let mut counts = Counts::default();
        for t in &scene.things {
            if matches!(t.label.kind, ObjKind::Wall | ObjKind::Goal) {
                continue;
            }
            let plan = reach.reaches(t.pos, false).then(|| Plan::path(t.pos, false, &[]));
            self.numbered(&mut counts, "go to", t.label, plan);
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
