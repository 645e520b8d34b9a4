//! A JSON exchange format for BabyAI worlds, so that a world built elsewhere (minigrid,
//! through `python/agentgym/envs/reference/minigrid_layout.py`) can be replayed here.
//!
//! ```text
//! {
//!   "format": "agentgym-babyai-layout/1",
//!   "level": "BabyAI-GoToRedBall-v0",            (optional)
//!   "width": 8, "height": 8,
//!   "rooms": {"room_size": 8, "num_rows": 1, "num_cols": 1},
//!   "cells": [{"pos": [x, y], "obj": OBJ}, ...],   (non-empty cells only)
//!   "agent": {"pos": [x, y], "dir": 0},
//!   "carrying": OBJ | null,
//!   "mission": "go to the red ball",
//!   "max_steps": 64, "step_count": 0,
//!   "instr": INSTR | null
//! }
//! OBJ   = {"id": 7, "type": "door", "color": "red", "is_open": false, "is_locked": true,
//!          "contains": OBJ | null}      (id, is_open, is_locked, contains optional)
//! INSTR = {"op": "goto", "desc": DESC} | {"op": "open"|"pickup", "desc": DESC, "strict": b}
//!       | {"op": "putnext", "desc_move": DESC, "desc_fixed": DESC, "strict": b}
//!       | {"op": "and", "a": INSTR, "b": INSTR} | {"op": "before"|"after", "a", "b", "strict"}
//! DESC  = {"type": t|null, "color": c|null, "loc": l|null,
//!          "obj_set": [id, ...], "obj_poss": [[x, y], ...]}   (obj_set/obj_poss optional)
//! ```
//!
//! The verifier starts fresh on load. When every description carries `obj_set` and
//! `obj_poss` (the exporter writes what minigrid's verifier holds after `reset`), they are
//! used as given; otherwise they are computed from the world, as minigrid's
//! `reset_verifier` would. Object ids only need to be unique within one layout.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::grid::{Color, Grid, Obj, ObjKind, RoomGeom, World};
use super::instr::Instr;
use crate::env::EnvError;

/// The `format` tag written and accepted.
pub const LAYOUT_FORMAT: &str = "agentgym-babyai-layout/1";

fn bad(message: impl std::fmt::Display) -> EnvError {
    EnvError::Data(format!("babyai layout: {message}"))
}

fn get<'a>(v: &'a Value, key: &str) -> Result<&'a Value, EnvError> {
    v.get(key).ok_or_else(|| bad(format!("missing field {key:?}")))
}

fn get_i32(v: &Value, key: &str) -> Result<i32, EnvError> {
    get(v, key)?
        .as_i64()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| bad(format!("field {key:?} is not an integer")))
}

fn get_pos(v: &Value, key: &str) -> Result<(i32, i32), EnvError> {
    pos_of(get(v, key)?).ok_or_else(|| bad(format!("field {key:?} is not [x, y]")))
}

fn pos_of(v: &Value) -> Option<(i32, i32)> {
    match v.as_array()?.as_slice() {
        [x, y] => Some((i32::try_from(x.as_i64()?).ok()?, i32::try_from(y.as_i64()?).ok()?)),
        _ => None,
    }
}

/// `o` as JSON, a box with what `grid` says it holds.
fn obj_to_json(grid: &Grid, o: &Obj) -> Value {
    json!({
        "id": o.id,
        "type": o.kind.name(),
        "color": o.color.name(),
        "is_open": o.is_open,
        "is_locked": o.is_locked,
        "contains": grid.contents_of(o.id).map(|inner| obj_to_json(grid, inner)),
    })
}

/// Reads objects, keeping their ids unique and the grid's id counter past them.
struct ObjReader<'a> {
    grid: &'a mut Grid,
    seen: BTreeSet<u32>,
}

impl ObjReader<'_> {
    fn read(&mut self, v: &Value) -> Result<Obj, EnvError> {
        let name = get(v, "type")?.as_str().ok_or_else(|| bad("object type is not a string"))?;
        let kind = ObjKind::from_name(name).ok_or_else(|| bad(format!("unknown object type {name:?}")))?;
        let color = match v.get("color").and_then(Value::as_str) {
            None => kind.default_color(),
            Some(c) => Color::from_name(c).ok_or_else(|| bad(format!("unknown color {c:?}")))?,
        };
        let flag = |key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
        let mut obj = match v.get("id").and_then(Value::as_u64) {
            None => self.grid.make(kind, color),
            Some(id) => {
                let id = u32::try_from(id).map_err(|_| bad(format!("object id {id} too large")))?;
                self.grid.make_with_id(id, kind, color)
            }
        };
        if !self.seen.insert(obj.id) {
            return Err(bad(format!("object id {} used twice", obj.id)));
        }
        obj.is_open = flag("is_open");
        obj.is_locked = flag("is_locked");
        if let Some(inner) = v.get("contains").filter(|c| !c.is_null()) {
            let inner = self.read(inner)?;
            self.grid.put_inside(obj.id, inner);
        }
        Ok(obj)
    }
}

