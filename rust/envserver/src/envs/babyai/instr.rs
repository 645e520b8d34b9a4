//! BabyAI instructions and their verifiers (minigrid `envs/babyai/core/verifier.py`).
//!
//! Verifiers are small state machines run after every primitive action. Their quirks are
//! kept on purpose, because parity with minigrid depends on them: object positions are
//! re-read only after a `drop`, `Pickup` remembers what was carried after the previous
//! verified step, and sequence instructions only verify their second part once the first
//! has succeeded. The `BABYAI_DONE_ACTIONS` mode of minigrid is not modelled (it is off
//! by default there).

use serde_json::{json, Value};

use super::grid::{Action, Color, ObjKind, RoomGeom, World, DIR_TO_VEC};
use crate::env::EnvError;

/// What a verifier says after a step. `NotStarted` is minigrid's initial `False`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    NotStarted,
    Continue,
    Success,
    Failure,
}

/// Location words, relative to the agent's starting position and direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    Left,
    Right,
    Front,
    Behind,
}

impl Loc {
    /// minigrid's `LOC_NAMES` order.
    pub const ALL: [Loc; 4] = [Loc::Left, Loc::Right, Loc::Front, Loc::Behind];

    pub fn name(self) -> &'static str {
        match self {
            Loc::Left => "left",
            Loc::Right => "right",
            Loc::Front => "front",
            Loc::Behind => "behind",
        }
    }

    pub fn from_name(name: &str) -> Option<Loc> {
        Loc::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// A description of a set of objects ("a red ball", "the door on your left") and the
/// objects it currently designates.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjDesc {
    pub kind: Option<ObjKind>,
    pub color: Option<Color>,
    pub loc: Option<Loc>,
    /// Identities of the matching objects (fixed at the verifier's reset).
    pub obj_set: Vec<u32>,
    /// Their positions, as last read (at reset and after each drop).
    pub obj_poss: Vec<(i32, i32)>,
}

impl ObjDesc {
    pub fn new(kind: Option<ObjKind>, color: Option<Color>, loc: Option<Loc>) -> Self {
        Self { kind, color, loc, obj_set: Vec::new(), obj_poss: Vec::new() }
    }

    /// Re-reads the matching objects (`find_matching_objs`). With `use_location`, the set
    /// is rebuilt from the description; without, only the tracked objects' positions are.
    pub fn find_matching(&mut self, w: &World, use_location: bool) {
        if use_location {
            self.obj_set.clear();
        }
        self.obj_poss.clear();
        let room = w.rooms.room_rect(w.agent_pos.0, w.agent_pos.1);
        for ((x, y), obj) in w.grid.objects() {
            if !use_location && !self.obj_set.contains(&obj.id) {
                continue;
            }
            if self.kind.is_some_and(|k| k != obj.kind) || self.color.is_some_and(|c| c != obj.color) {
                continue;
            }
            if use_location {
                if let Some(loc) = self.loc {
                    if !RoomGeom::inside(room, x, y) || !loc_matches(w, loc, x, y) {
                        continue;
                    }
                }
                self.obj_set.push(obj.id);
            }
            self.obj_poss.push((x, y));
        }
    }

    /// The description in words, as minigrid says it ("the red ball", "a door on your left").
    /// Call after [`ObjDesc::find_matching`] so that the article is right.
    pub fn surface(&self) -> String {
        let mut s = self.kind.map_or("object", ObjKind::name).to_string();
        if let Some(c) = self.color {
            s = format!("{} {s}", c.name());
        }
        match self.loc {
            Some(Loc::Front) => s.push_str(" in front of you"),
            Some(Loc::Behind) => s.push_str(" behind you"),
            Some(l) => s = format!("{s} on your {}", l.name()),
            None => {}
        }
        let article = if self.obj_set.len() > 1 { "a" } else { "the" };
        format!("{article} {s}")
    }

