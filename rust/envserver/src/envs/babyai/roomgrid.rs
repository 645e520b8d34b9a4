//! minigrid's `RoomGrid`: a grid of square rooms sharing walls, with the helpers BabyAI
//! levels are written with (doors between rooms, objects in rooms, distractors,
//! connectivity, agent placement).
//!
//! The random draws follow minigrid's rules (same ranges, same rejection conditions, same
//! order of decisions). On [`Draws::Numpy`] they are numpy's draws, so a world is minigrid's
//! for the same seed; on [`Draws::Own`] they come from agentgym's own [`Rng`].

use super::grid::{Color, Grid, Obj, ObjKind, RoomGeom, World};
use crate::np_rng::NpRandom;
use crate::rng::Rng;

/// The random stream a level is generated from.
#[derive(Debug, Clone)]
pub enum Draws {
    /// numpy's default generator, as minigrid draws from it (`np_random.integers`,
    /// `np_random.uniform`).
    Numpy(NpRandom),
    /// agentgym's own stream (the worlds of `worlds="own"`).
    Own(Rng),
}

impl Draws {
    /// Uniform in `low..high`.
    pub fn int(&mut self, low: i64, high: i64) -> i64 {
        match self {
            Draws::Numpy(r) => r.integers(low, high),
            Draws::Own(r) => r.int(low, high),
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn float(&mut self) -> f64 {
        match self {
            Draws::Numpy(r) => r.uniform(0.0, 1.0),
            Draws::Own(r) => (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64,
        }
    }
}

impl From<NpRandom> for Draws {
    fn from(rng: NpRandom) -> Self {
        Draws::Numpy(rng)
    }
}

impl From<Rng> for Draws {
    fn from(rng: Rng) -> Self {
        Draws::Own(rng)
    }
}

/// A rejected sample: the level generator starts over (minigrid's `RejectSampling` and
/// the `RecursionError`s its samplers raise when they give up).
#[derive(Debug, Clone, PartialEq)]
pub struct Reject(pub String);

pub type Gen<T> = Result<T, Reject>;

/// What sits in one of a room's four wall slots (right, down, left, up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorSlot {
    None,
    /// A door, by object identity.
    Door(u32),
    /// The wall was removed (`remove_wall`).
    Opening,
}

/// One room: its rectangle (walls included), door slots and contents.
#[derive(Debug, Clone)]
pub struct Room {
    pub top: (i32, i32),
    pub size: (i32, i32),
    pub doors: [DoorSlot; 4],
    pub door_pos: [Option<(i32, i32)>; 4],
    /// Index into [`RoomGrid::rooms`] of the neighbour on each side.
    pub neighbors: [Option<usize>; 4],
    /// Set by `add_door` to the door's locked flag (minigrid's `Room.locked`).
    pub locked: bool,
    /// `(kind, color)` of the objects added with `add_object`/`place_in_room`.
    pub objs: Vec<(ObjKind, Color)>,
}

impl Room {
    pub fn pos_inside(&self, x: i32, y: i32) -> bool {
        RoomGeom::inside((self.top, self.size), x, y)
    }
}

/// How minigrid's agent placement fares in a room ([`RoomGrid::place_agent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    NoFreeCell,
    Ends,
    Endless,
}

/// A placed object, as the generators keep track of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub id: u32,
    pub kind: ObjKind,
    pub color: Color,
    pub pos: (i32, i32),
}

/// A world under construction plus its rooms and random stream.
pub struct RoomGrid {
    pub world: World,
    /// Rooms in row-major order: room `(i, j)` (column `i`, row `j`) is `j * num_cols + i`.
    pub rooms: Vec<Room>,
    pub rng: Draws,
    /// Set when [`RoomGrid::place_agent`] met a room where minigrid's placement never ends.
    pub endless_placement: bool,
}

