//! Goals: which items are worth crafting (crafting depth), in a machine-independent order, and
//! the reset observation listing the commands that craft them plus distractors.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::recipes::{display_name, item_id, RecipeBook};
use crate::env::EnvError;
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

/// AgentGym's goals: every craftable item (each has depth >= 1, AgentGym's minimum), by depth
/// ascending, ties in the order the items' first kept recipes were loaded. Files load in name
/// order, so this is AgentGym's order on a filesystem that lists the recipe folder sorted (its
/// stable sort keeps the order in which items entered its recipe table). Task `t` is
/// `goals[t % len]`.
pub fn goals(book: &RecipeBook) -> Vec<Goal> {
    let mut memo = HashMap::new();
    let mut items: Vec<(usize, Goal)> = book
        .craftable_items()
        .into_iter()
        .map(|item| {
            let first_recipe = book.item_recipes(item)[0];
            (first_recipe, Goal { item: item.to_string(), depth: min_depth(book, item, &mut memo) })
        })
        .collect();
    items.sort_by_key(|(first_recipe, goal)| (goal.depth, *first_recipe));
    items.into_iter().map(|(_, goal)| goal).collect()
}

/// The goals a goal-order file lists, in its order: one item per line, as an id
/// (`minecraft:oak_planks`) or in words (`oak planks`); blank lines and `#` comments are
/// skipped. Each must be an item some recipe makes, listed once. `source` names the file in
/// errors.
pub fn goals_from_order(book: &RecipeBook, text: &str, source: &str) -> Result<Vec<Goal>, EnvError> {
    let mut memo = HashMap::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut goals = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let entry = raw.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        let item = if entry.starts_with("minecraft:") { entry.to_string() } else { item_id(entry) };
        if book.item_recipes(&item).is_empty() {
            return Err(EnvError::Data(format!("{source}:{line_no}: {entry:?} is not an item any recipe makes")));
        }
        if let Some(first) = seen.insert(item.clone(), line_no) {
            return Err(EnvError::Data(format!("{source}:{line_no}: {item} is listed twice (also on line {first})")));
        }
        let depth = min_depth(book, &item, &mut memo);
        goals.push(Goal { item, depth });
    }
    if goals.is_empty() {
        return Err(EnvError::Data(format!("{source}: lists no goals")));
    }
    Ok(goals)
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
    fn goals_by_depth_ascending_then_recipe_file() {
        let goals = goals(&fixture());
        let names: Vec<(&str, u32)> = goals.iter().map(|g| (g.item.as_str(), g.depth)).collect();
        assert_eq!(
            names,
            [
                ("minecraft:birch_planks", 1),
                ("minecraft:iron_ingot", 1),
                ("minecraft:oak_planks", 1),
                ("minecraft:paper", 1),
                ("minecraft:white_wool", 1),
                ("minecraft:book", 2),
                ("minecraft:bucket", 2),
                ("minecraft:iron_block", 2),
                ("minecraft:stick", 2),
                ("minecraft:white_bed", 2),
                ("minecraft:bookshelf", 3),
                ("minecraft:stone_axe", 3),
                ("minecraft:torch", 3),
                ("minecraft:wooden_pickaxe", 3),
                ("minecraft:lantern", 4),
            ]
        );
    }

    fn shapeless(output: &str, input: &str) -> String {
        format!(
            r#"{{"type": "minecraft:crafting_shapeless", "ingredients": [{{"item": "minecraft:{input}"}}],
                "result": {{"item": "minecraft:{output}"}}}}"#
        )
    }

    #[test]
    fn ties_keep_recipe_load_order_not_item_order() {
        // Loaded in this order (file name order on disk): zinc's recipe before apple's.
        let texts = [shapeless("zinc", "ore"), shapeless("apple", "seed"), shapeless("zinc", "dust")];
        let book = RecipeBook::from_json_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        let items: Vec<String> = goals(&book).into_iter().map(|g| g.item).collect();
        assert_eq!(items, ["minecraft:zinc", "minecraft:apple"]);
    }

    #[test]
    fn goal_order_file_lists_ids_or_words() {
        let book = fixture();
        let text = "# recorded from a server\nminecraft:torch\n\n  lantern  # words work too\noak planks\n";
        let goals = goals_from_order(&book, text, "order.txt").unwrap();
        let names: Vec<(&str, u32)> = goals.iter().map(|g| (g.item.as_str(), g.depth)).collect();
        assert_eq!(names, [("minecraft:torch", 3), ("minecraft:lantern", 4), ("minecraft:oak_planks", 1)]);
    }

    #[test]
    fn goal_order_file_errors_name_file_and_line() {
        let book = fixture();
        let error = |text: &str| goals_from_order(&book, text, "order.txt").unwrap_err().to_string();
        assert_eq!(error("torch\nunobtainium\n"), "order.txt:2: \"unobtainium\" is not an item any recipe makes");
        // a base item is fetched, not crafted: not a goal
        assert!(error("coal").starts_with("order.txt:1: \"coal\""));
        assert_eq!(
            error("torch\nlantern\nminecraft:torch"),
            "order.txt:3: minecraft:torch is listed twice (also on line 1)"
        );
        assert_eq!(error("# nothing\n\n"), "order.txt: lists no goals");
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