    fn to_json(&self) -> Value {
        let poss: Vec<[i32; 2]> = self.obj_poss.iter().map(|&(x, y)| [x, y]).collect();
        json!({
            "type": self.kind.map(ObjKind::name),
            "color": self.color.map(Color::name),
            "loc": self.loc.map(Loc::name),
            "obj_set": self.obj_set,
            "obj_poss": poss,
        })
    }

    fn from_json(v: &Value) -> Result<Self, EnvError> {
        let field = |key: &str| -> Result<Option<&str>, EnvError> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(bad(format!("object description field {key:?}: {other}"))),
            }
        };
        let kind = field("type")?
            .map(|s| ObjKind::from_name(s).ok_or_else(|| bad(format!("unknown object type {s:?}"))))
            .transpose()?;
        let color = field("color")?
            .map(|s| Color::from_name(s).ok_or_else(|| bad(format!("unknown color {s:?}"))))
            .transpose()?;
        let loc = field("loc")?
            .map(|s| Loc::from_name(s).ok_or_else(|| bad(format!("unknown location {s:?}"))))
            .transpose()?;
        let mut desc = ObjDesc::new(kind, color, loc);
        if let Some(ids) = v.get("obj_set").and_then(Value::as_array) {
            desc.obj_set = ids
                .iter()
                .map(|id| id.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("obj_set is not a list of ids: {ids:?}")))?;
        }
        if let Some(poss) = v.get("obj_poss").and_then(Value::as_array) {
            desc.obj_poss = poss
                .iter()
                .map(|p| match p.as_array().map(Vec::as_slice) {
                    Some([x, y]) => Some((x.as_i64()? as i32, y.as_i64()? as i32)),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("obj_poss is not a list of [x, y]: {poss:?}")))?;
        }
        Ok(desc)
    }
}

fn bad(message: String) -> EnvError {
    EnvError::Data(format!("babyai instruction: {message}"))
}

/// Whether `(x, y)` lies on side `loc` of the agent (dot products with the agent's frame).
fn loc_matches(w: &World, loc: Loc, x: i32, y: i32) -> bool {
    let v = (x - w.agent_pos.0, y - w.agent_pos.1);
    let d1 = DIR_TO_VEC[w.agent_dir as usize % 4];
    let d2 = (-d1.1, d1.0);
    let dot = |a: (i32, i32), b: (i32, i32)| a.0 * b.0 + a.1 * b.1;
    match loc {
        Loc::Left => dot(v, d2) < 0,
        Loc::Right => dot(v, d2) > 0,
        Loc::Front => dot(v, d1) > 0,
        Loc::Behind => dot(v, d1) < 0,
    }
}

fn next_to(a: (i32, i32), b: (i32, i32)) -> bool {
    (a.0 - b.0).abs() + (a.1 - b.1).abs() == 1
}

/// A BabyAI instruction with its verifier state.
#[derive(Debug, Clone, PartialEq)]
pub enum Instr {
    GoTo {
        desc: ObjDesc,
    },
    Open {
        desc: ObjDesc,
        strict: bool,
    },
    Pickup {
        desc: ObjDesc,
        strict: bool,
        pre_carrying: Option<u32>,
    },
    PutNext {
        desc_move: ObjDesc,
        desc_fixed: ObjDesc,
        strict: bool,
        pre_carrying: Option<u32>,
    },
    /// Both, in any order.
    And {
        a: Box<Instr>,
        b: Box<Instr>,
        a_done: Status,
        b_done: Status,
    },
    /// `a`, then `b`.
    Before {
        a: Box<Instr>,
        b: Box<Instr>,
        strict: bool,
        a_done: Status,
        b_done: Status,
    },
    /// `a` after you `b` (so `b` first).
    After {
        a: Box<Instr>,
        b: Box<Instr>,
        strict: bool,
        a_done: Status,
        b_done: Status,
    },
}

impl Instr {
    pub fn goto(desc: ObjDesc) -> Self {
        Instr::GoTo { desc }
    }

