//! The BabyAI world: minigrid's objects, grid and primitive dynamics.
//!
//! Semantics follow minigrid 3.x (`minigrid_env.MiniGridEnv.step`, `core/world_object.py`)
//! and BabyAI's `RoomGridLevel.step`: the instruction verifier decides success or failure
//! after every primitive action. Coordinates are `(x, y)` with `x` to the east and `y` to
//! the south; directions are 0 = east, 1 = south, 2 = west, 3 = north.

use serde_json::{json, Value};

use super::instr::{Instr, Status};

/// The six colors in minigrid's index order (`COLOR_TO_IDX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Color {
    Red,
    Green,
    Blue,
    Purple,
    Yellow,
    Grey,
}

impl Color {
    /// All colors in minigrid's index order.
    pub const ALL: [Color; 6] = [Color::Red, Color::Green, Color::Blue, Color::Purple, Color::Yellow, Color::Grey];
    /// Colors sorted by name: minigrid's `COLOR_NAMES`, which random draws index into.
    pub const BY_NAME: [Color; 6] = [Color::Blue, Color::Green, Color::Grey, Color::Purple, Color::Red, Color::Yellow];

    pub fn name(self) -> &'static str {
        match self {
            Color::Red => "red",
            Color::Green => "green",
            Color::Blue => "blue",
            Color::Purple => "purple",
            Color::Yellow => "yellow",
            Color::Grey => "grey",
        }
    }

    pub fn from_name(name: &str) -> Option<Color> {
        Color::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Object kinds (minigrid's `OBJECT_TO_IDX` minus the view-only unseen/empty/agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjKind {
    Wall,
    Floor,
    Door,
    Key,
    Ball,
    Box,
    Goal,
    Lava,
}

impl ObjKind {
    pub const ALL: [ObjKind; 8] = [
        ObjKind::Wall,
        ObjKind::Floor,
        ObjKind::Door,
        ObjKind::Key,
        ObjKind::Ball,
        ObjKind::Box,
        ObjKind::Goal,
        ObjKind::Lava,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Wall => "wall",
            ObjKind::Floor => "floor",
            ObjKind::Door => "door",
            ObjKind::Key => "key",
            ObjKind::Ball => "ball",
            ObjKind::Box => "box",
            ObjKind::Goal => "goal",
            ObjKind::Lava => "lava",
        }
    }

    pub fn from_name(name: &str) -> Option<ObjKind> {
        ObjKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The color minigrid gives this kind when none is named (`Wall()`, `Goal()`, ...).
    pub fn default_color(self) -> Color {
        match self {
            ObjKind::Wall => Color::Grey,
            ObjKind::Goal => Color::Green,
            ObjKind::Lava => Color::Red,
            _ => Color::Blue,
        }
    }
}

/// A door's state as minigrid encodes it: open beats locked (`Door.encode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorState {
    Open,
    Closed,
    Locked,
}

impl DoorState {
    pub fn name(self) -> &'static str {
        match self {
            DoorState::Open => "open",
            DoorState::Closed => "closed",
            DoorState::Locked => "locked",
        }
    }
}

/// One world object. `id` gives objects the identity minigrid's verifiers rely on
/// (`obj is carrying`): two red balls are different objects. A box's contents live in its
/// grid's side table ([`Grid::contents_of`]), so an object is 8 bytes and a grid cell
/// (`Option<Obj>`, the niche in `kind`) is too: the grid is most of a session's state, and
/// every step reads the agent's view and walks the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Obj {
    pub id: u32,
    pub kind: ObjKind,
    pub color: Color,
    /// Doors only.
    pub is_open: bool,
    /// Doors only.
    pub is_locked: bool,
}

const _: () = assert!(std::mem::size_of::<Option<Obj>>() == 8);

impl Obj {
    /// Whether the agent can stand on this cell (`WorldObj.can_overlap`).
    pub fn can_overlap(&self) -> bool {
        match self.kind {
            ObjKind::Floor | ObjKind::Goal | ObjKind::Lava => true,
            ObjKind::Door => self.is_open,
            _ => false,
        }
    }

