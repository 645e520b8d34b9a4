//! One episode's state (the inventory) and what each command does to it, with the reference's
//! exact observation strings.

use super::commands::{self, count_value, normalized, py_repr, py_strip, split_count, Command, Count};
use super::recipes::{item_id, Recipe, RecipeBook};

/// Items carried, in the order they were first added (the inventory lists them so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    entries: Vec<(String, Count)>,
}

impl Inventory {
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn count(&self, item: &str) -> Option<Count> {
        self.entries.iter().find(|(id, _)| id == item).map(|&(_, n)| n)
    }

    pub fn entries(&self) -> &[(String, Count)] {
        &self.entries
    }

    fn add(&mut self, item: &str, n: Count) {
        match self.entries.iter_mut().find(|(id, _)| id == item) {
            Some(entry) => entry.1 = entry.1.saturating_add(n),
            None => self.entries.push((item.to_string(), n)),
        }
    }

    /// Takes `n` away; an entry that reaches exactly zero disappears (one that was already
    /// zero, or goes negative, stays, as in the reference).
    fn remove(&mut self, item: &str, n: Count) {
        match self.entries.iter().position(|(id, _)| id == item) {
            Some(at) => {
                let left = self.entries[at].1.saturating_sub(n);
                if left == 0 {
                    self.entries.remove(at);
                } else {
                    self.entries[at].1 = left;
                }
            }
            // Reachable only when a craft lists the same ingredient twice and the first
            // removal emptied it; the reference raises KeyError there. Keep the debt.
            None => self.entries.push((item.to_string(), -n)),
        }
    }

    /// The `inventory` observation.
    pub fn describe(&self) -> String {
        let mut out = String::with_capacity(16 + 24 * self.entries.len());
        out.push_str("Inventory: ");
        if self.entries.is_empty() {
            out.push_str("You are not carrying anything.");
        }
        for (id, n) in &self.entries {
            out.push('[');
            push_display_name(&mut out, id);
            out.push_str("] (");
            out.push_str(&n.to_string());
            out.push_str(") ");
        }
        out
    }
}

/// Appends `display_name(id)` without its intermediate strings (the inventory is printed on
/// every `inventory` step).
fn push_display_name(out: &mut String, id: &str) {
    for piece in id.split("minecraft:") {
        out.extend(piece.chars().map(|c| if c == '_' { ' ' } else { c }));
    }
}

/// The result of one command: the observation, and the item crafted if any.
pub struct Outcome {
    pub observation: String,
    pub crafted: Option<String>,
}

impl Outcome {
    fn says(observation: String) -> Self {
        Self { observation, crafted: None }
    }
}

/// Applies `action` to `inventory`.
pub fn apply(book: &RecipeBook, inventory: &mut Inventory, action: &str) -> Outcome {
    match commands::parse(action) {
        Command::Craft { output, inputs } => craft(book, inventory, output, inputs),
        Command::Get { count, item } => Outcome::says(get(book, inventory, count, item)),
        Command::Inventory => Outcome::says(inventory.describe()),
        Command::Unknown => Outcome::says(["Could not execute ", action].concat()),
    }
}

fn get(book: &RecipeBook, inventory: &mut Inventory, digits: &str, item: &str) -> String {
    let id = item_id(item);
    if !book.is_base_item(&id) {
        return ["Could not find ", item].concat();
    }
    inventory.add(&id, count_value(digits));
    ["Got ", normalized(digits), " ", item].concat()
}

/// An item named in a command: its id and whether that id is a tag.
struct Named {
    id: String,
    is_tag: bool,
}

impl Named {
    fn new(book: &RecipeBook, words: &str) -> Self {
        let id = item_id(words);
        let is_tag = book.is_tag(&id);
        Self { id, is_tag }
    }
}

