//! An expert for BabyAI-text: the next action of the env's own vocabulary, read off the true
//! world state, with a short truthful reason ("The red ball is 3 steps ahead; I go to it.").
//!
//! The approach of minigrid's BabyAI bot, written for the text env:
//! 1. The current *leaf* of the instruction tree is read from the verifier's state (`and`:
//!    the first part not yet done; `then` / `after you`: the part due now).
//! 2. A *segment* for it is planned over the whole grid: a shortest primitive path (Dijkstra
//!    over `(cell, heading)`, a closed door costing its toggle) to face a target cell, plus the
//!    final `pickup` / `drop` / `toggle`. When no such path exists, the same search with locked
//!    doors and objects passable at a price names the first obstacle, and the segment becomes
//!    fetching that door's key or picking up the blocking object; full hands are first emptied
//!    on a cell where the object blocks nothing. Subgoals nest (a key behind another locked door).
//! 3. Every listed action is *played on a copy* of the world, with the env's own macro rule (a
//!    macro stops when a move leaves the view unchanged). An action that completes the segment
//!    or advances the verifier wins (fewest steps); otherwise the action that stays on a
//!    shortest path and covers the most of it. Macros such as "go to red ball 1" are thus
//!    taken whenever they follow a shortest path, single turns and steps otherwise.
//!
//! The bot is omniscient: it plans over cells the agent has not seen, and its reasons name a
//! target's place only when the agent sees it ("I do not see the red ball yet; I turn left
//! towards it."). Where it cannot act it says why: a key locked in a box (the text actions
//! cannot open boxes; primitive mode can), a door to open that the way had to open earlier (the
//! text actions cannot close doors), a strict instruction that any way forward fails.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::grid::{Action, Color, Obj, ObjKind, World, DIR_TO_VEC};
use super::instr::{Instr, ObjDesc, Status};
use super::text::{Scene, ViewImage};
use crate::env::ExpertMove;

/// Extra cost of passing a locked door whose key the agent lacks (relaxed search only).
const LOCK_COST: u32 = 40;
/// Extra cost of passing an object in the way (relaxed search only).
const BLOCK_COST: u32 = 12;
/// Extra cost of opening a door a later `open` instruction needs closed until then.
const AVOID_COST: u32 = 400;
/// How deep subgoals may nest (key behind a locked door behind ...).
const MAX_DEPTH: u32 = 6;

/// Why a segment is walked.
#[derive(Debug, Clone, PartialEq)]
enum Purpose {
    /// A leaf of the mission: go to / open / pick up the thing at the segment's target.
    GoTo,
    Open,
    Pickup,
    /// Pick up the object to move next to `fixed` (a `put next` instruction).
    Fetch {
        fixed: String,
    },
    /// Put the carried object down next to `fixed` (at one of `anchors`).
    PutDown {
        fixed: String,
        anchors: Vec<(i32, i32)>,
    },
    /// Get the key of a locked door in the way.
    Key {
        door: Color,
    },
    /// Close an open door that an `open` instruction names (primitive actions only).
    Close,
    /// Unlock the door in the way with the key in hand (before the hands are needed).
    Unlock,
    /// Pick up an object that blocks the way to `goal`.
    Clear {
        goal: String,
    },
    /// Put the carried object down out of the way, to free the hands.
    FreeHands,
    /// Take away one of the objects around `fixed` (no cell beside it is free).
    MakeRoom {
        fixed: String,
    },
}

/// A stretch of primitive moves towards one subgoal.
#[derive(Debug, Clone)]
struct Segment {
    /// Cells to face; `last` is done facing one of them.
    cells: Vec<(i32, i32)>,
    last: Option<Action>,
    /// The moves, `last` included.
    path: Vec<Action>,
    /// The cell `path` ends facing.
    target: (i32, i32),
    purpose: Purpose,
    /// The search settings the segment was planned with (for re-costing).
    avoid: Vec<u32>,
}

impl Segment {
    fn cost(&self) -> u32 {
        self.path.len() as u32
    }
}

/// The next move among `candidates` (action names and their primitive moves, in menu order)
/// for the episode in `world` (its current view `image`). `primitive`: the env takes
/// minigrid's primitive actions, so boxes can be opened.
pub fn choose(
    world: &World,
    image: &ViewImage,
    candidates: &[(&str, &[Action])],
    primitive: bool,
) -> Result<ExpertMove, String> {
    if world.done() {
        return Err("the episode is over".into());
    }
    let Some(instr) = world.instr.as_ref() else {
        return Err("the episode has no instruction to follow".into());
    };
    let seg = plan(world, instr, primitive)?;
    let before = successes(instr);
    let scene = Scene::read(world, image);
    let target_seen = scene.things.iter().any(|t| t.pos == seg.target);
    let mut best: Option<(u32, u32, usize, bool)> = None; // (rank, key, index, completes)
    for (i, (_, moves)) in candidates.iter().enumerate() {
        if moves.is_empty() {
            continue;
        }
        let mut w = world.clone();
        let mut view = image.clone();
        let start = w.step_count;
        super::play(&mut w, &mut view, moves);
        let used = w.step_count - start;
        if w.terminated && w.total_reward <= world.total_reward {
            continue; // the instruction failed
        }
        let advanced = w.terminated || w.instr.as_ref().is_some_and(|x| successes(x) > before);
        let completes = advanced || completes(world, &w, &seg);
        if !completes && !target_seen && candidates[i].0.starts_with("go to ") {
            // Out of sight, the target is looked for with turns, steps and doors: a walk to
            // another object would be chosen for what the agent cannot see.
            continue;
        }
        let (rank, key) = if completes {
            // A pickup or drop the segment does not ask for may end it too (the verifier counts
            // facing the target on the way): the plain walk reads better and is taken first.
            let extra = moves.iter().any(|a| matches!(a, Action::Pickup | Action::Drop) && Some(*a) != seg.last);
            (0, u32::from(extra) * 10_000 + used)
        } else if w.carrying.as_ref().map(|o| o.id) != world.carrying.as_ref().map(|o| o.id)
            || movables(&w) != movables(world)
        {
            continue; // picks up, drops or opens something the segment does not ask for
        } else {
            let Some(after) = cost_in(&w, &seg) else { continue };
            let progress = after < seg.cost() || seg.cost() == 0;
            if !progress {
                continue;
            }
            if used + after == seg.cost() {
                (1, u32::MAX - used) // on a shortest path: the longest stretch wins
            } else {
                (2, used + after)
            }
        };
        if best.is_none_or(|(r, k, _, _)| (rank, key) < (r, k)) {
            best = Some((rank, key, i, completes));
        }
    }
    let Some((_, _, i, completes)) = best else {
        if strict_open_pair(instr) {
            return Err("the toggle that opens the first door also fails the second strict \"open\" (minigrid's \
                        sequence verifier checks both on one step): no action sequence succeeds"
                .into());
        }
        return Err(format!("no listed action makes progress ({})", describe_purpose(&seg.purpose)));
    };
    let (action, moves) = candidates[i];
    let thought = format!("{}; {}.", situation(world, &scene, &seg), intent(world, &seg, action, moves, completes));
    Ok(ExpertMove { action: action.to_string(), thought })
}

