//! The browser: tabs with their history, scroll position, typed form values and focus, and
//! how each action of the grammar changes them and the site.

use super::code::{self, CodePage};
use super::grammar::{clip, Action};
use super::pages::{Field, Form, Op, Page, Sort};
use super::tree::{Role, Target, Tree, View};
use super::{Effect, Site};

/// Characters `type` may enter at once.
pub const MAX_TYPED_CHARS: usize = 2000;
/// Tabs open at most in one session: each is named in every observation's tab bar, so
/// without a cap a session could grow its observations without end.
pub const MAX_TABS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tab {
    history: Vec<Page>,
    pos: usize,
    pub scroll: usize,
    pub form: Form,
    pub focus: Option<Field>,
    pub notice: Option<String>,
}

impl Tab {
    pub fn new(page: Page) -> Self {
        Self { history: vec![page], pos: 0, scroll: 0, form: Form::default(), focus: None, notice: None }
    }

    pub fn can_go_back(&self) -> bool {
        self.pos > 0
    }

    pub fn page(&self) -> &Page {
        &self.history[self.pos]
    }

    /// Opens `page` as a new history entry (dropping forward entries).
    pub fn open(&mut self, page: Page) {
        self.history.truncate(self.pos + 1);
        self.history.push(page);
        self.pos += 1;
        self.fresh();
    }

    fn fresh(&mut self) {
        self.scroll = 0;
        self.form.clear();
        self.focus = None;
        self.notice = None;
    }
}

/// What an applied action asks of the episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Continue,
    Stop(String),
}

#[derive(Debug, Clone)]
pub struct Browser {
    pub tabs: Vec<Tab>,
    pub active: usize,
    /// The render of the active tab's page (rebuilt by [`Browser::refresh`]).
    pub tree: Tree,
    pub viewport: usize,
}

impl Browser {
    pub fn new(start: Page, viewport: usize) -> Self {
        Self { tabs: vec![Tab::new(start)], active: 0, tree: Tree::default(), viewport }
    }

    pub fn tab(&self) -> &Tab {
        &self.tabs[self.active]
    }

    fn tab_mut(&mut self) -> &mut Tab {
        &mut self.tabs[self.active]
    }

    pub fn view(&self) -> View {
        let tab = self.tab();
        let focused = tab.focus.and_then(|f| self.tree.find(&Target::Field(f)));
        View { scroll: tab.scroll, lines: self.viewport, focused }
    }

    /// Re-renders the active tab's page.
    pub fn refresh(&mut self, site: &Site) {
        let tab = &self.tabs[self.active];
        self.tree.clear();
        site.render(tab.page(), &tab.form, tab.notice.as_deref(), &mut self.tree);
        let max = self.view().max_scroll(self.tree.nodes.len());
        let tab = &mut self.tabs[self.active];
        tab.scroll = tab.scroll.min(max);
    }

    /// The node index of `[id]` if it is shown now.
    fn visible(&self, id: u32) -> Result<usize, String> {
        let Some(index) = (id as usize).checked_sub(1).filter(|&i| i < self.tree.nodes.len()) else {
            return Err(format!("There is no element [{id}] on this page."));
        };
        if !self.view().shows(index) {
            return Err(format!("Element [{id}] is not in the current view; scroll to it first."));
        }
        Ok(index)
    }

    /// Applies one parsed action; `Err` is the feedback for an action that could not be done.
    pub fn apply(&mut self, site: &mut Site, action: &Action<'_>) -> Result<Applied, String> {
        match *action {
            Action::Click(id) => {
                let index = self.visible(id)?;
                match self.tree.nodes[index].target.clone() {
                    Target::Go(page) => self.tab_mut().open(page),
                    Target::Op(op) => self.run(site, op),
                    Target::Field(field) => self.tab_mut().focus = Some(field),
                    Target::None => {}
                }
            }
            Action::Hover(id) => {
                self.visible(id)?;
            }
            Action::Type { id, text, enter } => self.type_into(site, id, text, enter)?,
            Action::Press(keys) => self.press(site, keys),
            Action::Scroll { down } => self.scroll(down),
            Action::NewTab => {
                if self.tabs.len() >= MAX_TABS {
                    return Err(format!("{MAX_TABS} tabs are open, the most a session may have; close one first."));
                }
                self.tabs.push(Tab::new(Page::Blank));
                self.active = self.tabs.len() - 1;
            }
            Action::TabFocus(i) => {
                if i >= self.tabs.len() {
                    return Err(format!("There is no tab {i}; tabs are numbered 0 to {}.", self.tabs.len() - 1));
                }
                self.active = i;
            }
            Action::CloseTab => {
                if self.tabs.len() == 1 {
                    return Err("The only open tab cannot be closed.".into());
                }
                self.tabs.remove(self.active);
                self.active = self.tabs.len() - 1;
            }
            Action::Goto(url) => {
                let page = site.parse_url(url).map_err(|e| format!("Cannot open {}: {e}", clip(url, 100)))?;
                self.tab_mut().open(page);
            }
            Action::GoBack => {
                let tab = self.tab_mut();
                if tab.pos == 0 {
                    return Err("There is no previous page in this tab's history.".into());
                }
                tab.pos -= 1;
                tab.fresh();
            }
            Action::GoForward => {
                let tab = self.tab_mut();
                if tab.pos + 1 >= tab.history.len() {
                    return Err("There is no next page in this tab's history.".into());
                }
                tab.pos += 1;
                tab.fresh();
            }
            Action::Stop(answer) => return Ok(Applied::Stop(answer.to_string())),
        }
        Ok(Applied::Continue)
    }