    pub fn open(desc: ObjDesc, strict: bool) -> Self {
        Instr::Open { desc, strict }
    }

    pub fn pickup(desc: ObjDesc, strict: bool) -> Self {
        Instr::Pickup { desc, strict, pre_carrying: None }
    }

    pub fn put_next(desc_move: ObjDesc, desc_fixed: ObjDesc, strict: bool) -> Self {
        Instr::PutNext { desc_move, desc_fixed, strict, pre_carrying: None }
    }

    pub fn and(a: Instr, b: Instr) -> Self {
        let (a_done, b_done) = (Status::NotStarted, Status::NotStarted);
        Instr::And { a: Box::new(a), b: Box::new(b), a_done, b_done }
    }

    pub fn before(a: Instr, b: Instr, strict: bool) -> Self {
        let (a_done, b_done) = (Status::NotStarted, Status::NotStarted);
        Instr::Before { a: Box::new(a), b: Box::new(b), strict, a_done, b_done }
    }

    pub fn after(a: Instr, b: Instr, strict: bool) -> Self {
        let (a_done, b_done) = (Status::NotStarted, Status::NotStarted);
        Instr::After { a: Box::new(a), b: Box::new(b), strict, a_done, b_done }
    }

    /// Whether this is a single action (not a sequence or conjunction).
    pub fn is_action(&self) -> bool {
        !matches!(self, Instr::And { .. } | Instr::Before { .. } | Instr::After { .. })
    }

    /// The object descriptions of an action instruction (none for compositions).
    pub fn descs(&self) -> Vec<&ObjDesc> {
        match self {
            Instr::GoTo { desc } | Instr::Open { desc, .. } | Instr::Pickup { desc, .. } => {
                vec![desc]
            }
            Instr::PutNext { desc_move, desc_fixed, .. } => vec![desc_move, desc_fixed],
            _ => Vec::new(),
        }
    }

    fn descs_mut(&mut self) -> Vec<&mut ObjDesc> {
        match self {
            Instr::GoTo { desc } | Instr::Open { desc, .. } | Instr::Pickup { desc, .. } => {
                vec![desc]
            }
            Instr::PutNext { desc_move, desc_fixed, .. } => vec![desc_move, desc_fixed],
            _ => Vec::new(),
        }
    }

    /// The two parts of a composition.
    pub fn parts(&self) -> Option<(&Instr, &Instr)> {
        match self {
            Instr::And { a, b, .. } | Instr::Before { a, b, .. } | Instr::After { a, b, .. } => Some((a, b)),
            _ => None,
        }
    }

    fn parts_mut(&mut self) -> Option<(&mut Instr, &mut Instr)> {
        match self {
            Instr::And { a, b, .. } | Instr::Before { a, b, .. } | Instr::After { a, b, .. } => Some((a, b)),
            _ => None,
        }
    }

    /// The instruction in words, as minigrid's `surface` says it. Re-reads the matching
    /// objects first (as minigrid does), so call it on the world the mission is for.
    pub fn surface(&mut self, w: &World) -> String {
        match self {
            Instr::GoTo { desc } => {
                desc.find_matching(w, true);
                format!("go to {}", desc.surface())
            }
            Instr::Open { desc, .. } => {
                desc.find_matching(w, true);
                format!("open {}", desc.surface())
            }
            Instr::Pickup { desc, .. } => {
                desc.find_matching(w, true);
                format!("pick up {}", desc.surface())
            }
            Instr::PutNext { desc_move, desc_fixed, .. } => {
                desc_move.find_matching(w, true);
                desc_fixed.find_matching(w, true);
                format!("put {} next to {}", desc_move.surface(), desc_fixed.surface())
            }
            Instr::And { a, b, .. } => format!("{} and {}", a.surface(w), b.surface(w)),
            Instr::Before { a, b, .. } => format!("{}, then {}", a.surface(w), b.surface(w)),
            Instr::After { a, b, .. } => format!("{} after you {}", a.surface(w), b.surface(w)),
        }
    }