/// "open X, then open Y" with both strict (OpenDoorsOrder's debug variant): minigrid verifies
/// Y on the step X succeeds, and a toggle in front of a door other than Y fails a strict open.
fn strict_open_pair(instr: &Instr) -> bool {
    let (first, second) = match instr {
        Instr::Before { a, b, .. } => (a, b),
        Instr::After { a, b, .. } => (b, a),
        _ => return false,
    };
    matches!((&**first, &**second), (Instr::Open { strict: true, .. }, Instr::Open { strict: true, .. }))
}

/// The keys, balls and boxes on the grid with their cells, as a checksum.
fn movables(w: &World) -> u64 {
    w.grid.objects().filter(|(_, o)| matches!(o.kind, ObjKind::Key | ObjKind::Ball | ObjKind::Box)).fold(
        0u64,
        |acc, ((x, y), o)| {
            acc.wrapping_mul(1_000_003).wrapping_add(u64::from(o.id) * 4096 + (x as u64) * 64 + y as u64)
        },
    )
}

/// "red ball", "key", "purple object": what a description names.
fn desc_noun(desc: &ObjDesc) -> String {
    let kind = desc.kind.map_or("object", ObjKind::name);
    match desc.color {
        Some(c) => format!("{} {kind}", c.name()),
        None => kind.to_string(),
    }
}

/// How many parts of compositions have succeeded: grows when the mission advances.
fn successes(instr: &Instr) -> u32 {
    match instr {
        Instr::And { a, b, a_done, b_done }
        | Instr::Before { a, b, a_done, b_done, .. }
        | Instr::After { a, b, a_done, b_done, .. } => {
            u32::from(*a_done == Status::Success) + u32::from(*b_done == Status::Success) + successes(a) + successes(b)
        }
        _ => 0,
    }
}

/// The action instruction due now.
fn leaf(instr: &Instr) -> &Instr {
    match instr {
        Instr::And { a, b, a_done, .. } | Instr::Before { a, b, a_done, .. } => {
            leaf(if *a_done != Status::Success { a } else { b })
        }
        Instr::After { a, b, b_done, .. } => leaf(if *b_done != Status::Success { b } else { a }),
        _ => instr,
    }
}

/// Doors that `open` instructions not yet done name: opening them on the way would spoil
/// those instructions (the text env cannot close a door again).
fn pending_open_doors(instr: &Instr, out: &mut Vec<u32>) {
    match instr {
        Instr::Open { desc, .. } => out.extend(&desc.obj_set),
        Instr::And { a, b, a_done, b_done }
        | Instr::Before { a, b, a_done, b_done, .. }
        | Instr::After { a, b, a_done, b_done, .. } => {
            if *a_done != Status::Success {
                pending_open_doors(a, out);
            }
            if *b_done != Status::Success {
                pending_open_doors(b, out);
            }
        }
        _ => {}
    }
}

/// Whether `after` (the world after a candidate) finished `seg`, planned on `before`.
fn completes(before: &World, after: &World, seg: &Segment) -> bool {
    match seg.last {
        None => seg.cells.contains(&after.front_pos()),
        Some(Action::Pickup) => {
            let wanted: Vec<u32> = seg.cells.iter().filter_map(|&(x, y)| before.grid.get(x, y)).map(|o| o.id).collect();
            before.carrying.is_none() && after.carrying.as_ref().is_some_and(|o| wanted.contains(&o.id))
        }
        Some(Action::Drop) => {
            let Some(held) = before.carrying.as_ref() else { return false };
            after.carrying.is_none()
                && seg.cells.iter().any(|&(x, y)| after.grid.get(x, y).is_some_and(|o| o.id == held.id))
        }
        Some(Action::Toggle) => seg.cells.iter().any(|&(x, y)| {
            let was = before.grid.get(x, y);
            let now = after.grid.get(x, y);
            match (was, now) {
                (Some(a), Some(b)) if a.kind == ObjKind::Door => a.is_open != b.is_open,
                (Some(a), Some(b)) if a.kind == ObjKind::Box => b.id != a.id,
                _ => false,
            }
        }),
        Some(_) => false,
    }
}

/// The segment's cost from the state of `w` (same goal, same search settings).
fn cost_in(w: &World, seg: &Segment) -> Option<u32> {
    let found = search(w, &Search { relaxed: false, avoid: &seg.avoid }, &seg.cells)?;
    Some(found.moves.len() as u32 + u32::from(seg.last.is_some()))
}

// ---------------------------------------------------------------------------------------------
// Planning

struct Ctx<'a> {
    w: &'a World,
    avoid: Vec<u32>,
    primitive: bool,
    /// Cells nothing may be put down on (beside what a `put next` puts things next to).
    reserved: Vec<(i32, i32)>,
    /// A strict `pick up` is due: picking up anything else fails the mission.
    strict_pickup: bool,
}