    /// Whether the agent can pick this up (`WorldObj.can_pickup`).
    pub fn can_pickup(&self) -> bool {
        matches!(self.kind, ObjKind::Key | ObjKind::Ball | ObjKind::Box)
    }

    /// Whether the agent sees past this cell (`WorldObj.see_behind`).
    pub fn see_behind(&self) -> bool {
        match self.kind {
            ObjKind::Wall => false,
            ObjKind::Door => self.is_open,
            _ => true,
        }
    }

    pub fn door_state(&self) -> DoorState {
        if self.is_open {
            DoorState::Open
        } else if self.is_locked {
            DoorState::Locked
        } else {
            DoorState::Closed
        }
    }

    /// `{type, color}` (plus `state` for doors) as JSON.
    pub fn describe_json(&self) -> Value {
        let mut v = json!({"type": self.kind.name(), "color": self.color.name()});
        if self.kind == ObjKind::Door {
            v["state"] = json!(self.door_state().name());
        }
        v
    }
}

fn cell_letter(obj: &Obj) -> char {
    match obj.kind {
        ObjKind::Wall => 'W',
        ObjKind::Floor => '.',
        ObjKind::Door => match obj.door_state() {
            DoorState::Open => 'd',
            DoorState::Closed => 'D',
            DoorState::Locked => 'L',
        },
        ObjKind::Key => 'K',
        ObjKind::Ball => 'A',
        ObjKind::Box => 'B',
        ObjKind::Goal => 'G',
        ObjKind::Lava => 'V',
    }
}

fn color_letter(color: Color) -> char {
    match color {
        Color::Red => 'R',
        Color::Green => 'G',
        Color::Blue => 'B',
        Color::Purple => 'P',
        Color::Yellow => 'Y',
        Color::Grey => 'E',
    }
}

/// A rectangle of cells, each empty or holding one object, and what the boxes hold. Grids
/// are equal when their cells and box contents are (the id counter is bookkeeping).
#[derive(Debug, Clone)]
pub struct Grid {
    pub width: i32,
    pub height: i32,
    cells: Vec<Option<Obj>>,
    /// `(box id, contents)`, sorted by box id: few levels put anything in a box. The entry
    /// follows the box's identity, so a carried box keeps its contents.
    contents: Vec<(u32, Obj)>,
    next_id: u32,
}

impl PartialEq for Grid {
    fn eq(&self, other: &Self) -> bool {
        (self.width, self.height) == (other.width, other.height)
            && self.cells == other.cells
            && self.contents == other.contents
    }
}

impl Grid {
    /// An empty grid.
    pub fn new(width: i32, height: i32) -> Self {
        assert!(width > 0 && height > 0, "grid size must be positive, got {width}x{height}");
        Self { width, height, cells: vec![None; (width * height) as usize], contents: Vec::new(), next_id: 1 }
    }

    /// A new object with a fresh identity (not yet placed anywhere).
    pub fn make(&mut self, kind: ObjKind, color: Color) -> Obj {
        let id = self.next_id;
        self.next_id += 1;
        Obj { id, kind, color, is_open: false, is_locked: false }
    }

    /// An object with a given identity (loading a saved world); later [`Grid::make`]
    /// calls never reuse it.
    pub fn make_with_id(&mut self, id: u32, kind: ObjKind, color: Color) -> Obj {
        self.next_id = self.next_id.max(id.saturating_add(1));
        Obj { id, kind, color, is_open: false, is_locked: false }
    }

    /// A new door with a fresh identity.
    pub fn make_door(&mut self, color: Color, is_open: bool, is_locked: bool) -> Obj {
        let mut door = self.make(ObjKind::Door, color);
        door.is_open = is_open;
        door.is_locked = is_locked;
        door
    }

    /// Where the entry of box `box_id` is in the side table (`Err`: where it would go).
    fn contents_slot(&self, box_id: u32) -> Result<usize, usize> {
        self.contents.binary_search_by_key(&box_id, |&(id, _)| id)
    }