    /// Starts verification against the world as it is now (`reset_verifier`).
    pub fn reset_verifier(&mut self, w: &World) {
        match self {
            Instr::Pickup { pre_carrying, .. } | Instr::PutNext { pre_carrying, .. } => {
                *pre_carrying = None;
            }
            Instr::And { a_done, b_done, .. }
            | Instr::Before { a_done, b_done, .. }
            | Instr::After { a_done, b_done, .. } => {
                *a_done = Status::NotStarted;
                *b_done = Status::NotStarted;
            }
            _ => {}
        }
        for desc in self.descs_mut() {
            desc.find_matching(w, true);
        }
        if let Some((a, b)) = self.parts_mut() {
            a.reset_verifier(w);
            b.reset_verifier(w);
        }
    }

    /// Re-reads the tracked objects' positions (minigrid does this after each drop).
    pub fn update_objs_poss(&mut self, w: &World) {
        if let Some((a, b)) = self.parts_mut() {
            a.update_objs_poss(w);
            b.update_objs_poss(w);
            return;
        }
        for desc in self.descs_mut() {
            desc.find_matching(w, false);
        }
    }

    /// How many navigations the instruction needs (`num_navs_needed`), for `max_steps`.
    pub fn num_navs_needed(&self) -> u32 {
        match self {
            Instr::PutNext { .. } => 2,
            _ => match self.parts() {
                Some((a, b)) => a.num_navs_needed() + b.num_navs_needed(),
                None => 1,
            },
        }
    }

    /// Verifies the world after `action` was applied.
    pub fn verify(&mut self, w: &World, action: Action) -> Status {
        match self {
            Instr::GoTo { desc } => {
                let front = w.front_pos();
                if desc.obj_poss.contains(&front) {
                    Status::Success
                } else {
                    Status::Continue
                }
            }
            Instr::Open { desc, strict } => verify_open(desc, *strict, w, action),
            Instr::Pickup { desc, strict, pre_carrying } => {
                let carrying = w.carrying.as_ref().map(|o| o.id);
                let pre = std::mem::replace(pre_carrying, carrying);
                if action != Action::Pickup {
                    return Status::Continue;
                }
                if pre.is_none() && carrying.is_some_and(|id| desc.obj_set.contains(&id)) {
                    return Status::Success;
                }
                if *strict && carrying.is_some() {
                    return Status::Failure;
                }
                Status::Continue
            }
            Instr::PutNext { desc_move, desc_fixed, strict, pre_carrying } => {
                let carrying = w.carrying.as_ref().map(|o| o.id);
                let pre = std::mem::replace(pre_carrying, carrying);
                if *strict && action == Action::Pickup && carrying.is_some() {
                    return Status::Failure;
                }
                if action != Action::Drop {
                    return Status::Continue;
                }
                verify_put_next(desc_move, desc_fixed, pre, w)
            }
            Instr::And { a, b, a_done, b_done } => {
                if *a_done != Status::Success {
                    *a_done = a.verify(w, action);
                }
                if *b_done != Status::Success {
                    *b_done = b.verify(w, action);
                }
                if *a_done == Status::Success && *b_done == Status::Success {
                    Status::Success
                } else {
                    Status::Continue
                }
            }
            Instr::Before { a, b, strict, a_done, b_done } => verify_seq(a, b, *strict, a_done, b_done, w, action),
            // "a after you b" is "b, then a".
            Instr::After { a, b, strict, a_done, b_done } => verify_seq(b, a, *strict, b_done, a_done, w, action),
        }
    }