fn plan(w: &World, instr: &Instr, primitive: bool) -> Result<Segment, String> {
    let mut avoid = Vec::new();
    pending_open_doors(instr, &mut avoid);
    let current = leaf(instr);
    if let Instr::Open { desc, .. } = current {
        avoid.retain(|id| !desc.obj_set.contains(id));
    }
    let reserved = match current {
        Instr::PutNext { desc_fixed, .. } => free_neighbours(w, &desc_fixed.obj_poss),
        _ => Vec::new(),
    };
    let strict_pickup = matches!(current, Instr::Pickup { strict: true, .. });
    let ctx = Ctx { w, avoid, primitive, reserved, strict_pickup };
    for_leaf(&ctx, current)
}

/// Where the objects `ids` that can be picked up lie ("a grey object" also names grey walls).
fn positions(w: &World, ids: &[u32]) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> =
        w.grid.objects().filter(|(_, o)| ids.contains(&o.id) && o.can_pickup()).map(|(p, _)| p).collect();
    out.sort_unstable();
    out
}

fn for_leaf(ctx: &Ctx, instr: &Instr) -> Result<Segment, String> {
    let w = ctx.w;
    match instr {
        Instr::GoTo { desc } => reach(ctx, desc.obj_poss.clone(), None, Purpose::GoTo, 0),
        Instr::Open { desc, .. } => {
            let doors: Vec<(i32, i32)> =
                w.grid.objects().filter(|(_, o)| desc.obj_set.contains(&o.id)).map(|(p, _)| p).collect();
            // A locked door needs its key: the search treats the door as the target, so ask
            // for the key of the nearest one explicitly.
            let closed: Vec<(i32, i32)> =
                doors.iter().copied().filter(|&(x, y)| w.grid.get(x, y).is_some_and(|d| !d.is_open)).collect();
            let openable: Vec<(i32, i32)> = closed.iter().copied().filter(|&(x, y)| can_open(w, x, y)).collect();
            if !openable.is_empty() {
                return reach(ctx, openable, Some(Action::Toggle), Purpose::Open, 0);
            }
            if let Some(&door) = closed.first() {
                return fetch_key(ctx, door, 0);
            }
            if ctx.primitive {
                // Only a toggle that opens it counts: close it first.
                return reach(ctx, doors, Some(Action::Toggle), Purpose::Close, 0);
            }
            Err("the door to open is open already (the way to an earlier goal led through it), and the text actions cannot close a door".into())
        }
        // Holding it already does not count: the instruction wants the pickup done now.
        Instr::Pickup { desc, .. } if w.carrying.as_ref().is_some_and(|o| desc.obj_set.contains(&o.id)) => {
            free_hands(ctx, &[])
        }
        Instr::Pickup { desc, .. } => reach(ctx, positions(w, &desc.obj_set), Some(Action::Pickup), Purpose::Pickup, 0),
        Instr::PutNext { desc_move, desc_fixed, .. } => {
            let fixed = desc_noun(desc_fixed);
            if free_neighbours(w, &desc_fixed.obj_poss).is_empty() {
                // Every cell beside it is taken: move one of the objects there away first.
                let taken = taken_neighbours(w, &desc_fixed.obj_poss, &desc_fixed.obj_set);
                if w.carrying.is_some() {
                    return free_hands(ctx, &taken);
                }
                return reach(ctx, taken, Some(Action::Pickup), Purpose::MakeRoom { fixed }, 0);
            }
            match &w.carrying {
                Some(o) if desc_move.obj_set.contains(&o.id) => {
                    let cells = free_neighbours(w, &desc_fixed.obj_poss);
                    let anchors = desc_fixed.obj_poss.clone();
                    reach(ctx, cells, Some(Action::Drop), Purpose::PutDown { fixed, anchors }, 0)
                }
                _ => {
                    // Clear the way to where the object goes while the hands are free.
                    if let Some(way) = way_shut(ctx, &free_neighbours(w, &desc_fixed.obj_poss)) {
                        return open_the_way(ctx, &way, 0);
                    }
                    reach(ctx, positions(w, &desc_move.obj_set), Some(Action::Pickup), Purpose::Fetch { fixed }, 0)
                }
            }
        }
        _ => Err("composite instruction as a leaf".into()),
    }
}

fn can_open(w: &World, x: i32, y: i32) -> bool {
    match w.grid.get(x, y) {
        Some(d) if d.is_locked => w.carrying.as_ref().is_some_and(|k| k.kind == ObjKind::Key && k.color == d.color),
        Some(_) => true,
        None => false,
    }
}

