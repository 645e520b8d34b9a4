//! Goals: which items are worth crafting (crafting depth), in a machine-independent order, and
//! the reset observation listing the commands that craft them plus distractors.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::recipes::{display_name, RecipeBook};
use crate::rng::Rng;

/// At most this many uses of each ingredient are drawn as distractor candidates (as the
/// reference does).
const USES_PER_INGREDIENT: usize = 10;

/// One task: an item to craft and its minimum crafting depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goal {
    /// Item id, `minecraft:stone_hoe`.
    pub item: String,
    pub depth: u32,
}

/// The minimum number of crafting levels needed to make `name` from base items: 0 for a base
/// item; for a craftable one, the easiest recipe's hardest ingredient plus one.
pub fn min_depth(book: &RecipeBook, name: &str, memo: &mut HashMap<String, u32>) -> u32 {
    let mut in_progress = HashSet::new();
    depth_of(book, name, memo, &mut in_progress)
}

fn depth_of(book: &RecipeBook, name: &str, memo: &mut HashMap<String, u32>, in_progress: &mut HashSet<String>) -> u32 {
    if let Some(&d) = memo.get(name) {
        return d;
    }
    // Loading removes cycles; a leftover one (through tags) counts as a base item here rather
    // than recursing forever.
    if !in_progress.insert(name.to_string()) {
        return 0;
    }
    let mut best: Option<u32> = None;
    for &index in book.recipes_for(name) {
        let recipe = &book.recipes[index];
        let hardest =
            recipe.inputs.iter().map(|input| depth_of(book, &input.name, memo, in_progress) + 1).max().unwrap_or(1);
        best = Some(best.map_or(hardest, |b| b.min(hardest)));
    }
    in_progress.remove(name);
    let depth = best.unwrap_or(0);
    memo.insert(name.to_string(), depth);
    depth
}

/// Craftable items of depth at least `min_goal_depth`, deepest first, ties by item id: the
/// task id is the index into this list.
pub fn goals(book: &RecipeBook, min_goal_depth: u32) -> Vec<Goal> {
    let mut memo = HashMap::new();
    let mut goals: Vec<Goal> = book
        .craftable_items()
        .into_iter()
        .map(|item| Goal { item: item.to_string(), depth: min_depth(book, item, &mut memo) })
        .filter(|g| g.depth >= min_goal_depth)
        .collect();
    goals.sort_by(|a, b| b.depth.cmp(&a.depth).then_with(|| a.item.cmp(&b.item)));
    goals
}

/// Every recipe that can take part in crafting `item`: its recipes, then (recursively) the
/// recipes of their ingredients, tags standing for all their members' recipes. Load order.
pub fn recipe_tree(book: &RecipeBook, item: &str) -> Vec<usize> {
    let mut seen_names: HashSet<&str> = HashSet::from([item]);
    let mut stack = vec![item];
    let mut tree = BTreeSet::new();
    while let Some(name) = stack.pop() {
        for &index in book.recipes_for(name) {
            if !tree.insert(index) {
                continue;
            }
            for input in &book.recipes[index].inputs {
                if seen_names.insert(&input.name) {
                    stack.push(&input.name);
                }
            }
        }
    }
    tree.into_iter().collect()
}

/// The reset observation for `goal`: the command lines of its recipe tree plus up to
/// `max_distractors` other recipes that use the same ingredients, shuffled by `rng`.
pub fn reset_observation(book: &RecipeBook, goal: &str, max_distractors: usize, rng: &mut Rng) -> String {
    let tree = recipe_tree(book, goal);
    let tree_lines: BTreeSet<&str> = tree.iter().map(|&i| book.recipes[i].line.as_str()).collect();
    let ingredients: BTreeSet<&str> =
        tree.iter().flat_map(|&i| book.recipes[i].inputs.iter().map(|input| input.name.as_str())).collect();
    let mut candidates = BTreeSet::new();
    for name in ingredients {
        let uses = book.uses_of(name);
        for index in sample(uses, USES_PER_INGREDIENT, rng) {
            let line = book.recipes[index].line.as_str();
            if !tree_lines.contains(line) {
                candidates.insert(line);
            }
        }
    }
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let mut lines: Vec<&str> = tree_lines.into_iter().collect();
    lines.extend(sample(&candidates, max_distractors, rng));
    rng.shuffle(&mut lines);
    format!("Crafting commands:\n{}\n\nGoal: craft {}.", lines.join("\n"), display_name(goal))
}