impl RoomGrid {
    /// Walls of every room, door positions drawn on every inner wall, the agent in the
    /// middle of the grid facing east (minigrid's `RoomGrid._gen_grid`).
    pub fn new(room_size: i32, num_rows: i32, num_cols: i32, rng: impl Into<Draws>) -> Self {
        assert!(room_size >= 3 && num_rows > 0 && num_cols > 0);
        let step = room_size - 1;
        let (width, height) = (step * num_cols + 1, step * num_rows + 1);
        let mut grid = Grid::new(width, height);
        let mut rooms = Vec::new();
        for j in 0..num_rows {
            for i in 0..num_cols {
                let top = (i * step, j * step);
                grid.wall_rect(top.0, top.1, room_size, room_size);
                rooms.push(Room {
                    top,
                    size: (room_size, room_size),
                    doors: [DoorSlot::None; 4],
                    door_pos: [None; 4],
                    neighbors: [None; 4],
                    locked: false,
                    objs: Vec::new(),
                });
            }
        }
        let geom = RoomGeom { room_size, num_rows, num_cols };
        let center = ((num_cols / 2) * step + room_size / 2, (num_rows / 2) * step + room_size / 2);
        let mut rg =
            RoomGrid { world: World::new(grid, center, geom), rooms, rng: rng.into(), endless_placement: false };
        rg.draw_door_positions();
        rg
    }

    fn draw_door_positions(&mut self) {
        let geom = self.world.rooms;
        for j in 0..geom.num_rows {
            for i in 0..geom.num_cols {
                let idx = self.room_index(i, j);
                let (top, size) = (self.rooms[idx].top, self.rooms[idx].size);
                let (x_l, y_l) = (top.0 + 1, top.1 + 1);
                let (x_m, y_m) = (top.0 + size.0 - 1, top.1 + size.1 - 1);
                if i < geom.num_cols - 1 {
                    self.rooms[idx].neighbors[0] = Some(self.room_index(i + 1, j));
                    let y = self.rand_int(y_l, y_m);
                    self.rooms[idx].door_pos[0] = Some((x_m, y));
                }
                if j < geom.num_rows - 1 {
                    self.rooms[idx].neighbors[1] = Some(self.room_index(i, j + 1));
                    let x = self.rand_int(x_l, x_m);
                    self.rooms[idx].door_pos[1] = Some((x, y_m));
                }
                if i > 0 {
                    let left = self.room_index(i - 1, j);
                    self.rooms[idx].neighbors[2] = Some(left);
                    self.rooms[idx].door_pos[2] = self.rooms[left].door_pos[0];
                }
                if j > 0 {
                    let up = self.room_index(i, j - 1);
                    self.rooms[idx].neighbors[3] = Some(up);
                    self.rooms[idx].door_pos[3] = self.rooms[up].door_pos[1];
                }
            }
        }
    }

    pub fn num_rows(&self) -> i32 {
        self.world.rooms.num_rows
    }

    pub fn num_cols(&self) -> i32 {
        self.world.rooms.num_cols
    }

    pub fn room_index(&self, i: i32, j: i32) -> usize {
        assert!(i >= 0 && i < self.num_cols() && j >= 0 && j < self.num_rows());
        (j * self.num_cols() + i) as usize
    }

    /// The room holding `(x, y)` (`room_from_pos`).
    pub fn room_index_from_pos(&self, x: i32, y: i32) -> usize {
        let step = self.world.rooms.room_size - 1;
        let i = (x / step).min(self.num_cols() - 1);
        let j = (y / step).min(self.num_rows() - 1);
        self.room_index(i, j)
    }

    pub fn room(&self, i: i32, j: i32) -> &Room {
        &self.rooms[self.room_index(i, j)]
    }

    // ---- random draws (minigrid's `_rand_*` helpers) ----

    /// Uniform in `low..high`.
    pub fn rand_int(&mut self, low: i32, high: i32) -> i32 {
        self.rng.int(low as i64, high as i64) as i32
    }

    /// `integers(0, 2) == 0`.
    pub fn rand_bool(&mut self) -> bool {
        self.rand_int(0, 2) == 0
    }

    /// Uniform in `[0, 1)`.
    pub fn rand_float(&mut self) -> f64 {
        self.rng.float()
    }

