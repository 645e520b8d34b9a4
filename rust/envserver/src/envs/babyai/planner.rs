//! The breadth-first planner that turns a high-level action ("go to red ball 1") into
//! primitive moves, searching (cell, heading) states over what the agent currently sees.
//!
//! It reproduces AgentGym's search exactly, because the chosen path decides the episode:
//! the search window is AgentGym's (the view square, shifted by one cell on some sides),
//! moves are tried in the order forward, left, right, the queue admits duplicates, a state
//! counts as visited when dequeued, and a state's parent is the last state that enqueued it.

use super::grid::{Action, DIR_TO_VEC};

/// Row stride of cell indices: a window is at most 8 cells wide (7x7 view: 8x8 at most), so
/// a cell's index is `row * 8 + column` and turns back into a cell with a shift and a mask.
const STRIDE: i32 = 8;
/// Most cells a search window may have.
const MAX_CELLS: usize = (STRIDE * STRIDE) as usize;
const MAX_STATES: usize = MAX_CELLS * 4;
/// No state (states are below `MAX_STATES`).
const NONE: u16 = u16::MAX;
/// The change of cell index of a forward move in each direction (`DIR_TO_VEC` with rows of
/// [`STRIDE`] cells).
const STEP: [i32; 4] = [1, STRIDE, -1, -STRIDE];

/// The rectangle of cells the planner may use: `x0..x1` by `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchWindow {
    pub x0: i32,
    pub x1: i32,
    pub y0: i32,
    pub y1: i32,
}

impl SearchWindow {
    /// AgentGym's window for an agent at `pos` facing `dir` with a `size` x `size` view:
    /// from the view's far-left corner `c`, the opposite corner `o = c + size * (right -
    /// forward)`; per axis the range is `o..=c` when `o < c`, else `c..o`.
    pub fn around(pos: (i32, i32), dir: u8, size: i32) -> Self {
        let f = DIR_TO_VEC[dir as usize % 4];
        let r = DIR_TO_VEC[(dir as usize + 1) % 4];
        let c = (pos.0 + f.0 * (size - 1) - r.0 * (size / 2), pos.1 + f.1 * (size - 1) - r.1 * (size / 2));
        let o = (c.0 + size * (r.0 - f.0), c.1 + size * (r.1 - f.1));
        let span = |c: i32, o: i32| if o < c { (o, c + 1) } else { (c, o) };
        let (x0, x1) = span(c.0, o.0);
        let (y0, y1) = span(c.1, o.1);
        let w = Self { x0, x1, y0, y1 };
        assert!(w.width() <= STRIDE && w.y1 - w.y0 <= STRIDE, "search window too large: {w:?}");
        w
    }

    pub fn contains(&self, (x, y): (i32, i32)) -> bool {
        x >= self.x0 && x < self.x1 && y >= self.y0 && y < self.y1
    }

    fn width(&self) -> i32 {
        self.x1 - self.x0
    }

    /// Every cell of the window, as a bit set (bit = [`Self::cell_index`]).
    fn cells(&self) -> u64 {
        let row = (1u64 << self.width()) - 1;
        (0..self.y1 - self.y0).fold(0, |bits, r| bits | row << (r * STRIDE))
    }

    /// The indices of the window's cells.
    fn cell_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (self.y0..self.y1).flat_map(move |y| (self.x0..self.x1).map(move |x| self.cell_index((x, y))))
    }

    /// The window's cells for which `blocked` holds, as a bit set (bit = [`Self::cell_index`]).
    pub fn mask(&self, blocked: impl Fn((i32, i32)) -> bool) -> u64 {
        self.cell_indices().filter(|&k| blocked(self.cell_at(k))).fold(0, |bits, k| bits | (1 << k))
    }

    /// Index of a cell of the window (row-major with a stride of 8), below 64.
    pub fn cell_index(&self, (x, y): (i32, i32)) -> usize {
        ((y - self.y0) * STRIDE + (x - self.x0)) as usize
    }

    fn cell_at(&self, index: usize) -> (i32, i32) {
        (self.x0 + (index as i32 & (STRIDE - 1)), self.y0 + (index as i32 >> 3))
    }
}