    fn type_into(&mut self, site: &mut Site, id: u32, text: &str, enter: bool) -> Result<(), String> {
        let index = self.visible(id)?;
        let node = &self.tree.nodes[index];
        let (Target::Field(field), true) = (&node.target, node.role.editable()) else {
            return Err(format!(
                "[{id}] is a {} and cannot be typed into; type into a textbox, searchbox or combobox.",
                node.role.text()
            ));
        };
        let field = *field;
        if text.chars().count() > MAX_TYPED_CHARS {
            return Err(format!(
                "The text is too long to type ({} characters; at most {MAX_TYPED_CHARS}).",
                text.chars().count()
            ));
        }
        let text = match (node.role, field) {
            (Role::Combobox, Field::Sort) => return self.choose_sort(text),
            // A combobox holds one of its options, spelled as the option is.
            (Role::Combobox, _) => option(self.tree.name(index), code::options(field), text)?,
            _ => text,
        };
        let tab = self.tab_mut();
        // Typing replaces what the field held.
        tab.form.set(field, text);
        tab.focus = Some(field);
        if enter {
            self.submit(site, field);
        }
        Ok(())
    }

    /// Typing an option's label into the "Sort By" box selects it (and reloads the listing).
    fn choose_sort(&mut self, text: &str) -> Result<(), String> {
        let Page::Category { cat, .. } = *self.tab().page() else {
            return Err("This box has no options here.".into());
        };
        let labels = Sort::ALL.map(|s| s.label());
        let label = option("Sort By", &labels, text)?;
        let sort = Sort::ALL.into_iter().find(|s| s.label() == label).expect("the label is an option");
        self.tab_mut().open(Page::Category { cat, sort, page: 1 });
        Ok(())
    }

    /// Enter in `field`: submits the field's form.
    fn submit(&mut self, site: &mut Site, field: Field) {
        let op = match (field, self.tab().page()) {
            (Field::Search, _) => Some(Op::Search),
            (Field::Qty, Page::Product(p)) => Some(Op::AddToCart(*p)),
            (Field::CartQty(_), _) => Some(Op::UpdateCart),
            (Field::Phone | Field::City, _) => Some(Op::SaveAccount),
            (Field::Comment, Page::Post(p)) => Some(Op::Comment(*p)),
            (Field::Title | Field::Body, Page::Submit(f)) => Some(Op::CreatePost(*f)),
            (Field::Title | Field::Body, Page::EditPost(p)) => Some(Op::EditPost(*p)),
            (Field::Comment, Page::Code(CodePage::Issue(i))) => Some(Op::IssueComment(*i)),
            (Field::Label, Page::Code(CodePage::Issue(i))) => Some(Op::AddLabel(*i)),
            (Field::Username | Field::Role, Page::Code(CodePage::Members(p))) => Some(Op::AddMember(*p)),
            _ => None,
        };
        if let Some(op) = op {
            self.run(site, op);
        }
    }

    fn run(&mut self, site: &mut Site, op: Op) {
        let Effect { go, notice, keep_form } = site.apply(op, &self.tab().form);
        let tab = self.tab_mut();
        match go {
            Some(page) => tab.open(page),
            None if !keep_form => {
                tab.form.clear();
                tab.focus = None;
            }
            None => {}
        }
        tab.notice = notice;
    }

    fn press(&mut self, site: &mut Site, keys: &str) {
        if keys.eq_ignore_ascii_case("Enter") {
            if let Some(field) = self.tab().focus {
                self.submit(site, field);
            }
        } else if keys.eq_ignore_ascii_case("PageDown") {
            self.scroll(true);
        } else if keys.eq_ignore_ascii_case("PageUp") {
            self.scroll(false);
        }
        // Other keys change nothing on these pages.
    }

    fn scroll(&mut self, down: bool) {
        // A step keeps two lines of the previous view for context.
        let step = self.viewport.saturating_sub(2).max(1);
        let max = self.view().max_scroll(self.tree.nodes.len());
        let tab = self.tab_mut();
        tab.scroll = if down { (tab.scroll + step).min(max) } else { tab.scroll.saturating_sub(step) };
    }

    /// `Tab 0 (current): title | Tab 1: title`.
    pub fn tab_header(&self, site: &Site) -> String {
        let mut out = String::new();
        for (i, tab) in self.tabs.iter().enumerate() {
            if i > 0 {
                out.push_str(" | ");
            }
            let title = if i == self.active { self.tree.title.clone() } else { site.title(tab.page()) };
            let current = if i == self.active { " (current)" } else { "" };
            out.push_str(&format!("Tab {i}{current}: {title}"));
        }
        out
    }
}

/// The option of combobox `name` that `text` names (case aside), or the feedback listing them.
fn option<'a>(name: &str, options: &[&'a str], text: &str) -> Result<&'a str, String> {
    let wanted = text.trim();
    options.iter().find(|o| o.eq_ignore_ascii_case(wanted)).copied().ok_or_else(|| {
        format!("'{}' is not an option of '{name}' (options: {}).", clip(wanted, 40), options.join(", "))
    })
}