    /// What toggling the box with identity `box_id` reveals, if anything.
    pub fn contents_of(&self, box_id: u32) -> Option<&Obj> {
        let i = self.contents_slot(box_id).ok()?;
        Some(&self.contents[i].1)
    }

    /// Puts `obj` inside the box with identity `box_id` (replacing what it held).
    pub fn put_inside(&mut self, box_id: u32, obj: Obj) {
        match self.contents_slot(box_id) {
            Ok(i) => self.contents[i].1 = obj,
            Err(i) => self.contents.insert(i, (box_id, obj)),
        }
    }

    /// Empties the box with identity `box_id`, returning what it held.
    pub fn take_contents(&mut self, box_id: u32) -> Option<Obj> {
        let i = self.contents_slot(box_id).ok()?;
        Some(self.contents.remove(i).1)
    }

    pub fn in_bounds(&self, x: i32, y: i32) -> bool {
        x >= 0 && y >= 0 && x < self.width && y < self.height
    }

    fn index(&self, x: i32, y: i32) -> usize {
        assert!(self.in_bounds(x, y), "cell ({x}, {y}) outside {}x{} grid", self.width, self.height);
        (y * self.width + x) as usize
    }

    /// The object at `(x, y)`; `None` for empty cells and for cells outside the grid.
    pub fn get(&self, x: i32, y: i32) -> Option<&Obj> {
        if !self.in_bounds(x, y) {
            return None;
        }
        self.cells[self.index(x, y)].as_ref()
    }

    pub fn get_mut(&mut self, x: i32, y: i32) -> Option<&mut Obj> {
        if !self.in_bounds(x, y) {
            return None;
        }
        let i = self.index(x, y);
        self.cells[i].as_mut()
    }

    /// Puts `obj` (or nothing) at `(x, y)`, returning what was there.
    pub fn set(&mut self, x: i32, y: i32, obj: Option<Obj>) -> Option<Obj> {
        let i = self.index(x, y);
        std::mem::replace(&mut self.cells[i], obj)
    }

    /// Removes and returns the object at `(x, y)`.
    pub fn take(&mut self, x: i32, y: i32) -> Option<Obj> {
        self.set(x, y, None)
    }

    /// Whether `(x, y)` holds a wall, or lies outside the grid (treated as wall).
    pub fn is_wall(&self, x: i32, y: i32) -> bool {
        !self.in_bounds(x, y) || self.get(x, y).is_some_and(|o| o.kind == ObjKind::Wall)
    }

    pub fn horz_wall(&mut self, x: i32, y: i32, length: i32) {
        for i in 0..length {
            let wall = self.make(ObjKind::Wall, Color::Grey);
            self.set(x + i, y, Some(wall));
        }
    }

    pub fn vert_wall(&mut self, x: i32, y: i32, length: i32) {
        for j in 0..length {
            let wall = self.make(ObjKind::Wall, Color::Grey);
            self.set(x, y + j, Some(wall));
        }
    }

    /// The outline of a `w`x`h` rectangle at `(x, y)` (`Grid.wall_rect`).
    pub fn wall_rect(&mut self, x: i32, y: i32, w: i32, h: i32) {
        self.horz_wall(x, y, w);
        self.horz_wall(x, y + h - 1, w);
        self.vert_wall(x, y, h);
        self.vert_wall(x + w - 1, y, h);
    }

    /// Every cell with an object, in minigrid's scan order (x outer, y inner).
    pub fn objects(&self) -> impl Iterator<Item = ((i32, i32), &Obj)> {
        (0..self.width).flat_map(move |x| (0..self.height).filter_map(move |y| self.get(x, y).map(|o| ((x, y), o))))
    }

    /// Where the object with identity `id` lies on the grid, if it does.
    pub fn find_id(&self, id: u32) -> Option<(i32, i32)> {
        self.objects().find(|(_, o)| o.id == id).map(|(p, _)| p)
    }
}