/// The state reached by one move.
#[cfg(test)]
fn apply(pos: (i32, i32), dir: u8, action: Action) -> ((i32, i32), u8) {
    match action {
        Action::Forward => {
            let v = DIR_TO_VEC[dir as usize];
            ((pos.0 + v.0, pos.1 + v.1), dir)
        }
        Action::Left => (pos, (dir + 3) % 4),
        Action::Right => (pos, (dir + 1) % 4),
        _ => (pos, dir),
    }
}

/// Shortest move sequence from `(start, dir)` that ends on `target` (`arrive`) or facing it
/// (`!arrive`), through cells of `window` that are not `blocked`; `None` when there is none.
/// An empty path means the agent is already there.
///
/// AgentGym's search, one target at a time: the menu uses [`Reach`], and the tests check
/// `Reach` against this.
#[cfg(test)]
pub fn find_path(
    start: (i32, i32),
    dir: u8,
    target: (i32, i32),
    arrive: bool,
    window: &SearchWindow,
    blocked: impl Fn((i32, i32)) -> bool,
) -> Option<Vec<Action>> {
    debug_assert!(window.contains(start), "the agent lies outside its search window");
    let mut blocked_cell = [false; MAX_CELLS];
    for k in window.cell_indices() {
        blocked_cell[k] = blocked(window.cell_at(k));
    }
    let state_of = |pos: (i32, i32), d: u8| (window.cell_index(pos) * 4 + d as usize) as u16;
    let start_state = state_of(start, dir);
    let mut visited = [false; MAX_STATES];
    let mut parent = [(0u16, Action::Done); MAX_STATES];
    let mut queue: Vec<u16> = Vec::with_capacity(MAX_STATES);
    queue.push(start_state);
    let mut head = 0;
    while head < queue.len() {
        let state = queue[head];
        head += 1;
        visited[state as usize] = true;
        let pos = window.cell_at(state as usize / 4);
        let d = (state % 4) as u8;
        let v = DIR_TO_VEC[d as usize];
        let reached = if arrive { pos == target } else { (pos.0 + v.0, pos.1 + v.1) == target };
        if reached {
            let mut path = Vec::new();
            trace(&parent, start_state, state, &mut path);
            return Some(path);
        }
        for action in [Action::Forward, Action::Left, Action::Right] {
            let (npos, nd) = apply(pos, d, action);
            if !window.contains(npos) || blocked_cell[window.cell_index(npos)] {
                continue;
            }
            let next = state_of(npos, nd);
            if visited[next as usize] {
                continue;
            }
            queue.push(next);
            parent[next as usize] = (state, action);
        }
    }
    None
}

/// Every shortest path [`find_path`] would return from one agent state, for any number of
/// targets, from one shared search that runs only as far as the targets asked so far need.
///
/// `find_path` runs the same search for every target and stops at the first dequeued state
/// that reaches its target, so its answer is the reaching state that was dequeued first.
/// The trace from there is fixed by then: a state is never enqueued again once dequeued, so
/// its parent (and, by induction, its ancestors' parents) never changes after its first
/// dequeue. Recording when each state was first dequeued is therefore enough to give, for
/// any target, exactly the path `find_path` gives.
pub struct Reach {
    window: SearchWindow,
    /// Cells of `window` that may be entered (inside it and not blocked), one bit per
    /// [`SearchWindow::cell_index`]: a move's two checks become one bit test.
    free: u64,
    start_state: u16,
    /// Position in the first-dequeue order of each state; `u16::MAX` while not dequeued.
    order: [u16; MAX_STATES],
    parent: [(u16, Action); MAX_STATES],
    /// The search queue (it admits duplicates, as find_path's does) and its head.
    queue: Vec<u16>,
    head: usize,
    dequeued: u16,
}