/// `min(k, len)` distinct elements drawn uniformly, in draw order.
fn sample<T: Copy>(items: &[T], k: usize, rng: &mut Rng) -> Vec<T> {
    let mut pool = items.to_vec();
    let k = k.min(pool.len());
    for i in 0..k {
        let j = i + rng.index(pool.len() - i);
        pool.swap(i, j);
    }
    pool.truncate(k);
    pool
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture() -> RecipeBook {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/textcraft");
        RecipeBook::load(&dir).expect("fixture loads")
    }

    #[test]
    fn depths_follow_easiest_recipe() {
        let book = fixture();
        let mut memo = HashMap::new();
        let mut depth = |name: &str| min_depth(&book, name, &mut memo);
        assert_eq!(depth("minecraft:oak_logs"), 0);
        assert_eq!(depth("minecraft:oak_planks"), 1);
        assert_eq!(depth("minecraft:planks"), 1);
        assert_eq!(depth("minecraft:stick"), 2);
        assert_eq!(depth("minecraft:torch"), 3);
        assert_eq!(depth("minecraft:lantern"), 4);
    }

    #[test]
    fn goals_sorted_by_depth_then_name() {
        let goals = goals(&fixture(), 2);
        let names: Vec<(&str, u32)> = goals.iter().map(|g| (g.item.as_str(), g.depth)).collect();
        assert_eq!(
            names,
            [
                ("minecraft:lantern", 4),
                ("minecraft:bookshelf", 3),
                ("minecraft:stone_axe", 3),
                ("minecraft:torch", 3),
                ("minecraft:wooden_pickaxe", 3),
                ("minecraft:book", 2),
                ("minecraft:bucket", 2),
                ("minecraft:iron_block", 2),
                ("minecraft:stick", 2),
                ("minecraft:white_bed", 2),
            ]
        );
    }

    #[test]
    fn tree_expands_tags_to_all_members() {
        let book = fixture();
        let lines: BTreeSet<&str> =
            recipe_tree(&book, "minecraft:torch").iter().map(|&i| book.recipes[i].line.as_str()).collect();
        let expected: BTreeSet<&str> = [
            "craft 4 torch using 1 coal, 1 stick",
            "craft 4 stick using 2 planks",
            "craft 4 oak planks using 1 oak logs",
            "craft 4 birch planks using 1 birch logs",
        ]
        .into();
        assert_eq!(lines, expected);
    }

    #[test]
    fn reset_observation_has_tree_and_distractors() {
        let book = fixture();
        let obs = reset_observation(&book, "minecraft:torch", 10, &mut Rng::new(3));
        let (commands, goal) = obs.split_once("\n\n").unwrap();
        assert_eq!(goal, "Goal: craft torch.");
        let lines: BTreeSet<&str> = commands.strip_prefix("Crafting commands:\n").unwrap().lines().collect();
        for needed in ["craft 4 torch using 1 coal, 1 stick", "craft 4 stick using 2 planks"] {
            assert!(lines.contains(needed), "{obs}");
        }
        // Distractors use the same ingredients: planks and sticks go into pickaxes, beds, ...
        assert!(lines.contains("craft 1 wooden pickaxe using 3 planks, 2 stick"), "{obs}");
        assert!(!lines.contains("craft 3 paper using 3 sugar cane"), "{obs}");
        let none = reset_observation(&book, "minecraft:torch", 0, &mut Rng::new(3));
        assert_eq!(none.lines().count(), 4 + 3);
    }

    #[test]
    fn sample_is_distinct_and_bounded() {
        let mut rng = Rng::new(1);
        let items: Vec<u32> = (0..20).collect();
        let picked = sample(&items, 10, &mut rng);
        assert_eq!(picked.len(), 10);
        assert_eq!(picked.iter().collect::<HashSet<_>>().len(), 10);
        assert_eq!(sample(&items[..3], 10, &mut rng).len(), 3);
    }
}