/// Empty cells beside any of `cells`, sorted.
fn free_neighbours(w: &World, cells: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for &(x, y) in cells {
        for (dx, dy) in DIR_TO_VEC {
            let c = (x + dx, y + dy);
            // The agent's own cell counts: it can step off it and put the object down there.
            if w.grid.in_bounds(c.0, c.1) && w.grid.get(c.0, c.1).is_none() && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Cells beside any of `cells` holding an object that can be picked up (not one of `keep`).
fn taken_neighbours(w: &World, cells: &[(i32, i32)], keep: &[u32]) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for &(x, y) in cells {
        for (dx, dy) in DIR_TO_VEC {
            let c = (x + dx, y + dy);
            if w.grid.get(c.0, c.1).is_some_and(|o| o.can_pickup() && !keep.contains(&o.id)) && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Face one of `cells` and do `last`; when the way is shut, the subgoal that opens it.
fn reach(
    ctx: &Ctx,
    cells: Vec<(i32, i32)>,
    last: Option<Action>,
    purpose: Purpose,
    depth: u32,
) -> Result<Segment, String> {
    let w = ctx.w;
    if cells.is_empty() {
        return Err(format!("nothing to reach ({})", describe_purpose(&purpose)));
    }
    if depth > MAX_DEPTH {
        return Err("subgoals nest too deep".into());
    }
    if let Some(found) = search(w, &Search { relaxed: false, avoid: &ctx.avoid }, &cells) {
        if last == Some(Action::Pickup) && w.carrying.is_some() {
            // The hands are needed at the end: first use the key in hand on the way, if the
            // way needs it, then put the key down.
            return match found.first(Event::Unlock) {
                Some(door) if door != found.target => {
                    reach(ctx, vec![door], Some(Action::Toggle), Purpose::Unlock, depth + 1)
                }
                _ => free_hands(ctx, &cells),
            };
        }
        let mut path = found.moves;
        path.extend(last);
        return Ok(Segment { cells, last, path, target: found.target, purpose, avoid: ctx.avoid.clone() });
    }
    let relaxed = search(w, &Search { relaxed: true, avoid: &ctx.avoid }, &cells)
        .ok_or_else(|| format!("no way to the target ({})", describe_purpose(&purpose)))?;
    open_the_way(ctx, &relaxed, depth)
}

/// When no plain way leads to face one of `cells`: the relaxed way, naming what shuts it.
fn way_shut(ctx: &Ctx, cells: &[(i32, i32)]) -> Option<Found> {
    if search(ctx.w, &Search { relaxed: false, avoid: &ctx.avoid }, cells).is_some() {
        return None;
    }
    search(ctx.w, &Search { relaxed: true, avoid: &ctx.avoid }, cells).filter(|way| !way.events.is_empty())
}

/// The subgoal that removes the first thing shutting the way `relaxed` found: unlock a door
/// with the key in hand, fetch a door's key, or pick up a blocking object.
fn open_the_way(ctx: &Ctx, relaxed: &Found, depth: u32) -> Result<Segment, String> {
    let w = ctx.w;
    let Some(&(event, (x, y))) = relaxed.events.first() else {
        return Err("the way is shut by nothing the search can name".into());
    };
    if event == Event::Unlock {
        return reach(ctx, vec![(x, y)], Some(Action::Toggle), Purpose::Unlock, depth + 1);
    }
    let Some(obstacle) = w.grid.get(x, y) else { return Err("obstacle vanished".into()) };
    if obstacle.kind == ObjKind::Door {
        return fetch_key(ctx, (x, y), depth + 1);
    }
    if ctx.strict_pickup {
        return Err("objects shut the target in, and picking up any other object fails this strict instruction".into());
    }
    if w.carrying.is_some() {
        // Not back on the way being cleared (the object held may be the last obstacle).
        return free_hands_off(ctx, &[(x, y)], &relaxed_ways(ctx, &[relaxed.target]));
    }
    let (tx, ty) = relaxed.target;
    let goal = w.grid.get(tx, ty).map_or("target".to_string(), name);
    reach(ctx, vec![(x, y)], Some(Action::Pickup), Purpose::Clear { goal }, depth + 1)
}

/// The cells of the relaxed ways to face one of `cells` from the agent's cell, whatever its
/// heading (so that turning on the spot does not change them).
fn relaxed_ways(ctx: &Ctx, cells: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let opts = Search { relaxed: true, avoid: &ctx.avoid };
    let mut w = ctx.w.clone();
    let mut out = Vec::new();
    for dir in 0..4 {
        w.agent_dir = dir;
        out.extend(search(&w, &opts, cells).map_or_else(Vec::new, |way| way.cells));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The key for the locked door at `door`; first clear the way to the door itself, while the
/// hands are free.
fn fetch_key(ctx: &Ctx, door: (i32, i32), depth: u32) -> Result<Segment, String> {
    let w = ctx.w;
    let color = w.grid.get(door.0, door.1).map_or(Color::Grey, |d| d.color);
    if depth > MAX_DEPTH {
        return Err("subgoals nest too deep".into());
    }
    if let Some(way) = way_shut(ctx, &[door]) {
        return open_the_way(ctx, &way, depth);
    }
    if w.carrying.as_ref().is_some_and(|k| k.kind == ObjKind::Key && k.color == color) {
        return Err(format!("holding the {} key yet the door stays shut", color.name()));
    }
    let is_key = |o: &Obj| o.kind == ObjKind::Key && o.color == color;
    let mut cells: Vec<(i32, i32)> = w.grid.objects().filter(|(_, o)| is_key(o)).map(|(p, _)| p).collect();
    if !cells.is_empty() {
        return reach(ctx, cells, Some(Action::Pickup), Purpose::Key { door: color }, depth);
    }
    if w.carrying.as_ref().and_then(|o| w.grid.contents_of(o.id)).is_some_and(is_key) {
        if !ctx.primitive {
            return Err(format!(
                "the {} key is inside the box I carry, and the text actions cannot open boxes",
                color.name()
            ));
        }
        return free_hands(ctx, &[]); // put the box down, then open it
    }
    cells = w.grid.objects().filter(|(_, o)| w.grid.contents_of(o.id).is_some_and(is_key)).map(|(p, _)| p).collect();
    if cells.is_empty() {
        return Err(format!("there is no {} key for the locked door", color.name()));
    }
    if !ctx.primitive {
        return Err(format!("the {} key is inside a box, and the text actions cannot open boxes", color.name()));
    }
    reach(ctx, cells, Some(Action::Toggle), Purpose::Key { door: color }, depth)
}

/// Put the carried object down on the nearest cell where it blocks no way, and where it keeps
/// a free cell beside one of `keep` (what the hands are freed for). Whether a cell qualifies
/// does not depend on where the agent stands, so the choice stays put while the agent walks.
fn free_hands(ctx: &Ctx, keep: &[(i32, i32)]) -> Result<Segment, String> {
    free_hands_off(ctx, keep, &[])
}

/// [`free_hands`] on a cell other than `off` (when one qualifies).
fn free_hands_off(ctx: &Ctx, keep: &[(i32, i32)], off: &[(i32, i32)]) -> Result<Segment, String> {
    let w = ctx.w;
    let search_opts = Search { relaxed: false, avoid: &ctx.avoid };
    let parts = components(w, None);
    // First choice: away from doors and `off`, splitting no area; else anywhere that keeps the
    // access.
    for strict in [true, false] {
        let mut cells: Vec<(i32, i32)> = Vec::new();
        for y in 0..w.grid.height {
            for x in 0..w.grid.width {
                // The agent's own cell counts: it can step off it and put the object down behind.
                let free = w.grid.get(x, y).is_none() && !ctx.reserved.contains(&(x, y));
                let avoided = strict && (near_door(w, x, y) || off.contains(&(x, y)));
                if free && !avoided && keeps_access(w, (x, y), keep) {
                    cells.push((x, y));
                }
            }
        }
        // The nearest cell that passes the costlier checks (they are tried nearest first).
        while let Some(found) = search(w, &search_opts, &cells) {
            let cell = found.target;
            if (strict && components(w, Some(cell)) > parts) || !keeps_way(ctx, cell, keep) {
                cells.retain(|&c| c != cell);
                continue;
            }
            let mut path = found.moves;
            path.push(Action::Drop);
            let target = found.target;
            let avoid = ctx.avoid.clone();
            let purpose = Purpose::FreeHands;
            return Ok(Segment { cells: vec![target], last: Some(Action::Drop), path, target, purpose, avoid });
        }
    }
    Err("no free cell to put the carried object down".into())
}

/// Whether the way to face one of `keep`, open now, stays open with the carried object at `cell`.
fn keeps_way(ctx: &Ctx, cell: (i32, i32), keep: &[(i32, i32)]) -> bool {
    let opts = Search { relaxed: false, avoid: &ctx.avoid };
    let mut w = ctx.w.clone();
    let Some(held) = w.carrying.take() else { return true };
    if keep.is_empty() || search(&w, &opts, keep).is_none() {
        return true;
    }
    w.grid.set(cell.0, cell.1, Some(held));
    search(&w, &opts, keep).is_some()
}

/// Whether one of `keep` that has a free cell beside it still has one with `cell` taken.
fn keeps_access(w: &World, cell: (i32, i32), keep: &[(i32, i32)]) -> bool {
    let free_beside = |k: (i32, i32), taken: Option<(i32, i32)>| {
        DIR_TO_VEC.iter().any(|(dx, dy)| {
            let c = (k.0 + dx, k.1 + dy);
            Some(c) != taken && w.grid.in_bounds(c.0, c.1) && w.grid.get(c.0, c.1).is_none_or(Obj::can_overlap)
        })
    };
    let reachable: Vec<(i32, i32)> = keep.iter().copied().filter(|&k| free_beside(k, None)).collect();
    reachable.is_empty() || reachable.iter().any(|&k| free_beside(k, Some(cell)))
}

/// Connected areas of cells one can walk (or open a door) into, with `taken` blocked.
fn components(w: &World, taken: Option<(i32, i32)>) -> usize {
    let (width, height) = (w.grid.width, w.grid.height);
    let walkable = |x: i32, y: i32| {
        Some((x, y)) != taken
            && w.grid.get(x, y).is_none_or(|o| (o.kind == ObjKind::Door && !o.is_locked) || o.can_overlap())
    };
    let mut seen = vec![false; (width * height) as usize];
    let mut count = 0;
    for start in 0..width * height {
        let (sx, sy) = (start % width, start / width);
        if seen[start as usize] || !walkable(sx, sy) {
            continue;
        }
        count += 1;
        seen[start as usize] = true;
        let mut stack = vec![(sx, sy)];
        while let Some((x, y)) = stack.pop() {
            for (dx, dy) in DIR_TO_VEC {
                let (nx, ny) = (x + dx, y + dy);
                if w.grid.in_bounds(nx, ny) && !seen[(ny * width + nx) as usize] && walkable(nx, ny) {
                    seen[(ny * width + nx) as usize] = true;
                    stack.push((nx, ny));
                }
            }
        }
    }
    count
}

fn near_door(w: &World, x: i32, y: i32) -> bool {
    DIR_TO_VEC.iter().any(|(dx, dy)| w.grid.get(x + dx, y + dy).is_some_and(|o| o.kind == ObjKind::Door))
}

// ---------------------------------------------------------------------------------------------
// Search

struct Search<'a> {
    /// Locked doors and objects are passable at a price (to name the obstacle).
    relaxed: bool,
    /// Doors to keep shut (passable at [`AVOID_COST`]).
    avoid: &'a [u32],
}

struct Found {
    /// Primitive moves, toggles of doors on the way included; ends facing `target`.
    moves: Vec<Action>,
    target: (i32, i32),
    /// What lies on the way, in order: locked doors the carried key opens, and obstacles
    /// (locked doors without their key, objects; relaxed search only).
    events: Vec<(Event, (i32, i32))>,
    /// The cells the way enters, in order.
    cells: Vec<(i32, i32)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Unlock,
    Obstacle,
}

impl Found {
    fn first(&self, kind: Event) -> Option<(i32, i32)> {
        self.events.iter().find(|(e, _)| *e == kind).map(|&(_, c)| c)
    }
}

/// How a state was entered.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Edge {
    Start,
    Left,
    Right,
    Forward,
    ToggleForward,
    /// Through an obstacle (relaxed search only).
    Obstacle,
    /// Unlocking a door with the carried key, then forward.
    UnlockForward,
}

/// Cheapest way from the agent's state to facing one of `goals` (Dijkstra over cells and
/// headings; ties broken by state index, so the answer is deterministic).
fn search(w: &World, opts: &Search, goals: &[(i32, i32)]) -> Option<Found> {
    let (width, height) = (w.grid.width, w.grid.height);
    let n = (width * height * 4) as usize;
    let index = |(x, y): (i32, i32), d: u8| ((y * width + x) * 4 + d as i32) as usize;
    let mut dist = vec![u32::MAX; n];
    let mut parent = vec![(usize::MAX, Edge::Start); n];
    let mut heap = BinaryHeap::new();
    let start = index(w.agent_pos, w.agent_dir);
    dist[start] = 0;
    heap.push(Reverse((0u32, start)));
    let carried_key = w.carrying.as_ref().filter(|o| o.kind == ObjKind::Key).map(|o| o.color);
    while let Some(Reverse((cost, state))) = heap.pop() {
        if cost > dist[state] {
            continue;
        }
        let d = (state % 4) as u8;
        let cell = state / 4;
        let pos = ((cell as i32) % width, (cell as i32) / width);
        let v = DIR_TO_VEC[d as usize];
        let front = (pos.0 + v.0, pos.1 + v.1);
        if goals.contains(&front) {
            return Some(trace(&parent, state, front, width));
        }
        let mut relax = |next: usize, c: u32, edge: Edge, heap: &mut BinaryHeap<Reverse<(u32, usize)>>| {
            if cost + c < dist[next] {
                dist[next] = cost + c;
                parent[next] = (state, edge);
                heap.push(Reverse((cost + c, next)));
            }
        };
        relax(index(pos, (d + 3) % 4), 1, Edge::Left, &mut heap);
        relax(index(pos, (d + 1) % 4), 1, Edge::Right, &mut heap);
        if !w.grid.in_bounds(front.0, front.1) || front.0 >= width || front.1 >= height {
            continue;
        }
        let next = index(front, d);
        match w.grid.get(front.0, front.1) {
            None => relax(next, 1, Edge::Forward, &mut heap),
            Some(o) => match o.kind {
                ObjKind::Door if o.is_open => relax(next, 1, Edge::Forward, &mut heap),
                ObjKind::Door => {
                    let extra = if opts.avoid.contains(&o.id) { AVOID_COST } else { 0 };
                    if !o.is_locked {
                        relax(next, 2 + extra, Edge::ToggleForward, &mut heap);
                    } else if carried_key == Some(o.color) {
                        relax(next, 2 + extra, Edge::UnlockForward, &mut heap);
                    } else if opts.relaxed {
                        relax(next, 2 + extra + LOCK_COST, Edge::Obstacle, &mut heap);
                    }
                }
                ObjKind::Key | ObjKind::Ball | ObjKind::Box if opts.relaxed => {
                    relax(next, 1 + BLOCK_COST, Edge::Obstacle, &mut heap)
                }
                ObjKind::Floor | ObjKind::Goal => relax(next, 1, Edge::Forward, &mut heap),
                _ => {}
            },
        }
    }
    None
}

fn trace(parent: &[(usize, Edge)], mut state: usize, target: (i32, i32), width: i32) -> Found {
    let mut moves = Vec::new();
    let mut events = Vec::new();
    let mut cells = Vec::new();
    loop {
        let (prev, edge) = parent[state];
        if edge == Edge::Start || prev == usize::MAX {
            break;
        }
        if !matches!(edge, Edge::Left | Edge::Right) {
            let cell = state / 4;
            cells.push(((cell as i32) % width, (cell as i32) / width));
        }
        match edge {
            Edge::Left => moves.push(Action::Left),
            Edge::Right => moves.push(Action::Right),
            Edge::Forward => moves.push(Action::Forward),
            Edge::ToggleForward => moves.extend([Action::Forward, Action::Toggle]),
            Edge::UnlockForward => {
                moves.extend([Action::Forward, Action::Toggle]);
                let cell = state / 4;
                events.push((Event::Unlock, ((cell as i32) % width, (cell as i32) / width)));
            }
            Edge::Obstacle => {
                moves.push(Action::Forward);
                let cell = state / 4;
                events.push((Event::Obstacle, ((cell as i32) % width, (cell as i32) / width)));
            }
            Edge::Start => {}
        }
        state = prev;
    }
    moves.reverse();
    events.reverse();
    cells.reverse();
    Found { moves, target, events, cells }
}

// ---------------------------------------------------------------------------------------------
// Words

fn name(o: &Obj) -> String {
    match o.kind {
        ObjKind::Door => format!("{} door", o.color.name()),
        kind => format!("{} {}", o.color.name(), kind.name()),
    }
}

fn describe_purpose(p: &Purpose) -> String {
    match p {
        Purpose::GoTo => "go to the target".into(),
        Purpose::Open => "open the door".into(),
        Purpose::Pickup => "pick up the object".into(),
        Purpose::Fetch { fixed } => format!("fetch the object to put next to the {fixed}"),
        Purpose::PutDown { fixed, .. } => format!("put the object down next to the {fixed}"),
        Purpose::Key { door } => format!("get the {} key", door.name()),
        Purpose::Clear { goal } => format!("clear the way to the {goal}"),
        Purpose::FreeHands => "free the hands".into(),
        Purpose::MakeRoom { fixed } => format!("make room beside the {fixed}"),
        Purpose::Unlock => "unlock the door".into(),
        Purpose::Close => "close the door".into(),
    }
}

/// Where `cell` lies from the agent, in its frame: "right in front of me", "3 steps ahead
/// and 2 steps to my left".
fn relative(w: &World, cell: (i32, i32)) -> String {
    let f = DIR_TO_VEC[w.agent_dir as usize % 4];
    let r = DIR_TO_VEC[(w.agent_dir as usize + 1) % 4];
    let rel = (cell.0 - w.agent_pos.0, cell.1 - w.agent_pos.1);
    let ahead = f.0 * rel.0 + f.1 * rel.1;
    let right = r.0 * rel.0 + r.1 * rel.1;
    if ahead == 1 && right == 0 {
        return "right in front of me".into();
    }
    let steps = |n: i32| if n == 1 { "1 step".to_string() } else { format!("{n} steps") };
    let mut parts = Vec::new();
    match ahead.cmp(&0) {
        std::cmp::Ordering::Greater => parts.push(format!("{} ahead", steps(ahead))),
        std::cmp::Ordering::Less => parts.push(format!("{} behind me", steps(-ahead))),
        std::cmp::Ordering::Equal => {}
    }
    match right.cmp(&0) {
        std::cmp::Ordering::Greater => parts.push(format!("{} to my right", steps(right))),
        std::cmp::Ordering::Less => parts.push(format!("{} to my left", steps(-right))),
        std::cmp::Ordering::Equal => {}
    }
    parts.join(" and ")
}

/// What the agent knows of the segment's target, as a clause.
fn situation(w: &World, scene: &Scene, seg: &Segment) -> String {
    let visible = |cell: (i32, i32)| scene.things.iter().any(|t| t.pos == cell);
    let thing = w.grid.get(seg.target.0, seg.target.1);
    let target_name = thing.map_or_else(|| "spot".to_string(), name);
    let at = |what: &str, cell: (i32, i32)| {
        let the = if what == "it" { "it".to_string() } else { format!("the {what}") };
        if visible(cell) {
            format!("{the} is {}", relative(w, cell))
        } else {
            format!("I do not see {the} yet")
        }
    };
    let carried = w.carrying.as_ref().map_or_else(String::new, name);
    let text = match &seg.purpose {
        Purpose::GoTo | Purpose::Open | Purpose::Pickup => at(&target_name, seg.target),
        Purpose::Close => {
            format!("The {target_name} is open already and only opening it counts, and {}", at("it", seg.target))
        }
        Purpose::Fetch { fixed } => {
            format!("I need the {target_name} to put next to the {fixed}, and {}", at("it", seg.target))
        }
        Purpose::PutDown { fixed, anchors } => {
            let fixed_cell = DIR_TO_VEC
                .iter()
                .map(|(dx, dy)| (seg.target.0 + dx, seg.target.1 + dy))
                .find(|c| anchors.contains(c))
                .unwrap_or(seg.target);
            format!("I carry the {carried}, and {}", at(fixed, fixed_cell))
        }
        Purpose::Key { door } => {
            let d = door.name();
            format!("The {d} door on my way is locked, so I need the {d} key, and {}", at("key", seg.target))
        }
        Purpose::Clear { goal } => {
            format!("The {target_name} blocks my way to the {goal}, and {}", at("it", seg.target))
        }
        Purpose::FreeHands => format!("My hands are full with the {carried} and I need them free"),
        Purpose::MakeRoom { fixed } => {
            format!("Every cell beside the {fixed} is taken, so I move one of those objects away")
        }
        Purpose::Unlock => {
            format!("I have the {carried} for the locked {target_name} on my way, and {}", at("door", seg.target))
        }
    };
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().collect::<String>() + chars.as_str())
}

/// What the chosen action does, as a clause.
fn intent(w: &World, seg: &Segment, action: &str, moves: &[Action], completes: bool) -> String {
    let label = action.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end();
    let object = |prefix: &str| {
        let rest = label.strip_prefix(prefix).unwrap_or(label);
        rest.replace(" closed door", " door").replace(" locked door", " door").replace(" open door", " door")
    };
    let towards = match &seg.purpose {
        Purpose::FreeHands => " to find a free spot",
        _ if completes => "",
        _ => " towards it",
    };
    let last = moves.last().copied();
    match last {
        Some(Action::Pickup) if moves.len() > 1 => "I go and pick it up".into(),
        Some(Action::Pickup) => "I pick it up".into(),
        Some(Action::Drop) => match &seg.purpose {
            Purpose::PutDown { fixed, .. } => format!("I put it down next to the {fixed}"),
            _ => "I put it down here, out of the way".into(),
        },
        Some(Action::Toggle) if seg.purpose == Purpose::Close => "I close it first".into(),
        Some(Action::Toggle) if label == "toggle" => match seg.purpose {
            Purpose::Open | Purpose::Unlock => "I open it".into(),
            _ => "I open the door in front of me".into(),
        },
        Some(Action::Toggle) => "I open it".into(),
        _ if action.starts_with("toggle and go through ") => {
            format!("I open the {} and go through it", object("toggle and go through "))
        }
        _ if action.starts_with("go through ") => format!("I go through the {}", object("go through ")),
        _ if action.starts_with("go to ") => {
            if completes || seg.cells.contains(&facing_after(w, moves)) {
                "I go to it".into()
            } else {
                format!("I go to the {} on my way", object("go to "))
            }
        }
        Some(Action::Left) if moves.len() == 1 => format!("I turn left{towards}"),
        Some(Action::Right) if moves.len() == 1 => format!("I turn right{towards}"),
        Some(Action::Forward) if moves.len() == 1 => format!("I move forward{towards}"),
        _ => format!("I {action}"),
    }
}

/// The cell faced after `moves` from the agent's state, by kinematics alone.
fn facing_after(w: &World, moves: &[Action]) -> (i32, i32) {
    let (mut pos, mut d) = (w.agent_pos, w.agent_dir);
    for a in moves {
        match a {
            Action::Left => d = (d + 3) % 4,
            Action::Right => d = (d + 1) % 4,
            Action::Forward => pos = (pos.0 + DIR_TO_VEC[d as usize].0, pos.1 + DIR_TO_VEC[d as usize].1),
            _ => {}
        }
    }
    (pos.0 + DIR_TO_VEC[d as usize].0, pos.1 + DIR_TO_VEC[d as usize].1)
}

#[cfg(test)]
mod tests {
    use super::super::levels::{self, Worlds};
    use super::super::{BabyAiEnv, Source, NUM_LEVELS};
    use super::*;
    use crate::env::{EnvError, TextEnv};
    use crate::rng::Rng;

    /// An episode played by the expert: whether it succeeded, its moves, and why it stopped
    /// early (empty on success).
    struct Played {
        success: bool,
        moves: Vec<ExpertMove>,
        why: String,
    }

    fn play_expert(e: &mut BabyAiEnv) -> Played {
        let mut moves = Vec::new();
        for _ in 0..2000 {
            let m = match e.expert() {
                Ok(m) => m,
                Err(err) => return Played { success: false, moves, why: err.to_string() },
            };
            let listed = e.available_actions().unwrap();
            assert!(e.primitive || listed.contains(&m.action), "{:?} is not listed: {listed:?}", m.action);
            let out = e.step(&m.action);
            moves.push(m);
            if out.done {
                let why = if out.reward > 0.0 { String::new() } else { "the episode ended unsolved".into() };
                return Played { success: out.reward > 0.0, moves, why };
            }
        }
        Played { success: false, moves, why: "too many turns".into() }
    }

    fn task_env(task: u64, primitive: bool) -> BabyAiEnv {
        worlds_env(task, primitive, Worlds::AgentGym)
    }

    fn worlds_env(task: u64, primitive: bool, worlds: Worlds) -> BabyAiEnv {
        let mut e = BabyAiEnv::new(Source::Levels(worlds), primitive);
        e.reset(task).unwrap();
        e
    }

    /// Levels where text-mode failures are expected, with the reason the bot gives.
    fn expected_failure(level: &str, why: &str, primitive: bool) -> bool {
        match level {
            "BabyAI-KeyInBox-v0" => !primitive && why.contains("cannot open boxes"),
            "BabyAI-OpenDoorsOrderN4Debug-v0" => why.contains("strict"),
            _ => false,
        }
    }

    fn check_levels(seeds: u64, primitive: bool, worlds: Worlds) -> u64 {
        let mut solved = 0;
        for level in 0..NUM_LEVELS {
            let name = levels::LEVELS[level as usize];
            for seed in 0..seeds {
                let task = level + NUM_LEVELS * seed;
                let played = play_expert(&mut worlds_env(task, primitive, worlds));
                if played.success {
                    solved += 1;
                    assert!(played.moves.iter().all(|m| m.thought.ends_with('.') && m.thought.contains("; I ")));
                } else {
                    assert!(expected_failure(name, &played.why, primitive), "{name} task {task}: {}", played.why);
                }
            }
        }
        solved
    }

    #[test]
    fn solves_every_level_in_text_mode_but_the_unsolvable() {
        let seeds = 4;
        for worlds in [Worlds::AgentGym, Worlds::Own] {
            let solved = check_levels(seeds, false, worlds);
            // KeyInBox (no box toggle in the text menu) and most of OpenDoorsOrderN4Debug fail.
            assert!(solved >= (NUM_LEVELS - 2) * seeds, "{worlds:?}: {solved}");
        }
    }

    #[test]
    fn solves_every_level_in_primitive_mode_but_the_unsolvable() {
        let seeds = 2;
        for worlds in [Worlds::AgentGym, Worlds::Own] {
            let solved = check_levels(seeds, true, worlds);
            assert!(solved >= (NUM_LEVELS - 1) * seeds, "{worlds:?}: {solved}");
        }
    }

    #[test]
    fn same_task_same_demo() {
        for task in [6, 27, 28, 31, 38 + NUM_LEVELS, 39 + 2 * NUM_LEVELS] {
            let a = play_expert(&mut task_env(task, false));
            let b = play_expert(&mut task_env(task, false));
            assert!(a.success, "task {task}: {}", a.why);
            assert_eq!(a.moves, b.moves, "task {task}");
        }
    }

    #[test]
    fn uses_macros_and_says_why() {
        // GoToRedBallGrey: one macro to the ball, its reason names the ball and where it is.
        let played = play_expert(&mut task_env(0, false));
        assert!(played.success);
        let first = &played.moves[0];
        assert!(first.action.starts_with("go to red ball") || first.action.starts_with("turn"), "{first:?}");
        assert!(
            first.thought.starts_with("The red ball is ") || first.thought.starts_with("I do not see the red ball")
        );
        // A locked door: the reason names the key it needs.
        let unlock = levels::level_index("BlockedUnlockPickup").unwrap() as u64;
        let played = play_expert(&mut task_env(unlock + NUM_LEVELS, false));
        assert!(played.success, "{}", played.why);
        assert!(played.moves.iter().any(|m| m.thought.contains("is locked, so I need the")), "{:?}", played.moves);
        assert!(played.moves.iter().any(|m| m.action.starts_with("pickup ") && m.action.contains(" key ")));
    }

    #[test]
    fn never_panics_from_random_states() {
        for task in 0..NUM_LEVELS * 2 {
            let mut e = task_env(task, false);
            let mut rng = Rng::new(task);
            for _ in 0..15 {
                let _ = e.expert();
                let actions = e.available_actions().unwrap();
                let action = rng.choice(&actions).clone();
                if e.step(&action).done {
                    break;
                }
            }
            match e.expert() {
                Ok(m) => assert!(e.available_actions().unwrap().contains(&m.action)),
                Err(EnvError::Unsupported(why)) => assert!(!why.is_empty()),
                Err(other) => panic!("unexpected error {other:?}"),
            }
        }
        let fresh = BabyAiEnv::new(Source::Levels(Worlds::AgentGym), false);
        assert!(matches!(fresh.expert(), Err(EnvError::Unsupported(_))));
    }

    /// Success counts per level over `BOT_SEEDS` seeds (default 0: skipped), printed:
    /// `BOT_SEEDS=100 cargo test --release -p agentgym-envserver bot::tests::table -- --nocapture`.
    #[test]
    fn table() {
        let seeds: u64 = std::env::var("BOT_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        for level in 0..NUM_LEVELS * u64::from(seeds > 0) {
            let mut ok = 0;
            let mut failures = Vec::new();
            for seed in 0..seeds {
                let task = level + NUM_LEVELS * seed;
                let played = play_expert(&mut task_env(task, false));
                if played.success {
                    ok += 1;
                } else {
                    failures.push(format!("{task}: {}", played.why));
                }
            }
            println!("{:<40} {ok:>4}/{seeds} {:?}", levels::LEVELS[level as usize], failures.first());
        }
    }
}