impl Reach {
    /// A search from `(start, dir)` through the cells of `window` whose bit in `blocked` (see
    /// [`SearchWindow::mask`]) is clear.
    pub fn new(start: (i32, i32), dir: u8, window: &SearchWindow, blocked: u64) -> Self {
        debug_assert!(window.contains(start), "the agent lies outside its search window");
        let start_state = (window.cell_index(start) * 4 + dir as usize) as u16;
        let mut queue = Vec::with_capacity(MAX_STATES);
        queue.push(start_state);
        Self {
            window: *window,
            free: window.cells() & !blocked,
            start_state,
            order: [u16::MAX; MAX_STATES],
            parent: [(0u16, Action::Done); MAX_STATES],
            queue,
            head: 0,
            dequeued: 0,
        }
    }

    /// Dequeues and expands one state: `None` once the queue is empty, else `Some(state)` when
    /// this was `state`'s first dequeue and `Some(NONE)` for a repeated one.
    fn advance(&mut self) -> Option<u16> {
        let &state = self.queue.get(self.head)?;
        self.head += 1;
        let first = self.order[state as usize] == u16::MAX;
        if first {
            self.order[state as usize] = self.dequeued;
            self.dequeued += 1;
        }
        // The moves of `find_path` in its order (forward, left, right), on cell indices: a
        // move is taken when its cell is free; forward must not leave the 8-wide index rows.
        let cell = i32::from(state >> 2);
        let d = usize::from(state & 3);
        let ahead = cell + STEP[d];
        let leaves_row = match d {
            0 => cell & (STRIDE - 1) == STRIDE - 1,
            2 => cell & (STRIDE - 1) == 0,
            _ => false,
        };
        let here = (cell * 4) as u16;
        let moves = [
            (!leaves_row && self.is_free(ahead), (ahead * 4) as u16 + d as u16, Action::Forward),
            (self.is_free(cell), here + ((d as u16 + 3) & 3), Action::Left),
            (self.is_free(cell), here + ((d as u16 + 1) & 3), Action::Right),
        ];
        for (allowed, next, action) in moves {
            if !allowed || self.order[next as usize] != u16::MAX {
                continue;
            }
            self.queue.push(next);
            self.parent[next as usize] = (state, action);
        }
        Some(if first { state } else { NONE })
    }

    /// Whether cell index `cell` (any integer) is a free cell of the window.
    fn is_free(&self, cell: i32) -> bool {
        (0..MAX_CELLS as i32).contains(&cell) && self.free >> cell & 1 != 0
    }

    /// What `find_path(start, dir, target, arrive, window, blocked)` returns.
    pub fn path(&mut self, target: (i32, i32), arrive: bool) -> Option<Vec<Action>> {
        let mut out = Vec::new();
        self.path_into(target, arrive, &mut out).then_some(out)
    }

    /// [`Reach::path`] written into `out` (cleared first); false when there is no path.
    pub fn path_into(&mut self, target: (i32, i32), arrive: bool, out: &mut Vec<Action>) -> bool {
        // The states that reach the target: the target cell in each heading (`arrive`), or
        // the cell before it facing it.
        let mut reaching = [NONE; 4];
        for (d, slot) in reaching.iter_mut().enumerate() {
            let pos = reaching_cell(target, arrive, d);
            if self.window.contains(pos) {
                *slot = (self.window.cell_index(pos) * 4 + d) as u16;
            }
        }
        // The earliest-dequeued of them so far wins: a later one cannot beat it. Failing
        // that, the search goes on until one of them is dequeued for the first time.
        let known = reaching.iter().filter(|&&s| s != NONE && self.order[s as usize] != u16::MAX);
        let found = match known.min_by_key(|&&s| self.order[s as usize]) {
            Some(&state) => Some(state),
            None => loop {
                match self.advance() {
                    None => break None,
                    Some(state) if state != NONE && reaching.contains(&state) => break Some(state),
                    Some(_) => {}
                }
            },
        };
        match found {
            Some(state) => {
                trace(&self.parent, self.start_state, state, out);
                true
            }
            None => false,
        }
    }
}