/// Direction vectors, indexed by `agent_dir` (minigrid's `DIR_TO_VEC`).
pub const DIR_TO_VEC: [(i32, i32); 4] = [(1, 0), (0, 1), (-1, 0), (0, -1)];

/// minigrid's primitive actions, in index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Left,
    Right,
    Forward,
    Pickup,
    Drop,
    Toggle,
    Done,
}

impl Action {
    pub const ALL: [Action; 7] =
        [Action::Left, Action::Right, Action::Forward, Action::Pickup, Action::Drop, Action::Toggle, Action::Done];

    pub fn name(self) -> &'static str {
        match self {
            Action::Left => "left",
            Action::Right => "right",
            Action::Forward => "forward",
            Action::Pickup => "pickup",
            Action::Drop => "drop",
            Action::Toggle => "toggle",
            Action::Done => "done",
        }
    }

    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The room layout of a `RoomGrid` (rooms of `room_size` cells sharing walls).
/// Location words in instructions ("on your left") apply to the agent's starting room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomGeom {
    pub room_size: i32,
    pub num_rows: i32,
    pub num_cols: i32,
}

impl RoomGeom {
    /// The `(top, size)` rectangle of the room holding `(x, y)` (`RoomGrid.room_from_pos`).
    pub fn room_rect(&self, x: i32, y: i32) -> ((i32, i32), (i32, i32)) {
        let step = self.room_size - 1;
        let i = (x / step).clamp(0, self.num_cols - 1);
        let j = (y / step).clamp(0, self.num_rows - 1);
        ((i * step, j * step), (self.room_size, self.room_size))
    }

    /// Whether `(x, y)` lies in the room rectangle `rect` (`Room.pos_inside`).
    pub fn inside(rect: ((i32, i32), (i32, i32)), x: i32, y: i32) -> bool {
        let ((tx, ty), (w, h)) = rect;
        x >= tx && y >= ty && x < tx + w && y < ty + h
    }
}

/// One BabyAI episode: the grid, the agent, and the instruction being verified.
#[derive(Debug, Clone)]
pub struct World {
    pub grid: Grid,
    pub agent_pos: (i32, i32),
    pub agent_dir: u8,
    pub carrying: Option<Obj>,
    pub step_count: u32,
    pub max_steps: u32,
    /// The instruction in words ("go to the red ball").
    pub mission: String,
    /// The instruction tree with its verifier state; `None` means no mission to verify.
    pub instr: Option<Instr>,
    pub rooms: RoomGeom,
    /// Level name, where the world came from a level generator.
    pub level: String,
    /// The episode ended by success, failure, goal or lava.
    pub terminated: bool,
    /// The step limit was reached.
    pub truncated: bool,
    /// Sum of rewards so far.
    pub total_reward: f32,
    /// minigrid would never finish generating this world: one of its attempts drew a room
    /// whose free cells all face an object, where minigrid's agent placement loops forever
    /// (`roomgrid.rs`, `RoomGrid::place_agent`); agentgym rejected that attempt instead.
    pub minigrid_hangs: bool,
}

impl World {
    /// An empty world of one room covering the grid; the agent at `agent_pos` facing east.
    pub fn new(grid: Grid, agent_pos: (i32, i32), rooms: RoomGeom) -> Self {
        Self {
            grid,
            agent_pos,
            agent_dir: 0,
            carrying: None,
            step_count: 0,
            max_steps: 0,
            mission: String::new(),
            instr: None,
            rooms,
            level: String::new(),
            terminated: false,
            truncated: false,
            total_reward: 0.0,
            minigrid_hangs: false,
        }
    }

    pub fn dir_vec(&self) -> (i32, i32) {
        DIR_TO_VEC[self.agent_dir as usize % 4]
    }

    /// The cell in front of the agent (`MiniGridEnv.front_pos`).
    pub fn front_pos(&self) -> (i32, i32) {
        let (dx, dy) = self.dir_vec();
        (self.agent_pos.0 + dx, self.agent_pos.1 + dy)
    }

