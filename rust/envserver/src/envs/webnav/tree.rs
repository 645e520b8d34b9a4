//! The accessibility tree of one page render and its text form, in WebArena's layout:
//! `[id] role 'name' prop: value`, one node a line, indented by depth with tabs, the name
//! quoted as Python's `repr()` quotes it (`"Kid's Toy"`), as WebArena's tree does.
//!
//! A node's id is its position in the render plus one (the root is `[1]`), so ids are stable
//! while the page does not change and scrolling does not renumber anything. Only the lines in
//! the viewport are shown; a line above and below says when content continues.

use std::fmt::Write;

use super::pages::{Field, Op, Page};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    RootWebArea,
    Link,
    Button,
    Searchbox,
    Textbox,
    Combobox,
    Heading,
    StaticText,
    Navigation,
}

impl Role {
    pub fn text(self) -> &'static str {
        match self {
            Role::RootWebArea => "RootWebArea",
            Role::Link => "link",
            Role::Button => "button",
            Role::Searchbox => "searchbox",
            Role::Textbox => "textbox",
            Role::Combobox => "combobox",
            Role::Heading => "heading",
            Role::StaticText => "StaticText",
            Role::Navigation => "navigation",
        }
    }

    /// Whether `type` may write into a node of this role.
    pub fn editable(self) -> bool {
        matches!(self, Role::Searchbox | Role::Textbox | Role::Combobox)
    }
}

/// What acting on a node does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Nothing (text, headings): clicking is allowed and changes nothing.
    None,
    /// A link to a page.
    Go(Page),
    /// A button.
    Op(Op),
    /// A form field (`type` writes it; clicking focuses it).
    Field(Field),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub role: Role,
    pub depth: u8,
    /// Byte range of the name in [`Tree::text`].
    name: (u32, u32),
    pub target: Target,
    /// Shown as `pressed: True` (a vote already cast).
    pub pressed: bool,
}

/// One render of a page: its title and nodes (the root is node 0).
#[derive(Debug, Clone, Default)]
pub struct Tree {
    text: String,
    pub nodes: Vec<Node>,
    pub title: String,
}

impl Tree {
    pub fn clear(&mut self) {
        self.text.clear();
        self.nodes.clear();
        self.title.clear();
    }

    /// Adds a node; returns its index.
    pub fn push(&mut self, depth: u8, role: Role, name: impl std::fmt::Display, target: Target) -> usize {
        let start = self.text.len() as u32;
        let _ = write!(self.text, "{name}");
        // Names are one line: newlines in typed text would break the one-node-a-line layout.
        if self.text[start as usize..].contains(['\n', '\r', '\t']) {
            let cleaned: String = self.text[start as usize..]
                .chars()
                .map(|c| if matches!(c, '\n' | '\r' | '\t') { ' ' } else { c })
                .collect();
            self.text.truncate(start as usize);
            self.text.push_str(&cleaned);
        }
        let end = self.text.len() as u32;
        self.nodes.push(Node { role, depth, name: (start, end), target, pressed: false });
        self.nodes.len() - 1
    }

    pub fn text(&mut self, depth: u8, name: impl std::fmt::Display) -> usize {
        self.push(depth, Role::StaticText, name, Target::None)
    }

    pub fn link(&mut self, depth: u8, name: impl std::fmt::Display, page: Page) -> usize {
        self.push(depth, Role::Link, name, Target::Go(page))
    }

    pub fn button(&mut self, depth: u8, name: impl std::fmt::Display, op: Op) -> usize {
        self.push(depth, Role::Button, name, Target::Op(op))
    }

    pub fn heading(&mut self, depth: u8, name: impl std::fmt::Display) -> usize {
        self.push(depth, Role::Heading, name, Target::None)
    }

    pub fn name(&self, index: usize) -> &str {
        let (a, b) = self.nodes[index].name;
        &self.text[a as usize..b as usize]
    }

    /// The node with id `id` (1-based), if the page has it.
    pub fn by_id(&self, id: u32) -> Option<&Node> {
        self.nodes.get((id as usize).checked_sub(1)?)
    }

    /// Index of the first node whose target is `target`.
    pub fn find(&self, target: &Target) -> Option<usize> {
        self.nodes.iter().position(|n| &n.target == target)
    }

    /// Index of the first node whose name contains `needle`.
    pub fn find_text(&self, needle: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.name(i).contains(needle))
    }
}

/// How the tree is shown: which part, and with which extras.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// Index of the first non-root node shown.
    pub scroll: usize,
    /// Non-root lines shown at once.
    pub lines: usize,
    /// The focused node, if a field was typed into or clicked (else the root is focused).
    pub focused: Option<usize>,
}

impl View {
    /// Whether node `index` is on screen (the root always is).
    pub fn shows(&self, index: usize) -> bool {
        index == 0 || (index > self.scroll && index <= self.scroll + self.lines)
    }

    /// The largest useful scroll offset for a tree of `nodes` nodes.
    pub fn max_scroll(&self, nodes: usize) -> usize {
        nodes.saturating_sub(1).saturating_sub(self.lines)
    }
}

/// Writes the visible part of `tree` to `out`, with `url: ...` on links when `urls` is given.
pub fn render(out: &mut String, tree: &Tree, view: &View, urls: Option<&dyn Fn(&Page) -> String>) {
    let last = (view.scroll + view.lines).min(tree.nodes.len().saturating_sub(1));
    write_node(out, tree, 0, view, urls);
    if view.scroll > 0 {
        let _ = writeln!(out, "\t(content above: {} more lines; scroll [up] to see them)", view.scroll);
    }
    for i in view.scroll + 1..=last {
        write_node(out, tree, i, view, urls);
    }
    let below = tree.nodes.len().saturating_sub(1 + last);
    if below > 0 {
        let _ = writeln!(out, "\t(content below: {below} more lines; scroll [down] to see them)");
    }
}

fn write_node(out: &mut String, tree: &Tree, i: usize, view: &View, urls: Option<&dyn Fn(&Page) -> String>) {
    for _ in 0..tree.nodes[i].depth {
        out.push('\t');
    }
    write_line(out, tree, i, view, urls);
    out.push('\n');
}

/// Node `i`'s line as the observation shows it, without its indentation:
/// `[id] role 'name' props`, the name quoted as Python's `repr()` quotes it (WebArena's tree).
pub fn node_line(tree: &Tree, i: usize, view: &View, urls: Option<&dyn Fn(&Page) -> String>) -> String {
    let mut out = String::new();
    write_line(&mut out, tree, i, view, urls);
    out
}

fn write_line(out: &mut String, tree: &Tree, i: usize, view: &View, urls: Option<&dyn Fn(&Page) -> String>) {
    let node = &tree.nodes[i];
    let _ = write!(out, "[{}] {} {}", i + 1, node.role.text(), crate::pytext::repr(tree.name(i)));
    let focused = view.focused.map_or(i == 0, |f| f == i);
    if focused {
        out.push_str(" focused: True");
    }
    match (&node.role, &node.target) {
        (Role::Searchbox | Role::Textbox, _) => out.push_str(" required: False"),
        (Role::Combobox, _) => out.push_str(" hasPopup: menu expanded: False"),
        (Role::Link, Target::Go(page)) => {
            if let Some(url) = urls {
                let _ = write!(out, " url: {}", url(page));
            }
        }
        _ => {}
    }
    if node.pressed {
        out.push_str(" pressed: True");
    }
}