    pub fn rand_elem<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.rand_int(0, items.len() as i32) as usize].clone()
    }

    /// `n` distinct elements, drawn one by one (`_rand_subset`).
    pub fn rand_subset<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T> {
        assert!(n <= items.len());
        let mut rest = items.to_vec();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let k = self.rand_int(0, rest.len() as i32) as usize;
            out.push(rest.remove(k));
        }
        out
    }

    /// A color from minigrid's name-sorted `COLOR_NAMES`.
    pub fn rand_color(&mut self) -> Color {
        self.rand_elem(&Color::BY_NAME)
    }

    // ---- placement ----

    /// An empty cell in the rectangle `top`/`size` (clipped to the grid) that is not the
    /// agent's cell and, with `avoid_agent`, not next to the agent (`place_obj` with
    /// `reject_next_to`); `obj` is put there. Gives up after `max_tries` draws.
    pub fn place_obj(
        &mut self,
        obj: Option<Obj>,
        top: (i32, i32),
        size: (i32, i32),
        avoid_agent: bool,
        max_tries: Option<u32>,
    ) -> Gen<(i32, i32)> {
        let top = (top.0.max(0), top.1.max(0));
        let (w, h) = (self.world.grid.width, self.world.grid.height);
        let mut tries = 0u32;
        loop {
            if max_tries.is_some_and(|m| tries > m) {
                return Err(Reject("rejection sampling failed in place_obj".into()));
            }
            tries += 1;
            let x = self.rand_int(top.0, (top.0 + size.0).min(w));
            let y = self.rand_int(top.1, (top.1 + size.1).min(h));
            if self.world.grid.get(x, y).is_some() || (x, y) == self.world.agent_pos {
                continue;
            }
            let (ax, ay) = self.world.agent_pos;
            if avoid_agent && (ax - x).abs() + (ay - y).abs() < 2 {
                continue;
            }
            if let Some(obj) = obj {
                self.world.grid.set(x, y, Some(obj));
            }
            return Ok((x, y));
        }
    }

    /// Puts `obj` in room `(i, j)`, not next to the agent (`place_in_room`).
    pub fn place_in_room(&mut self, i: i32, j: i32, obj: Obj) -> Gen<Placed> {
        let idx = self.room_index(i, j);
        let (top, size) = (self.rooms[idx].top, self.rooms[idx].size);
        let (id, kind, color) = (obj.id, obj.kind, obj.color);
        let pos = self.place_obj(Some(obj), top, size, true, Some(1000))?;
        self.rooms[idx].objs.push((kind, color));
        Ok(Placed { id, kind, color, pos })
    }

    /// A new key, ball or box (random kind and color where not given) in room `(i, j)`.
    pub fn add_object(&mut self, i: i32, j: i32, kind: Option<ObjKind>, color: Option<Color>) -> Gen<Placed> {
        let kind = match kind {
            Some(k) => k,
            None => self.rand_elem(&[ObjKind::Key, ObjKind::Ball, ObjKind::Box]),
        };
        let color = match color {
            Some(c) => c,
            None => self.rand_color(),
        };
        assert!(matches!(kind, ObjKind::Key | ObjKind::Ball | ObjKind::Box));
        let obj = self.world.grid.make(kind, color);
        self.place_in_room(i, j, obj)
    }

    /// A door in wall `door_idx` of room `(i, j)` (random free wall with a neighbour,
    /// random color, random lock where not given). Sets the room's `locked` flag.
    pub fn add_door(
        &mut self,
        i: i32,
        j: i32,
        door_idx: Option<usize>,
        color: Option<Color>,
        locked: Option<bool>,
    ) -> Placed {
        let idx = self.room_index(i, j);
        let door_idx = match door_idx {
            Some(d) => d,
            None => loop {
                let d = self.rand_int(0, 4) as usize;
                let room = &self.rooms[idx];
                if room.neighbors[d].is_some() && room.doors[d] == DoorSlot::None {
                    break d;
                }
            },
        };
        let color = match color {
            Some(c) => c,
            None => self.rand_color(),
        };
        let locked = match locked {
            Some(l) => l,
            None => self.rand_bool(),
        };
        assert_eq!(self.rooms[idx].doors[door_idx], DoorSlot::None, "door already exists");
        self.rooms[idx].locked = locked;
        let door = self.world.grid.make_door(color, false, locked);
        let id = door.id;
        let pos = self.rooms[idx].door_pos[door_idx].expect("door on an outer wall");
        self.world.grid.set(pos.0, pos.1, Some(door));
        let neighbor = self.rooms[idx].neighbors[door_idx].expect("door without neighbour");
        self.rooms[idx].doors[door_idx] = DoorSlot::Door(id);
        self.rooms[neighbor].doors[(door_idx + 2) % 4] = DoorSlot::Door(id);
        Placed { id, kind: ObjKind::Door, color, pos }
    }

    /// Removes the wall `wall_idx` of room `(i, j)`, joining it to its neighbour.
    pub fn remove_wall(&mut self, i: i32, j: i32, wall_idx: usize) {
        let idx = self.room_index(i, j);
        let room = &self.rooms[idx];
        assert_eq!(room.doors[wall_idx], DoorSlot::None, "door exists on this wall");
        let neighbor = room.neighbors[wall_idx].expect("invalid wall");
        let ((tx, ty), (w, h)) = (room.top, room.size);
        let cells: Vec<(i32, i32)> = match wall_idx {
            0 => (1..h - 1).map(|k| (tx + w - 1, ty + k)).collect(),
            1 => (1..w - 1).map(|k| (tx + k, ty + h - 1)).collect(),
            2 => (1..h - 1).map(|k| (tx, ty + k)).collect(),
            _ => (1..w - 1).map(|k| (tx + k, ty)).collect(),
        };
        for (x, y) in cells {
            self.world.grid.set(x, y, None);
        }
        self.rooms[idx].doors[wall_idx] = DoorSlot::Opening;
        self.rooms[neighbor].doors[(wall_idx + 2) % 4] = DoorSlot::Opening;
    }

    /// Places the agent in room `(i, j)` (random where not given), with a random direction,
    /// not facing an object other than a wall (`RoomGrid.place_agent`).
    ///
    /// minigrid draws a free cell (giving up after 1,001 draws, which rejects the sample) and
    /// a direction until the agent faces nothing or a wall. In a room with free cells that all
    /// face an object on every side, that never ends: such a room is rejected before any draw
    /// and [`RoomGrid::endless_placement`] is set. A room without a free cell makes minigrid's
    /// 1,001 draws before it is rejected, as there, so the draws that follow stay minigrid's.
    pub fn place_agent(&mut self, i: Option<i32>, j: Option<i32>) -> Gen<(i32, i32)> {
        let i = match i {
            Some(i) => i,
            None => self.rand_int(0, self.num_cols()),
        };
        let j = match j {
            Some(j) => j,
            None => self.rand_int(0, self.num_rows()),
        };
        let idx = self.room_index(i, j);
        let (top, size) = (self.rooms[idx].top, self.rooms[idx].size);
        if self.placement(top, size) == Placement::Endless {
            self.endless_placement = true;
            return Err(Reject("every free cell of the room faces an object on all sides".into()));
        }
        loop {
            self.world.agent_pos = (-1, -1);
            let pos = self.place_obj(None, top, size, false, Some(1000))?;
            self.world.agent_pos = pos;
            self.world.agent_dir = self.rand_int(0, 4) as u8;
            match self.world.front_obj() {
                None => return Ok(pos),
                Some(o) if o.kind == ObjKind::Wall => return Ok(pos),
                Some(_) => {}
            }
        }
    }

    /// How minigrid's agent placement ends in the rectangle: no free cell (its cell draws give
    /// up), a free cell with a side whose neighbour is empty or a wall (it succeeds), or free
    /// cells that all face objects (it never ends).
    fn placement(&self, top: (i32, i32), size: (i32, i32)) -> Placement {
        let grid = &self.world.grid;
        let (x0, y0) = (top.0.max(0), top.1.max(0));
        let (x1, y1) = ((top.0 + size.0).min(grid.width), (top.1 + size.1).min(grid.height));
        let open = |x: i32, y: i32| grid.get(x, y).is_none_or(|o| o.kind == ObjKind::Wall);
        let free: Vec<(i32, i32)> =
            (x0..x1).flat_map(|x| (y0..y1).map(move |y| (x, y))).filter(|&(x, y)| grid.get(x, y).is_none()).collect();
        let spot =
            |&(x, y): &(i32, i32)| [(1, 0), (0, 1), (-1, 0), (0, -1)].iter().any(|(dx, dy)| open(x + dx, y + dy));
        match (free.is_empty(), free.iter().any(spot)) {
            (true, _) => Placement::NoFreeCell,
            (false, true) => Placement::Ends,
            (false, false) => Placement::Endless,
        }
    }

    /// Rooms reachable from the agent's room through doors and openings.
    fn reachable_rooms(&self) -> Vec<bool> {
        let start = self.room_index_from_pos(self.world.agent_pos.0, self.world.agent_pos.1);
        let mut seen = vec![false; self.rooms.len()];
        let mut stack = vec![start];
        while let Some(r) = stack.pop() {
            if std::mem::replace(&mut seen[r], true) {
                continue;
            }
            for k in 0..4 {
                if self.rooms[r].doors[k] != DoorSlot::None {
                    stack.extend(self.rooms[r].neighbors[k]);
                }
            }
        }
        seen
    }

    /// Adds unlocked doors (colors from `door_colors`) until every room is reachable from
    /// the agent's room, never through a locked room (`connect_all`).
    pub fn connect_all(&mut self, door_colors: &[Color], max_itrs: u32) -> Gen<Vec<Placed>> {
        let mut added = Vec::new();
        let mut itrs = 0;
        loop {
            if itrs > max_itrs {
                return Err(Reject("connect_all failed".into()));
            }
            itrs += 1;
            if self.reachable_rooms().iter().all(|&r| r) {
                return Ok(added);
            }
            let i = self.rand_int(0, self.num_cols());
            let j = self.rand_int(0, self.num_rows());
            let k = self.rand_int(0, 4) as usize;
            let idx = self.room_index(i, j);
            let room = &self.rooms[idx];
            if room.door_pos[k].is_none() || room.doors[k] != DoorSlot::None {
                continue;
            }
            let neighbor = room.neighbors[k].expect("door position without neighbour");
            if room.locked || self.rooms[neighbor].locked {
                continue;
            }
            let color = self.rand_elem(door_colors);
            added.push(self.add_door(i, j, Some(k), Some(color), Some(false)));
        }
    }

    /// [`RoomGrid::connect_all`] with every color and minigrid's iteration cap.
    pub fn connect_all_default(&mut self) -> Gen<Vec<Placed>> {
        self.connect_all(&Color::BY_NAME, 5000)
    }

    /// `n` random keys/balls/boxes in room `(i, j)` (random rooms where not given); with
    /// `all_unique`, no two objects in the level share kind and color (`add_distractors`).
    pub fn add_distractors(&mut self, i: Option<i32>, j: Option<i32>, n: usize, all_unique: bool) -> Gen<Vec<Placed>> {
        let mut existing: Vec<(ObjKind, Color)> = self.rooms.iter().flat_map(|r| r.objs.iter().copied()).collect();
        let mut dists = Vec::with_capacity(n);
        while dists.len() < n {
            let color = self.rand_elem(&Color::BY_NAME);
            let kind = self.rand_elem(&[ObjKind::Key, ObjKind::Ball, ObjKind::Box]);
            if all_unique && existing.contains(&(kind, color)) {
                continue;
            }
            let ri = match i {
                Some(i) => i,
                None => self.rand_int(0, self.num_cols()),
            };
            let rj = match j {
                Some(j) => j,
                None => self.rand_int(0, self.num_rows()),
            };
            dists.push(self.add_object(ri, rj, Some(kind), Some(color))?);
            existing.push((kind, color));
        }
        Ok(dists)
    }

    /// Opens every door (`open_all_doors`).
    pub fn open_all_doors(&mut self) {
        let ids: Vec<u32> = self
            .rooms
            .iter()
            .flat_map(|r| r.doors)
            .filter_map(|d| if let DoorSlot::Door(id) = d { Some(id) } else { None })
            .collect();
        for id in ids {
            if let Some((x, y)) = self.world.grid.find_id(id) {
                if let Some(door) = self.world.grid.get_mut(x, y) {
                    door.is_open = true;
                }
            }
        }
    }

    /// Whether every non-wall object can be reached from the agent without moving
    /// anything (doors count as passable, whatever their state).
    pub fn objs_reachable(&self) -> bool {
        let grid = &self.world.grid;
        let mut reach = vec![false; (grid.width * grid.height) as usize];
        let mut stack = vec![self.world.agent_pos];
        while let Some((x, y)) = stack.pop() {
            if !grid.in_bounds(x, y) || reach[(y * grid.width + x) as usize] {
                continue;
            }
            reach[(y * grid.width + x) as usize] = true;
            if grid.get(x, y).is_some_and(|o| o.kind != ObjKind::Door) {
                continue;
            }
            stack.extend([(x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)]);
        }
        grid.objects().filter(|(_, o)| o.kind != ObjKind::Wall).all(|((x, y), _)| reach[(y * grid.width + x) as usize])
    }

    /// Rejects the sample unless every object is reachable (`check_objs_reachable`).
    pub fn check_objs_reachable(&self) -> Gen<()> {
        if self.objs_reachable() {
            Ok(())
        } else {
            Err(Reject("unreachable object".into()))
        }
    }

    /// Colors of the locked doors.
    pub fn locked_door_colors(&self) -> Vec<Color> {
        self.world
            .grid
            .objects()
            .filter(|(_, o)| o.kind == ObjKind::Door && o.is_locked)
            .map(|(_, o)| o.color)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walls_doors_and_geometry() {
        let rg = RoomGrid::new(8, 3, 3, Rng::new(1));
        assert_eq!((rg.world.grid.width, rg.world.grid.height), (22, 22));
        assert_eq!(rg.world.agent_pos, (11, 11));
        assert!(rg.world.grid.is_wall(7, 0) && rg.world.grid.is_wall(7, 12));
        let r = rg.room(0, 0);
        let (x, y) = r.door_pos[0].unwrap();
        assert_eq!(x, 7);
        assert!((1..7).contains(&y));
        assert_eq!(rg.room(1, 0).door_pos[2], r.door_pos[0]);
        assert_eq!(rg.room_index_from_pos(21, 21), 8);
    }

    /// A 5x5 room whose 3x3 interior holds balls everywhere but at `free`.
    fn crowded(free: &[(i32, i32)]) -> RoomGrid {
        let mut rg = RoomGrid::new(5, 1, 1, NpRandom::new(7));
        for x in 1..4 {
            for y in (1..4).filter(|&y| !free.contains(&(x, y))) {
                let ball = rg.world.grid.make(ObjKind::Ball, Color::Red);
                rg.world.grid.set(x, y, Some(ball));
            }
        }
        rg
    }

    #[test]
    fn a_room_whose_free_cells_all_face_objects_is_rejected_before_any_draw() {
        // The only free cell, the centre, faces a ball on every side: minigrid loops forever.
        let mut rg = crowded(&[(2, 2)]);
        let before = rg.rng.clone();
        assert!(rg.place_agent(Some(0), Some(0)).is_err());
        assert!(rg.endless_placement);
        let (Draws::Numpy(mut a), Draws::Numpy(mut b)) = (before, rg.rng.clone()) else { unreachable!() };
        assert_eq!(a.integers(0, 1 << 30), b.integers(0, 1 << 30), "no draw was made");
        // With a corner freed the agent has a spot (facing the wall) and is placed.
        rg.world.grid.set(1, 1, None);
        let pos = rg.place_agent(Some(0), Some(0)).unwrap();
        let front = rg.world.front_obj();
        assert!(front.is_none() || front.unwrap().kind == ObjKind::Wall, "agent at {pos:?} faces {front:?}");
    }

    #[test]
    fn a_room_without_a_free_cell_gives_up_after_minigrids_1001_draws() {
        let mut rg = crowded(&[]);
        let Draws::Numpy(mut expected) = rg.rng.clone() else { unreachable!() };
        assert!(rg.place_agent(Some(0), Some(0)).is_err());
        assert!(!rg.endless_placement);
        for _ in 0..1001 {
            expected.integers(0, 5);
            expected.integers(0, 5);
        }
        let Draws::Numpy(mut after) = rg.rng.clone() else { unreachable!() };
        assert_eq!(after.integers(0, 1 << 30), expected.integers(0, 1 << 30));
    }

    #[test]
    fn connect_all_reaches_every_room() {
        for seed in 0..20 {
            let mut rg = RoomGrid::new(6, 3, 3, Rng::new(seed));
            rg.place_agent(None, None).unwrap();
            rg.connect_all_default().unwrap();
            assert!(rg.reachable_rooms().iter().all(|&r| r));
            let front = rg.world.front_obj();
            assert!(front.is_none() || front.unwrap().kind == ObjKind::Wall);
        }
    }

    #[test]
    fn distractors_unique_and_away_from_agent() {
        let mut rg = RoomGrid::new(8, 1, 1, Rng::new(3));
        rg.place_agent(None, None).unwrap();
        let d = rg.add_distractors(None, None, 10, true).unwrap();
        for (a, p) in d.iter().enumerate() {
            let (ax, ay) = rg.world.agent_pos;
            assert!((ax - p.pos.0).abs() + (ay - p.pos.1).abs() >= 2);
            assert!(d[..a].iter().all(|q| (q.kind, q.color) != (p.kind, p.color)));
            assert_eq!(rg.world.grid.get(p.pos.0, p.pos.1).unwrap().id, p.id);
        }
    }

    #[test]
    fn remove_wall_opens_the_wall() {
        let mut rg = RoomGrid::new(5, 1, 2, Rng::new(0));
        rg.remove_wall(0, 0, 0);
        assert!((1..4).all(|y| rg.world.grid.get(4, y).is_none()));
        assert_eq!(rg.room(1, 0).doors[2], DoorSlot::Opening);
    }
}