fn craft(book: &RecipeBook, inventory: &mut Inventory, output: &str, inputs: &str) -> Outcome {
    let (out_digits, out_words) = split_count(output).unwrap_or(("1", output));
    let wanted_output = Named::new(book, out_words);
    let mut wanted = Vec::new();
    for piece in inputs.split(',') {
        let piece = py_strip(piece);
        let Some((digits, words)) = split_count(piece) else {
            return Outcome::says(["Wrong item format: ", piece].concat());
        };
        wanted.push((Named::new(book, words), count_value(digits)));
    }
    let carried =
        wanted.iter().all(|(named, n)| !named.is_tag && inventory.count(&named.id).is_some_and(|have| have >= *n));
    if !carried {
        // A tag has no item id; the reference prints Python's None for it.
        let shown = if wanted_output.is_tag { "None" } else { wanted_output.id.as_str() };
        return Outcome::says(["Could not find enough items to craft ", shown].concat());
    }
    let recipe = if wanted_output.is_tag {
        None
    } else {
        book.item_recipes(&wanted_output.id)
            .iter()
            .map(|&i| &book.recipes[i])
            .find(|recipe| matches(book, recipe, &wanted))
    };
    let Some(recipe) = recipe else {
        return Outcome::says(no_recipe_message(&wanted_output, normalized(out_digits)));
    };
    for (named, n) in &wanted {
        inventory.remove(&named.id, *n);
    }
    inventory.add(&recipe.output, Count::from(recipe.count));
    Outcome { observation: format!("Crafted {} {}", recipe.count, recipe.output), crafted: Some(recipe.output.clone()) }
}

/// Whether the listed ingredients are exactly the recipe's: each recipe ingredient matched by
/// one listed item (a tag by any member) with the same count, and nothing left over.
fn matches(book: &RecipeBook, recipe: &Recipe, wanted: &[(Named, Count)]) -> bool {
    let mut left: Vec<&(Named, Count)> = wanted.iter().collect();
    for needed in &recipe.inputs {
        let found = left.iter().position(|(named, _)| {
            if needed.is_tag {
                book.tag_of(&named.id) == Some(needed.name.as_str())
            } else {
                named.id == needed.name
            }
        });
        match found {
            Some(at) if left[at].1 == Count::from(needed.count) => {
                left.remove(at);
            }
            _ => return false,
        }
    }
    left.is_empty()
}