    /// The instruction tree as JSON: `{"op": "goto"|"open"|"pickup"|"putnext"|"and"|
    /// "before"|"after", ...}` with object descriptions `{type, color, loc}`.
    pub fn to_json(&self) -> Value {
        match self {
            Instr::GoTo { desc } => json!({"op": "goto", "desc": desc.to_json()}),
            Instr::Open { desc, strict } => {
                json!({"op": "open", "desc": desc.to_json(), "strict": strict})
            }
            Instr::Pickup { desc, strict, .. } => {
                json!({"op": "pickup", "desc": desc.to_json(), "strict": strict})
            }
            Instr::PutNext { desc_move, desc_fixed, strict, .. } => json!({
                "op": "putnext",
                "desc_move": desc_move.to_json(),
                "desc_fixed": desc_fixed.to_json(),
                "strict": strict,
            }),
            Instr::And { a, b, .. } => json!({"op": "and", "a": a.to_json(), "b": b.to_json()}),
            Instr::Before { a, b, strict, .. } => {
                json!({"op": "before", "a": a.to_json(), "b": b.to_json(), "strict": strict})
            }
            Instr::After { a, b, strict, .. } => {
                json!({"op": "after", "a": a.to_json(), "b": b.to_json(), "strict": strict})
            }
        }
    }

    /// Parses [`Instr::to_json`]'s format. The verifier still needs `reset_verifier`.
    pub fn from_json(v: &Value) -> Result<Self, EnvError> {
        let op = v.get("op").and_then(Value::as_str).ok_or_else(|| bad(format!("no \"op\" in {v}")))?;
        let strict = v.get("strict").and_then(Value::as_bool).unwrap_or(false);
        let desc = |key: &str| -> Result<ObjDesc, EnvError> {
            ObjDesc::from_json(v.get(key).ok_or_else(|| bad(format!("{op}: missing {key:?}")))?)
        };
        let part = |key: &str| -> Result<Instr, EnvError> {
            Instr::from_json(v.get(key).ok_or_else(|| bad(format!("{op}: missing {key:?}")))?)
        };
        Ok(match op {
            "goto" => Instr::goto(desc("desc")?),
            "open" => Instr::open(desc("desc")?, strict),
            "pickup" => Instr::pickup(desc("desc")?, strict),
            "putnext" => Instr::put_next(desc("desc_move")?, desc("desc_fixed")?, strict),
            "and" => Instr::and(part("a")?, part("b")?),
            "before" => Instr::before(part("a")?, part("b")?, strict),
            "after" => Instr::after(part("a")?, part("b")?, strict),
            other => return Err(bad(format!("unknown op {other:?}"))),
        })
    }
}

fn verify_open(desc: &ObjDesc, strict: bool, w: &World, action: Action) -> Status {
    if action != Action::Toggle {
        return Status::Continue;
    }
    let front = w.front_obj();
    if front.is_some_and(|o| o.is_open && desc.obj_set.contains(&o.id)) {
        return Status::Success;
    }
    if strict && front.is_some_and(|o| o.kind == ObjKind::Door) {
        return Status::Failure;
    }
    Status::Continue
}

fn verify_put_next(desc_move: &ObjDesc, desc_fixed: &ObjDesc, pre: Option<u32>, w: &World) -> Status {
    for &id in &desc_move.obj_set {
        if pre != Some(id) {
            continue;
        }
        // The moved object's `cur_pos`: where it was dropped, or nowhere if still carried.
        let Some(pos_a) = w.grid.find_id(id) else {
            continue;
        };
        if desc_fixed.obj_poss.iter().any(|&pos_b| next_to(pos_a, pos_b)) {
            return Status::Success;
        }
    }
    Status::Continue
}