/// Whether every object description in the tree carries its matched objects.
fn descs_have_sets(v: &Value) -> bool {
    match v.get("op").and_then(Value::as_str) {
        Some("and" | "before" | "after") => {
            v.get("a").is_some_and(descs_have_sets) && v.get("b").is_some_and(descs_have_sets)
        }
        _ => ["desc", "desc_move", "desc_fixed"]
            .iter()
            .filter_map(|k| v.get(*k))
            .all(|d| d.get("obj_set").is_some() && d.get("obj_poss").is_some()),
    }
}

impl World {
    /// Loads a world written by [`World::to_layout_json`] or by minigrid's exporter.
    pub fn from_layout_json(text: &str) -> Result<World, EnvError> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        if let Some(format) = v.get("format").and_then(Value::as_str) {
            if format != LAYOUT_FORMAT {
                return Err(bad(format!("format {format:?} is not {LAYOUT_FORMAT:?}")));
            }
        }
        let (width, height) = (get_i32(&v, "width")?, get_i32(&v, "height")?);
        if !(1..=256).contains(&width) || !(1..=256).contains(&height) {
            return Err(bad(format!("grid size {width}x{height} is out of range 1..=256")));
        }
        let mut grid = Grid::new(width, height);
        let (cells, carrying) = {
            let mut reader = ObjReader { grid: &mut grid, seen: BTreeSet::new() };
            let mut cells = Vec::new();
            for cell in get(&v, "cells")?.as_array().ok_or_else(|| bad("\"cells\" is not a list"))? {
                cells.push((get_pos(cell, "pos")?, reader.read(get(cell, "obj")?)?));
            }
            let carrying = match v.get("carrying") {
                None | Some(Value::Null) => None,
                Some(c) => Some(reader.read(c)?),
            };
            (cells, carrying)
        };
        for ((x, y), obj) in cells {
            if !grid.in_bounds(x, y) {
                return Err(bad(format!("cell ({x}, {y}) outside the {width}x{height} grid")));
            }
            if grid.set(x, y, Some(obj)).is_some() {
                return Err(bad(format!("cell ({x}, {y}) given twice")));
            }
        }
        let rooms = match v.get("rooms") {
            None | Some(Value::Null) => RoomGeom { room_size: width.max(height), num_rows: 1, num_cols: 1 },
            Some(r) => RoomGeom {
                room_size: get_i32(r, "room_size")?,
                num_rows: get_i32(r, "num_rows")?,
                num_cols: get_i32(r, "num_cols")?,
            },
        };
        if rooms.room_size < 3 || rooms.num_rows < 1 || rooms.num_cols < 1 {
            return Err(bad(format!("room geometry {rooms:?} is invalid")));
        }
        let agent = get(&v, "agent")?;
        let agent_pos = get_pos(agent, "pos")?;
        if !grid.in_bounds(agent_pos.0, agent_pos.1) {
            return Err(bad(format!("agent position {agent_pos:?} outside the grid")));
        }
        let dir = get_i32(agent, "dir")?;
        if !(0..4).contains(&dir) {
            return Err(bad(format!("agent direction {dir} is not 0..4")));
        }
        let mut world = World::new(grid, agent_pos, rooms);
        world.agent_dir = dir as u8;
        world.carrying = carrying;
        world.mission = v.get("mission").and_then(Value::as_str).unwrap_or_default().to_string();
        world.level = v.get("level").and_then(Value::as_str).unwrap_or_default().to_string();
        world.max_steps = u32::try_from(get_i32(&v, "max_steps")?)
            .ok()
            .filter(|&m| m > 0)
            .ok_or_else(|| bad("max_steps must be positive"))?;
        world.step_count = v.get("step_count").and_then(Value::as_u64).unwrap_or(0) as u32;
        if let Some(tree) = v.get("instr").filter(|t| !t.is_null()) {
            let mut instr = Instr::from_json(tree)?;
            if !descs_have_sets(tree) {
                instr.reset_verifier(&world);
            }
            world.instr = Some(instr);
        }
        Ok(world)
    }

    /// The world as layout JSON (see the module docs). Verifier progress (which parts of a
    /// sequence are done) is not saved: a loaded layout starts verifying afresh.
    pub fn to_layout_json(&self) -> String {
        let cells: Vec<Value> =
            self.grid.objects().map(|((x, y), o)| json!({"pos": [x, y], "obj": obj_to_json(&self.grid, o)})).collect();
        let v = json!({
            "format": LAYOUT_FORMAT,
            "level": self.level,
            "width": self.grid.width,
            "height": self.grid.height,
            "rooms": {
                "room_size": self.rooms.room_size,
                "num_rows": self.rooms.num_rows,
                "num_cols": self.rooms.num_cols,
            },
            "cells": cells,
            "agent": {"pos": [self.agent_pos.0, self.agent_pos.1], "dir": self.agent_dir},
            "carrying": self.carrying.as_ref().map(|o| obj_to_json(&self.grid, o)),
            "mission": self.mission,
            "max_steps": self.max_steps,
            "step_count": self.step_count,
            "instr": self.instr.as_ref().map(Instr::to_json),
        });
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::babyai::grid::Action;
    use crate::envs::babyai::levels::{generate, Worlds, LEVELS};
    use crate::rng::Rng;

    #[test]
    fn round_trip_every_level_and_replay() {
        let mut rng = Rng::new(5);
        for (idx, name) in LEVELS.iter().enumerate() {
            let world = generate(idx, 3, Worlds::AgentGym).unwrap();
            let loaded = World::from_layout_json(&world.to_layout_json()).unwrap();
            assert_eq!(loaded.grid, world.grid);
            assert_eq!(loaded.instr, world.instr, "{name}");
            assert_eq!((loaded.agent_pos, loaded.agent_dir), (world.agent_pos, world.agent_dir));
            assert_eq!((loaded.carrying, loaded.max_steps), (world.carrying, world.max_steps));
            let (mut a, mut b) = (world, loaded);
            for _ in 0..200 {
                let act = *rng.choice(&Action::ALL);
                assert_eq!(a.step_primitive(act), b.step_primitive(act));
                assert_eq!(a.state_json(), b.state_json());
            }
        }
    }

    #[test]
    fn minimal_layout_computes_the_verifier() {
        let text = r#"{
            "width": 5, "height": 3,
            "cells": [{"pos": [3, 1], "obj": {"type": "ball", "color": "red"}}],
            "agent": {"pos": [1, 1], "dir": 0},
            "mission": "go to the red ball", "max_steps": 10,
            "instr": {"op": "goto", "desc": {"type": "ball", "color": "red", "loc": null}}
        }"#;
        let mut w = World::from_layout_json(text).unwrap();
        assert!(!w.step_primitive(Action::Done).1);
        let (r, done) = w.step_primitive(Action::Forward);
        assert!(done && (r - (1.0 - 0.9 * 0.2)).abs() < 1e-6);
    }

    #[test]
    fn bad_layouts_are_errors() {
        for text in [
            "not json",
            r#"{"format": "other/2"}"#,
            r#"{"width": 5, "height": 5, "cells": [], "agent": {"pos": [9, 9], "dir": 0}, "max_steps": 5}"#,
            r#"{"width": 5, "height": 5, "cells": [], "agent": {"pos": [1, 1], "dir": 4}, "max_steps": 5}"#,
            r#"{"width": 5, "height": 5, "cells": [{"pos": [1, 1], "obj": {"type": "dragon"}}],
                "agent": {"pos": [2, 2], "dir": 0}, "max_steps": 5}"#,
            r#"{"width": 5, "height": 5, "cells": [{"pos": [1, 1], "obj": {"id": 3, "type": "ball"}},
                {"pos": [1, 2], "obj": {"id": 3, "type": "key"}}], "agent": {"pos": [2, 2], "dir": 0},
                "max_steps": 5}"#,
            r#"{"width": 5, "height": 5, "cells": [], "agent": {"pos": [2, 2], "dir": 0}, "max_steps": 5,
                "instr": {"op": "jump"}}"#,
        ] {
            assert!(World::from_layout_json(text).is_err(), "accepted: {text}");
        }
    }
}