    /// The object in front of the agent, if any.
    pub fn front_obj(&self) -> Option<&Obj> {
        let (x, y) = self.front_pos();
        self.grid.get(x, y)
    }

    /// Whether the episode is over (terminated or truncated).
    pub fn done(&self) -> bool {
        self.terminated || self.truncated
    }

    /// minigrid's success reward: `1 - 0.9 * step_count / max_steps`.
    pub fn success_reward(&self) -> f32 {
        let max_steps = self.max_steps.max(1) as f64;
        (1.0 - 0.9 * (self.step_count as f64 / max_steps)) as f32
    }

    /// Starts (or restarts) the verifier against the current world (`reset_verifier`).
    pub fn reset_verifier(&mut self) {
        if let Some(mut instr) = self.instr.take() {
            instr.reset_verifier(self);
            self.instr = Some(instr);
        }
    }

    /// One primitive action with minigrid's semantics, then the verifier.
    /// Returns `(reward, done)`; `done` is terminated or truncated. Stepping after the
    /// end is allowed and behaves as minigrid does (the world keeps evolving).
    pub fn step_primitive(&mut self, action: Action) -> (f32, bool) {
        self.step_count += 1;
        let mut reward = 0.0;
        let mut terminated = false;
        let (fx, fy) = self.front_pos();
        match action {
            Action::Left => self.agent_dir = (self.agent_dir + 3) % 4,
            Action::Right => self.agent_dir = (self.agent_dir + 1) % 4,
            Action::Forward => {
                let (can_enter, kind) = match self.grid.get(fx, fy) {
                    None => (self.grid.in_bounds(fx, fy), None),
                    Some(o) => (o.can_overlap(), Some(o.kind)),
                };
                if can_enter {
                    self.agent_pos = (fx, fy);
                }
                if kind == Some(ObjKind::Goal) {
                    terminated = true;
                    reward = self.success_reward();
                }
                if kind == Some(ObjKind::Lava) {
                    terminated = true;
                }
            }
            Action::Pickup => {
                let pickable = self.grid.get(fx, fy).is_some_and(Obj::can_pickup);
                if pickable && self.carrying.is_none() {
                    self.carrying = self.grid.take(fx, fy);
                }
            }
            Action::Drop => {
                if self.grid.in_bounds(fx, fy) && self.grid.get(fx, fy).is_none() {
                    if let Some(obj) = self.carrying.take() {
                        self.grid.set(fx, fy, Some(obj));
                    }
                }
            }
            Action::Toggle => self.toggle_front(),
            Action::Done => {}
        }
        if self.step_count >= self.max_steps {
            self.truncated = true;
        }
        if action == Action::Drop {
            self.update_objs_poss();
        }
        match self.verify(action) {
            Status::Success => {
                terminated = true;
                reward = self.success_reward();
            }
            Status::Failure => {
                terminated = true;
                reward = 0.0;
            }
            _ => {}
        }
        self.terminated |= terminated;
        self.total_reward += reward;
        (reward, terminated || self.step_count >= self.max_steps)
    }

    /// `toggle` on the front cell: doors open/close (locked ones need a key of their
    /// color and then open); a box is replaced by its contents.
    fn toggle_front(&mut self) {
        let (fx, fy) = self.front_pos();
        let key_color = self.carrying.as_ref().filter(|o| o.kind == ObjKind::Key).map(|o| o.color);
        let Some(obj) = self.grid.get_mut(fx, fy) else {
            return;
        };
        match obj.kind {
            ObjKind::Door => {
                if obj.is_locked {
                    if key_color == Some(obj.color) {
                        obj.is_locked = false;
                        obj.is_open = true;
                    }
                } else {
                    obj.is_open = !obj.is_open;
                }
            }
            ObjKind::Box => {
                let id = obj.id;
                let contents = self.grid.take_contents(id);
                self.grid.set(fx, fy, contents);
            }
            _ => {}
        }
    }

    fn update_objs_poss(&mut self) {
        if let Some(mut instr) = self.instr.take() {
            instr.update_objs_poss(self);
            self.instr = Some(instr);
        }
    }