/// Whether [`find_path`] finds a path from one agent state, and whether that path is empty,
/// for any target, without running the search: the states the search visits are every
/// heading of every cell of the 4-connected free region around the agent (a free cell can be
/// left in any direction after turning in place), so a target is reachable exactly when one
/// of its reaching states lies in that region. Building the menu needs only this; the path
/// itself is searched ([`Reach`]) for the one action a step takes.
pub struct Reachable {
    window: SearchWindow,
    start: (i32, i32),
    dir: u8,
    blocked: u64,
    /// The region's cells (bit = [`SearchWindow::cell_index`]); `None` when the agent's own
    /// cell is blocked (it cannot turn there), where the answers come from the search itself.
    region: Option<u64>,
}

/// Bits of the cells in the first and last columns of an index row.
const FIRST_COLUMN: u64 = 0x0101_0101_0101_0101;
const LAST_COLUMN: u64 = FIRST_COLUMN << (STRIDE - 1);

impl Reachable {
    /// The region reachable from `(start, dir)` through the cells of `window` whose bit in
    /// `blocked` is clear (see [`Reach::new`]).
    pub fn new(start: (i32, i32), dir: u8, window: &SearchWindow, blocked: u64) -> Self {
        debug_assert!(window.contains(start), "the agent lies outside its search window");
        let free = window.cells() & !blocked;
        let seed = 1u64 << window.cell_index(start);
        let region = (free & seed != 0).then(|| {
            let mut region = seed;
            loop {
                let grown = region
                    | (region << 1 & !FIRST_COLUMN)
                    | (region >> 1 & !LAST_COLUMN)
                    | region << STRIDE
                    | region >> STRIDE;
                let grown = grown & free;
                if grown == region {
                    break region;
                }
                region = grown;
            }
        });
        Self { window: *window, start, dir, blocked, region }
    }

    /// Whether `find_path(start, dir, target, arrive, window, blocked)` finds a path.
    pub fn reaches(&self, target: (i32, i32), arrive: bool) -> bool {
        let Some(region) = self.region else {
            return Reach::new(self.start, self.dir, &self.window, self.blocked).path(target, arrive).is_some();
        };
        (0..4).any(|d| {
            let pos = reaching_cell(target, arrive, d);
            self.window.contains(pos) && region >> self.window.cell_index(pos) & 1 != 0
        })
    }

    /// Whether that path is empty: the agent already stands on (`arrive`) or faces the target.
    pub fn at_start(&self, target: (i32, i32), arrive: bool) -> bool {
        reaching_cell(target, arrive, self.dir as usize) == self.start
    }
}

/// The cell from which heading `d` reaches `target`: the target itself (`arrive`), or the
/// cell before it in that heading.
fn reaching_cell(target: (i32, i32), arrive: bool, d: usize) -> (i32, i32) {
    let v = DIR_TO_VEC[d];
    if arrive {
        target
    } else {
        (target.0 - v.0, target.1 - v.1)
    }
}