/// `first`, then `second` (minigrid's `BeforeInstr.verify`; `AfterInstr` is the mirror).
fn verify_seq(
    first: &mut Instr,
    second: &mut Instr,
    strict: bool,
    first_done: &mut Status,
    second_done: &mut Status,
    w: &World,
    action: Action,
) -> Status {
    if *first_done == Status::Success {
        *second_done = second.verify(w, action);
        return match *second_done {
            Status::Failure => Status::Failure,
            Status::Success => Status::Success,
            _ => Status::Continue,
        };
    }
    *first_done = first.verify(w, action);
    match *first_done {
        Status::Failure => Status::Failure,
        Status::Success => verify_seq(first, second, strict, first_done, second_done, w, action),
        _ => {
            if strict && second.verify(w, action) == Status::Success {
                Status::Failure
            } else {
                Status::Continue
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::babyai::grid::{Grid, Obj};

    /// A 7x7 room, agent at (3, 3) facing east.
    fn room() -> World {
        let mut grid = Grid::new(7, 7);
        grid.wall_rect(0, 0, 7, 7);
        let mut w = World::new(grid, (3, 3), RoomGeom { room_size: 7, num_rows: 1, num_cols: 1 });
        w.max_steps = 100;
        w
    }

    fn put(w: &mut World, x: i32, y: i32, kind: ObjKind, color: Color) -> u32 {
        let obj: Obj = w.grid.make(kind, color);
        let id = obj.id;
        w.grid.set(x, y, Some(obj));
        id
    }

    fn start(w: &mut World, mut instr: Instr) {
        w.mission = instr.surface(w);
        w.instr = Some(instr);
        w.reset_verifier();
    }

    fn desc(kind: ObjKind, color: Color) -> ObjDesc {
        ObjDesc::new(Some(kind), Some(color), None)
    }

    #[test]
    fn goto_succeeds_when_facing() {
        let mut w = room();
        put(&mut w, 5, 3, ObjKind::Ball, Color::Red);
        start(&mut w, Instr::goto(desc(ObjKind::Ball, Color::Red)));
        assert_eq!(w.mission, "go to the red ball");
        let (r, done) = w.step_primitive(Action::Forward);
        assert!(done && w.terminated);
        assert!((r - (1.0 - 0.9 / 100.0)).abs() < 1e-6);
    }

    #[test]
    fn surface_articles_and_locations() {
        let mut w = room();
        put(&mut w, 5, 3, ObjKind::Ball, Color::Red);
        put(&mut w, 1, 3, ObjKind::Ball, Color::Red);
        let mut i = Instr::pickup(desc(ObjKind::Ball, Color::Red), false);
        assert_eq!(i.surface(&w), "pick up a red ball");
        let mut i = Instr::pickup(ObjDesc::new(Some(ObjKind::Ball), None, Some(Loc::Front)), false);
        assert_eq!(i.surface(&w), "pick up the ball in front of you");
        let mut i = Instr::goto(ObjDesc::new(Some(ObjKind::Ball), None, Some(Loc::Behind)));
        assert_eq!(i.surface(&w), "go to the ball behind you");
        let mut i = Instr::goto(ObjDesc::new(Some(ObjKind::Ball), None, Some(Loc::Left)));
        i.reset_verifier(&w);
        assert!(i.descs()[0].obj_set.is_empty(), "both balls are straight ahead or behind");
    }

    #[test]
    fn pickup_needs_empty_hands_before() {
        let mut w = room();
        put(&mut w, 4, 3, ObjKind::Key, Color::Blue);
        let target = put(&mut w, 3, 4, ObjKind::Box, Color::Grey);
        start(&mut w, Instr::pickup(desc(ObjKind::Box, Color::Grey), false));
        let (_, done) = w.step_primitive(Action::Pickup); // the key: wrong object
        assert!(!done);
        w.step_primitive(Action::Right);
        // Hands emptied out of band: the verifier still remembers the key from the last
        // verified step, so this pickup does not count (minigrid's `preCarrying`).
        w.carrying = None;
        let (_, done) = w.step_primitive(Action::Pickup);
        assert_eq!(w.carrying.as_ref().map(|o| o.id), Some(target));
        assert!(!done);

        let mut w = room();
        put(&mut w, 4, 3, ObjKind::Box, Color::Grey);
        start(&mut w, Instr::pickup(desc(ObjKind::Box, Color::Grey), false));
        assert!(!w.step_primitive(Action::Drop).1);
        assert!(w.step_primitive(Action::Pickup).1);
    }

    #[test]
    fn putnext_on_drop_next_to_fixed() {
        let mut w = room();
        put(&mut w, 4, 3, ObjKind::Ball, Color::Red);
        put(&mut w, 1, 1, ObjKind::Key, Color::Green);
        start(&mut w, Instr::put_next(desc(ObjKind::Ball, Color::Red), desc(ObjKind::Key, Color::Green), false));
        assert_eq!(w.mission, "put the red ball next to the green key");
        w.step_primitive(Action::Pickup);
        for a in [Action::Left, Action::Forward, Action::Forward, Action::Left] {
            w.step_primitive(a);
        }
        // Agent at (3, 1) facing west; front (2, 1) is next to the key at (1, 1).
        assert_eq!((w.agent_pos, w.agent_dir), ((3, 1), 2));
        let (r, done) = w.step_primitive(Action::Drop);
        assert!(done && r > 0.0);
    }

    #[test]
    fn before_and_after_order() {
        let mut w = room();
        put(&mut w, 4, 3, ObjKind::Ball, Color::Red);
        put(&mut w, 2, 3, ObjKind::Key, Color::Blue);
        let red = || Instr::goto(desc(ObjKind::Ball, Color::Red));
        let blue = || Instr::goto(desc(ObjKind::Key, Color::Blue));
        start(&mut w, Instr::before(blue(), red(), false));
        assert_eq!(w.mission, "go to the blue key, then go to the red ball");
        // Facing the red ball first does not count.
        assert!(!w.step_primitive(Action::Done).1);
        w.step_primitive(Action::Left);
        let (_, done) = w.step_primitive(Action::Left); // facing west: the blue key
        assert!(!done);
        w.step_primitive(Action::Right);
        let (_, done) = w.step_primitive(Action::Right); // facing east: the red ball
        assert!(done);

        let mut w2 = room();
        put(&mut w2, 4, 3, ObjKind::Ball, Color::Red);
        put(&mut w2, 2, 3, ObjKind::Key, Color::Blue);
        start(&mut w2, Instr::after(red(), blue(), false));
        assert_eq!(w2.mission, "go to the red ball after you go to the blue key");
        assert!(!w2.step_primitive(Action::Done).1);
    }

    #[test]
    fn and_any_order_and_strict_open() {
        let mut w = room();
        put(&mut w, 4, 3, ObjKind::Ball, Color::Red);
        put(&mut w, 2, 3, ObjKind::Key, Color::Blue);
        let i = Instr::and(Instr::goto(desc(ObjKind::Ball, Color::Red)), Instr::goto(desc(ObjKind::Key, Color::Blue)));
        start(&mut w, i);
        assert!(!w.step_primitive(Action::Done).1);
        w.step_primitive(Action::Left);
        assert!(w.step_primitive(Action::Left).1);

        let mut w = room();
        let d = w.grid.make_door(Color::Red, false, false);
        w.grid.set(6, 3, Some(d));
        let d2 = w.grid.make_door(Color::Blue, false, false);
        w.grid.set(0, 3, Some(d2));
        w.agent_pos = (5, 3);
        start(&mut w, Instr::open(desc(ObjKind::Door, Color::Blue), true));
        let (r, done) = w.step_primitive(Action::Toggle);
        assert!(done && r == 0.0, "strict: opening the wrong door fails");
    }

    #[test]
    fn json_round_trip() {
        let i = Instr::after(
            Instr::and(
                Instr::pickup(ObjDesc::new(Some(ObjKind::Key), None, Some(Loc::Left)), false),
                Instr::open(ObjDesc::new(Some(ObjKind::Door), Some(Color::Red), None), true),
            ),
            Instr::put_next(
                ObjDesc::new(Some(ObjKind::Ball), Some(Color::Grey), None),
                ObjDesc::new(None, Some(Color::Purple), None),
                false,
            ),
            false,
        );
        assert_eq!(Instr::from_json(&i.to_json()).unwrap(), i);
        assert!(Instr::from_json(&json!({"op": "fly"})).is_err());
    }
}