    fn verify(&mut self, action: Action) -> Status {
        match self.instr.take() {
            Some(mut instr) => {
                let status = instr.verify(self, action);
                self.instr = Some(instr);
                status
            }
            None => Status::Continue,
        }
    }

    /// Every door on the grid in minigrid's scan order: `{pos, color, state}`.
    pub fn doors_json(&self) -> Value {
        let doors: Vec<Value> = self
            .grid
            .objects()
            .filter(|(_, o)| o.kind == ObjKind::Door)
            .map(|((x, y), o)| json!({"pos": [x, y], "color": o.color.name(), "state": o.door_state().name()}))
            .collect();
        Value::Array(doors)
    }

    /// The grid as text, one string per row, two characters per cell: a kind letter and a
    /// colour letter (`W` wall, `D` closed door, `d` open door, `L` locked door, `K` key, `A`
    /// ball, `B` box, `G` goal, `V` lava; colours `R G B P Y E`, E for grey), two spaces for an
    /// empty cell. The agent is not drawn (`agent_pos`, `agent_dir`). The hub draws the map
    /// from it.
    pub fn grid_rows(&self) -> Vec<String> {
        (0..self.grid.height)
            .map(|y| {
                let mut row = String::with_capacity(2 * self.grid.width as usize);
                for x in 0..self.grid.width {
                    match self.grid.get(x, y) {
                        None => row.push_str("  "),
                        Some(obj) => {
                            row.push(cell_letter(obj));
                            row.push(color_letter(obj.color));
                        }
                    }
                }
                row
            })
            .collect()
    }