/// The moves from `start` to `state`, written into `out` (cleared first).
fn trace(parent: &[(u16, Action)], start: u16, mut state: u16, out: &mut Vec<Action>) {
    out.clear();
    while state != start {
        let (prev, action) = parent[state as usize];
        out.push(action);
        state = prev;
    }
    out.reverse();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(mut pos: (i32, i32), mut dir: u8, path: &[Action]) -> ((i32, i32), u8) {
        for &a in path {
            (pos, dir) = apply(pos, dir, a);
        }
        (pos, dir)
    }

    #[test]
    fn window_matches_agentgym_for_each_heading() {
        let p = (10, 10);
        // (x range, y range) as AgentGym computes them; some include a cell behind.
        assert_eq!(SearchWindow::around(p, 0, 7), SearchWindow { x0: 9, x1: 17, y0: 7, y1: 14 });
        assert_eq!(SearchWindow::around(p, 1, 7), SearchWindow { x0: 6, x1: 14, y0: 9, y1: 17 });
        assert_eq!(SearchWindow::around(p, 2, 7), SearchWindow { x0: 4, x1: 11, y0: 6, y1: 14 });
        assert_eq!(SearchWindow::around(p, 3, 7), SearchWindow { x0: 7, x1: 14, y0: 4, y1: 11 });
    }

    #[test]
    fn reaches_and_faces_targets() {
        let start = (10, 10);
        let w = SearchWindow::around(start, 0, 7);
        let path = find_path(start, 0, (13, 12), false, &w, |_| false).unwrap();
        let (pos, dir) = walk(start, 0, &path);
        let v = DIR_TO_VEC[dir as usize];
        assert_eq!((pos.0 + v.0, pos.1 + v.1), (13, 12));
        // Shortest: 2 forwards, right turn, 2 forwards... ending facing the target.
        assert_eq!(path.len(), 5);
        let path = find_path(start, 0, (13, 12), true, &w, |_| false).unwrap();
        assert_eq!(walk(start, 0, &path).0, (13, 12));
        assert_eq!(path.len(), 6);
        // Already facing: nothing to do.
        assert_eq!(find_path(start, 0, (11, 10), false, &w, |_| false), Some(vec![]));
        assert_eq!(find_path(start, 0, (10, 10), true, &w, |_| false), Some(vec![]));
    }

    #[test]
    fn routes_around_blocks_and_fails_when_walled_in() {
        let start = (10, 10);
        let w = SearchWindow::around(start, 0, 7);
        // A wall segment straight ahead forces a detour.
        let wall = |(x, y): (i32, i32)| x == 12 && (8..=11).contains(&y);
        let path = find_path(start, 0, (14, 10), true, &w, wall).unwrap();
        let mut state = (start, 0u8);
        for &a in &path {
            state = apply(state.0, state.1, a);
            assert!(!wall(state.0), "path enters a blocked cell");
        }
        assert_eq!(state.0, (14, 10));
        // Boxed in on all four sides: no path.
        let boxed = |(x, y): (i32, i32)| (x - 10).abs() + (y - 10).abs() == 1;
        assert_eq!(find_path(start, 0, (14, 10), true, &w, boxed), None);
        // Targets outside the window are never reached.
        assert_eq!(find_path(start, 0, (30, 10), true, &w, |_| false), None);
    }

    #[test]
    fn reach_gives_find_paths_answer_for_every_target() {
        use crate::rng::Rng;
        let mut rng = Rng::new(7);
        for case in 0..2000 {
            let start = (10, 10);
            let dir = (case % 4) as u8;
            let w = SearchWindow::around(start, dir, 7);
            let walls: Vec<bool> = (0..64).map(|_| rng.index(100) < 30).collect();
            // Every tenth case the agent's own cell counts as blocked too (it cannot turn).
            let blocked = |p: (i32, i32)| (p != start || case % 10 == 0) && w.contains(p) && walls[w.cell_index(p)];
            let mut reach = Reach::new(start, dir, &w, w.mask(blocked));
            let reachable = Reachable::new(start, dir, &w, w.mask(blocked));
            for x in w.x0 - 1..=w.x1 {
                for y in w.y0 - 1..=w.y1 {
                    for arrive in [false, true] {
                        let expected = find_path(start, dir, (x, y), arrive, &w, blocked);
                        assert_eq!(reach.path((x, y), arrive), expected, "case {case} target {:?} {arrive}", (x, y));
                        let found = (reachable.reaches((x, y), arrive), reachable.at_start((x, y), arrive));
                        let wanted = (expected.is_some(), expected.as_ref().is_some_and(Vec::is_empty));
                        assert_eq!(found.0, wanted.0, "case {case} target {:?} {arrive}: reaches", (x, y));
                        if found.0 {
                            assert_eq!(found.1, wanted.1, "case {case} target {:?} {arrive}: at start", (x, y));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ties_resolve_like_agentgym() {
        // Equally short alternatives; the expected paths are what AgentGym's search picks
        // (checked against the Python reference).
        use Action::{Forward as F, Left as L, Right as R};
        let start = (10, 10);
        let w = SearchWindow::around(start, 0, 7);
        assert_eq!(find_path(start, 0, (9, 10), true, &w, |_| false), Some(vec![R, R, F]));
        let wall = |p: (i32, i32)| p == (12, 10);
        let path = find_path(start, 0, (13, 10), true, &w, wall);
        assert_eq!(path, Some(vec![L, F, R, F, F, F, R, F]));
    }
}