/// The reference prints its dataclass for the requested output here.
fn no_recipe_message(output: &Named, count: &str) -> String {
    let (tag, id) = if output.is_tag {
        (py_repr(&output.id), "None".to_string())
    } else {
        ("None".to_string(), py_repr(&output.id))
    };
    format!(
        "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag={tag}, \
         item_id={id}), count={count})"
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture() -> RecipeBook {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/textcraft");
        RecipeBook::load(&dir).expect("fixture loads")
    }

    fn run(book: &RecipeBook, inventory: &mut Inventory, action: &str) -> String {
        apply(book, inventory, action).observation
    }

    #[test]
    fn get_craft_inventory() {
        let book = fixture();
        let mut inv = Inventory::default();
        assert_eq!(run(&book, &mut inv, "inventory"), "Inventory: You are not carrying anything.");
        assert_eq!(run(&book, &mut inv, "get 2 oak logs"), "Got 2 oak logs");
        assert_eq!(run(&book, &mut inv, "craft 4 oak planks using 1 oak logs"), "Crafted 4 minecraft:oak_planks");
        // A tag ingredient accepts any member.
        let out = apply(&book, &mut inv, "craft 4 stick using 2 oak planks");
        assert_eq!(out.observation, "Crafted 4 minecraft:stick");
        assert_eq!(out.crafted.as_deref(), Some("minecraft:stick"));
        assert_eq!(run(&book, &mut inv, "inventory"), "Inventory: [oak logs] (1) [oak planks] (2) [stick] (4) ");
        // The requested output count is not checked, as in the reference.
        assert_eq!(run(&book, &mut inv, "craft 99 stick using 2 oak planks"), "Crafted 4 minecraft:stick");
        assert_eq!(run(&book, &mut inv, "inventory"), "Inventory: [oak logs] (1) [stick] (8) ");
    }

    #[test]
    fn get_refuses_craftables_tags_and_unknowns() {
        let book = fixture();
        let mut inv = Inventory::default();
        for item in ["oak planks", "planks", "stick", "diamond", "minecraft:oak logs", " oak logs"] {
            assert_eq!(run(&book, &mut inv, &format!("get 1 {item}")), format!("Could not find {item}"));
        }
        assert_eq!(run(&book, &mut inv, "get 007 coal"), "Got 7 coal");
        assert_eq!(run(&book, &mut inv, "get 0 leather"), "Got 0 leather");
        assert_eq!(run(&book, &mut inv, "inventory"), "Inventory: [coal] (7) [leather] (0) ");
    }

    #[test]
    fn craft_failures_say_why() {
        let book = fixture();
        let mut inv = Inventory::default();
        assert_eq!(run(&book, &mut inv, "craft x using 1"), "Wrong item format: 1");
        assert_eq!(run(&book, &mut inv, "craft x using "), "Wrong item format: ");
        assert_eq!(run(&book, &mut inv, "craft x using 1 a,  b "), "Wrong item format: b");
        assert_eq!(
            run(&book, &mut inv, "craft 4 stick using 2 oak planks"),
            "Could not find enough items to craft minecraft:stick"
        );
        assert_eq!(
            run(&book, &mut inv, "craft 4 planks using 2 oak planks"),
            "Could not find enough items to craft None"
        );
        run(&book, &mut inv, "get 3 oak logs");
        assert_eq!(
            run(&book, &mut inv, "craft 4 planks using 1 oak logs"),
            "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag='minecraft:planks', \
             item_id=None), count=4)"
        );
        assert_eq!(
            run(&book, &mut inv, "craft 01 it's using 1 oak logs"),
            "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, \
             item_id=\"minecraft:it's\"), count=1)"
        );
        // Wrong count, extra ingredient, same ingredient twice.
        for inputs in ["2 oak logs", "1 oak logs, 1 oak logs", "1 oak logs, 0 oak logs"] {
            let msg = run(&book, &mut inv, &format!("craft oak planks using {inputs}"));
            assert!(msg.starts_with("Could not find a valid recipe"), "{inputs}: {msg}");
        }
        assert_eq!(run(&book, &mut inv, "inventory"), "Inventory: [oak logs] (3) ");
    }

    #[test]
    fn tag_recipe_matches_member_items_only() {
        let book = fixture();
        let mut inv = Inventory::default();
        run(&book, &mut inv, "get 2 birch logs");
        run(&book, &mut inv, "craft 4 birch planks using 1 birch logs");
        run(&book, &mut inv, "craft 4 birch planks using 1 birch logs");
        run(&book, &mut inv, "get 1 string");
        assert_eq!(
            run(&book, &mut inv, "craft 1 white bed using 3 string, 3 birch planks"),
            "Could not find enough items to craft minecraft:white_bed"
        );
        run(&book, &mut inv, "get 9 string");
        assert!(run(&book, &mut inv, "craft 1 white bed using 3 string, 3 birch planks")
            .starts_with("Could not find a valid"));
        assert_eq!(run(&book, &mut inv, "craft 1 white wool using 4 string"), "Crafted 1 minecraft:white_wool");
    }

    #[test]
    fn inventory_names_match_display_name() {
        for id in ["minecraft:oak_planks", "minecraft:a_minecraft:b_c", "x_y", ""] {
            let mut out = String::new();
            push_display_name(&mut out, id);
            assert_eq!(out, super::super::recipes::display_name(id));
        }
    }

    #[test]
    fn garbage_is_not_executed() {
        let book = fixture();
        let mut inv = Inventory::default();
        assert_eq!(run(&book, &mut inv, "dance\nnow"), "Could not execute dance\nnow");
        assert_eq!(run(&book, &mut inv, ""), "Could not execute ");
    }
}