    /// The state parity tests compare with minigrid after every step, and the grid's picture.
    pub fn state_json(&self) -> Value {
        json!({
            "grid": self.grid_rows(),
            "level": self.level,
            "mission": self.mission,
            "agent_pos": [self.agent_pos.0, self.agent_pos.1],
            "agent_dir": self.agent_dir,
            "carrying": self.carrying.as_ref().map(Obj::describe_json),
            "doors": self.doors_json(),
            "step_count": self.step_count,
            "max_steps": self.max_steps,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "done": self.done(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 5x5 room (walls around a 3x3 floor), agent in the middle facing east.
    fn room() -> World {
        let mut grid = Grid::new(5, 5);
        grid.wall_rect(0, 0, 5, 5);
        let mut w = World::new(grid, (2, 2), RoomGeom { room_size: 5, num_rows: 1, num_cols: 1 });
        w.max_steps = 10;
        w
    }

    fn put(w: &mut World, x: i32, y: i32, kind: ObjKind, color: Color) -> u32 {
        let obj = w.grid.make(kind, color);
        let id = obj.id;
        w.grid.set(x, y, Some(obj));
        id
    }

    #[test]
    fn turning_and_moving() {
        let mut w = room();
        w.step_primitive(Action::Left);
        assert_eq!(w.agent_dir, 3);
        w.step_primitive(Action::Right);
        w.step_primitive(Action::Right);
        assert_eq!(w.agent_dir, 1);
        w.step_primitive(Action::Forward);
        assert_eq!(w.agent_pos, (2, 3));
        // A wall blocks.
        w.step_primitive(Action::Forward);
        assert_eq!(w.agent_pos, (2, 3));
        assert_eq!(w.step_count, 5);
    }

    #[test]
    fn objects_block_and_pickup_drop() {
        let mut w = room();
        let ball = put(&mut w, 3, 2, ObjKind::Ball, Color::Red);
        w.step_primitive(Action::Forward);
        assert_eq!(w.agent_pos, (2, 2), "a ball is not overlappable");
        w.step_primitive(Action::Pickup);
        assert_eq!(w.carrying.as_ref().map(|o| o.id), Some(ball));
        assert!(w.grid.get(3, 2).is_none());
        // Second pickup with full hands does nothing.
        put(&mut w, 3, 2, ObjKind::Key, Color::Blue);
        w.step_primitive(Action::Pickup);
        assert_eq!(w.carrying.as_ref().map(|o| o.id), Some(ball));
        // Drop onto an occupied cell does nothing.
        w.step_primitive(Action::Drop);
        assert!(w.carrying.is_some());
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Drop);
        assert!(w.carrying.is_none());
        assert_eq!(w.grid.get(2, 1).map(|o| o.id), Some(ball));
    }

    #[test]
    fn doors_and_keys() {
        let mut w = room();
        let door = w.grid.make_door(Color::Yellow, false, true);
        w.grid.set(3, 2, Some(door));
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().unwrap().door_state(), DoorState::Locked);
        w.carrying = Some(w.grid.make(ObjKind::Key, Color::Red));
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().unwrap().door_state(), DoorState::Locked, "wrong key color");
        w.carrying = Some(w.grid.make(ObjKind::Key, Color::Yellow));
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().unwrap().door_state(), DoorState::Open);
        w.step_primitive(Action::Forward);
        assert_eq!(w.agent_pos, (3, 2), "open doors are overlappable");
        w.step_primitive(Action::Toggle); // facing the east wall: nothing happens
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Forward);
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().unwrap().door_state(), DoorState::Closed);
    }

    #[test]
    fn box_toggles_into_contents() {
        let mut w = room();
        let b = w.grid.make(ObjKind::Box, Color::Purple);
        let key = w.grid.make(ObjKind::Key, Color::Green);
        let key_id = key.id;
        w.grid.put_inside(b.id, key);
        w.grid.set(3, 2, Some(b));
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().map(|o| o.id), Some(key_id));
        assert!(w.grid.contents_of(b.id).is_none(), "the box is gone, and its entry with it");
        let empty = w.grid.make(ObjKind::Box, Color::Grey);
        w.grid.set(3, 2, Some(empty));
        w.step_primitive(Action::Toggle);
        assert!(w.front_obj().is_none());
        // A box carried away and put down elsewhere still holds its contents.
        let b = w.grid.make(ObjKind::Box, Color::Red);
        let ball = w.grid.make(ObjKind::Ball, Color::Blue);
        w.grid.put_inside(b.id, ball);
        w.grid.set(3, 2, Some(b));
        w.step_primitive(Action::Pickup);
        assert_eq!(w.carrying.map(|o| o.id), Some(b.id));
        w.step_primitive(Action::Left);
        w.step_primitive(Action::Drop);
        assert_eq!(w.front_obj().map(|o| o.id), Some(b.id));
        w.step_primitive(Action::Toggle);
        assert_eq!(w.front_obj().map(|o| o.id), Some(ball.id));
    }

    #[test]
    fn goal_lava_and_truncation() {
        let mut w = room();
        put(&mut w, 3, 2, ObjKind::Goal, Color::Green);
        let (r, done) = w.step_primitive(Action::Forward);
        assert!(done && w.terminated);
        assert!((r - (1.0 - 0.9 * 0.1)).abs() < 1e-6);
        let mut w = room();
        put(&mut w, 3, 2, ObjKind::Lava, Color::Red);
        let (r, done) = w.step_primitive(Action::Forward);
        assert!(done && r == 0.0 && w.agent_pos == (3, 2));
        let mut w = room();
        for i in 1..=10 {
            let (_, done) = w.step_primitive(Action::Left);
            assert_eq!(done, i == 10);
        }
        assert!(w.truncated && !w.terminated);
    }

    #[test]
    fn state_json_shape() {
        let mut w = room();
        let door = w.grid.make_door(Color::Red, false, false);
        w.grid.set(4, 2, Some(door));
        let s = w.state_json();
        assert_eq!(s["agent_pos"], json!([2, 2]));
        assert_eq!(s["carrying"], Value::Null);
        assert_eq!(s["doors"], json!([{"pos": [4, 2], "color": "red", "state": "closed"}]));
        assert_eq!(s["grid"], json!(["WEWEWEWEWE", "WE      WE", "WE      DR", "WE      WE", "WEWEWEWEWE"]));
    }
}
