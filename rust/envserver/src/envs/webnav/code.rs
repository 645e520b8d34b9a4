//! The code-hosting site (GitLab-like): its pages and their URLs, the pages as accessibility
//! trees, and what its buttons and forms do.
//!
//! URLs follow GitLab's layout: `/owner/project`, `/owner/project/-/issues?state=closed&label_name=bug`,
//! `/owner/project/-/issues/3`, `/owner/project/-/merge_requests/2`,
//! `/owner/project/-/project_members`, and `/username` for a user's profile.

use super::data::{CodeHost, Note, Text, LABELS, MR_STATES, ROLES};
use super::pages::{encode_query, Field, Form, Op, Page};
use super::tree::{Role, Target, Tree};
use super::{plural, Effect};

/// Issues on one page of an issue list.
pub const PAGE_SIZE: usize = 8;
pub const MAX_NOTE_CHARS: usize = 2000;

/// Order of the project list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectSort {
    Name,
    Stars,
}

impl ProjectSort {
    pub const ALL: [ProjectSort; 2] = [ProjectSort::Name, ProjectSort::Stars];

    pub fn label(self) -> &'static str {
        match self {
            ProjectSort::Name => "Name",
            ProjectSort::Stars => "Most stars",
        }
    }
}

/// The state filter of an issue list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueState {
    Open,
    Closed,
    All,
}

impl IssueState {
    pub const ALL: [IssueState; 3] = [IssueState::Open, IssueState::Closed, IssueState::All];

    pub fn label(self) -> &'static str {
        match self {
            IssueState::Open => "Open",
            IssueState::Closed => "Closed",
            IssueState::All => "All",
        }
    }

    fn key(self) -> &'static str {
        match self {
            IssueState::Open => "opened",
            IssueState::Closed => "closed",
            IssueState::All => "all",
        }
    }

    fn admits(self, open: bool) -> bool {
        match self {
            IssueState::Open => open,
            IssueState::Closed => !open,
            IssueState::All => true,
        }
    }
}

/// The state filter of a merge request list: one of [`MR_STATES`] or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrFilter(pub Option<u8>);

impl MrFilter {
    pub const OPEN: MrFilter = MrFilter(Some(0));
    pub const ALL: [MrFilter; 4] = [MrFilter(Some(0)), MrFilter(Some(1)), MrFilter(Some(2)), MrFilter(None)];

    pub fn label(self) -> &'static str {
        self.0.map_or("All", |s| MR_STATES[s as usize])
    }

    fn key(self) -> &'static str {
        match self.0 {
            Some(0) => "opened",
            Some(1) => "merged",
            Some(_) => "closed",
            None => "all",
        }
    }
}

/// A page of the code-hosting site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodePage {
    /// The project list.
    Home(ProjectSort),
    Project(u8),
    /// An issue list: state filter, label filter (index into [`LABELS`]), page number.
    Issues {
        project: u8,
        state: IssueState,
        label: Option<u8>,
        page: u16,
    },
    /// Issue index (into [`CodeHost::issues`]).
    Issue(u16),
    MergeRequests {
        project: u8,
        state: MrFilter,
    },
    /// Merge request index.
    MergeRequest(u16),
    Members(u8),
    User(u16),
}

impl CodePage {
    pub const HOME: Page = Page::Code(CodePage::Home(ProjectSort::Name));

    /// The open issues of a project, first page, no label filter.
    pub fn issues(project: usize) -> Page {
        Page::Code(CodePage::Issues { project: project as u8, state: IssueState::Open, label: None, page: 1 })
    }

    pub fn mrs(project: usize) -> Page {
        Page::Code(CodePage::MergeRequests { project: project as u8, state: MrFilter::OPEN })
    }

    /// The project a page belongs to, if it is a project's page.
    pub fn project(&self, code: &CodeHost) -> Option<usize> {
        match *self {
            CodePage::Project(p) | CodePage::Members(p) => Some(p as usize),
            CodePage::Issues { project, .. } | CodePage::MergeRequests { project, .. } => Some(project as usize),
            CodePage::Issue(i) => Some(code.issues[i as usize].project as usize),
            CodePage::MergeRequest(m) => Some(code.mrs[m as usize].project as usize),
            CodePage::Home(_) | CodePage::User(_) => None,
        }
    }
}

// ---- listings ----

/// The projects in `sort` order (most stars first; names are unique, stars too).
pub fn project_listing(code: &CodeHost, sort: ProjectSort) -> Vec<usize> {
    let mut items: Vec<usize> = (0..code.projects.len()).collect();
    match sort {
        ProjectSort::Name => items.sort_by_key(|&p| code.project_name(p)),
        ProjectSort::Stars => items.sort_by_key(|&p| std::cmp::Reverse(code.projects[p].stars)),
    }
    items
}

/// The issues of project `p` that pass the filters, newest (highest number) first.
pub fn issue_listing(code: &CodeHost, p: usize, state: IssueState, label: Option<u8>) -> Vec<usize> {
    let mut items: Vec<usize> = (0..code.issues.len())
        .filter(|&i| {
            let issue = &code.issues[i];
            issue.project as usize == p
                && state.admits(issue.open)
                && label.is_none_or(|l| issue.labels & (1 << l) != 0)
        })
        .collect();
    items.sort_by_key(|&i| std::cmp::Reverse(code.issues[i].iid));
    items
}

/// The page of its project's list of open (or closed) issues on which issue `i` is listed.
pub fn issue_list_page(code: &CodeHost, i: usize) -> Page {
    let issue = &code.issues[i];
    let state = if issue.open { IssueState::Open } else { IssueState::Closed };
    let items = issue_listing(code, issue.project as usize, state, None);
    let page = (items.iter().position(|&j| j == i).unwrap_or(0) / PAGE_SIZE + 1) as u16;
    Page::Code(CodePage::Issues { project: issue.project, state, label: None, page })
}

/// The merge requests of project `p` that pass the filter, newest first.
pub fn mr_listing(code: &CodeHost, p: usize, state: MrFilter) -> Vec<usize> {
    let mut items: Vec<usize> = (0..code.mrs.len())
        .filter(|&m| code.mrs[m].project as usize == p && state.0.is_none_or(|s| code.mrs[m].state == s))
        .collect();
    items.sort_by_key(|&m| std::cmp::Reverse(code.mrs[m].iid));
    items
}

// ---- URLs ----

/// The path (and query) of `page`, e.g. `/quiet_otter42/amber-parser/-/issues?state=closed`.
pub fn path(code: &CodeHost, page: &CodePage) -> String {
    match page {
        CodePage::Home(ProjectSort::Name) => "/".into(),
        CodePage::Home(ProjectSort::Stars) => "/?sort=stars".into(),
        CodePage::Project(p) => format!("/{}", code.project_path(*p as usize)),
        CodePage::Issues { project, state, label, page } => {
            let mut params = Vec::new();
            if *state != IssueState::Open {
                params.push(format!("state={}", state.key()));
            }
            if let Some(l) = label {
                params.push(format!("label_name={}", encode_query(LABELS[*l as usize])));
            }
            if *page > 1 {
                params.push(format!("page={page}"));
            }
            let query = if params.is_empty() { String::new() } else { format!("?{}", params.join("&")) };
            format!("/{}/-/issues{query}", code.project_path(*project as usize))
        }
        CodePage::Issue(i) => {
            let issue = &code.issues[*i as usize];
            format!("/{}/-/issues/{}", code.project_path(issue.project as usize), issue.iid)
        }
        CodePage::MergeRequests { project, state } => {
            let query = if *state == MrFilter::OPEN { String::new() } else { format!("?state={}", state.key()) };
            format!("/{}/-/merge_requests{query}", code.project_path(*project as usize))
        }
        CodePage::MergeRequest(m) => {
            let mr = &code.mrs[*m as usize];
            format!("/{}/-/merge_requests/{}", code.project_path(mr.project as usize), mr.iid)
        }
        CodePage::Members(p) => format!("/{}/-/project_members", code.project_path(*p as usize)),
        CodePage::User(u) => format!("/{}", code.user_name(*u as usize)),
    }
}

/// The page of a path split at `/` (without the leading empty part) with its decoded query
/// parameters, or `None`: not found.
pub fn parse(code: &CodeHost, parts: &[&str], param: &dyn Fn(&str) -> Option<String>) -> Option<CodePage> {
    let project = |owner: &str, name: &str| code.project_by_path(owner, name).map(|p| p as u8);
    match parts {
        [""] => match param("sort").as_deref() {
            None | Some("name") => Some(CodePage::Home(ProjectSort::Name)),
            Some("stars") => Some(CodePage::Home(ProjectSort::Stars)),
            Some(_) => None,
        },
        [user] => Some(CodePage::User(code.user_by_name(user)? as u16)),
        [owner, name] => Some(CodePage::Project(project(owner, name)?)),
        [owner, name, "-", "issues"] => {
            let state = match param("state") {
                None => IssueState::Open,
                Some(k) => *IssueState::ALL.iter().find(|s| s.key() == k)?,
            };
            let label = match param("label_name") {
                None => None,
                Some(name) => Some(LABELS.iter().position(|l| *l == name)? as u8),
            };
            let page = match param("page") {
                None => 1,
                Some(v) => v.parse::<u16>().ok().filter(|&n| n >= 1)?,
            };
            Some(CodePage::Issues { project: project(owner, name)?, state, label, page })
        }
        [owner, name, "-", "issues", iid] => {
            let i = code.issue_index(project(owner, name)? as usize, iid.parse().ok()?)?;
            Some(CodePage::Issue(i as u16))
        }
        [owner, name, "-", "merge_requests"] => {
            let state = match param("state") {
                None => MrFilter::OPEN,
                Some(k) => *MrFilter::ALL.iter().find(|s| s.key() == k)?,
            };
            Some(CodePage::MergeRequests { project: project(owner, name)?, state })
        }
        [owner, name, "-", "merge_requests", iid] => {
            let m = code.mr_index(project(owner, name)? as usize, iid.parse().ok()?)?;
            Some(CodePage::MergeRequest(m as u16))
        }
        [owner, name, "-", "project_members"] => Some(CodePage::Members(project(owner, name)?)),
        _ => None,
    }
}

// ---- rendering ----

/// "today", "1 day ago", "12 days ago".
pub fn days_text(days: u16) -> String {
    match days {
        0 => "today".into(),
        1 => "1 day ago".into(),
        d => format!("{d} days ago"),
    }
}

pub fn title(code: &CodeHost, page: &CodePage) -> String {
    match page {
        CodePage::Home(_) => format!("Projects · {}", code.site_name()),
        CodePage::Project(p) => code.project_path(*p as usize),
        CodePage::Issues { project, .. } => format!("Issues · {}", code.project_name(*project as usize)),
        CodePage::Issue(i) => format!("{} (#{}) · Issues", code.issue_title(*i as usize), code.issues[*i as usize].iid),
        CodePage::MergeRequests { project, .. } => {
            format!("Merge requests · {}", code.project_name(*project as usize))
        }
        CodePage::MergeRequest(m) => {
            format!("{} (!{}) · Merge requests", code.mr_title(*m as usize), code.mrs[*m as usize].iid)
        }
        CodePage::Members(p) => format!("Members · {}", code.project_name(*p as usize)),
        CodePage::User(u) => code.user_name(*u as usize),
    }
}

/// Builds the tree of `page` (a code-hosting page) into `tree`.
pub fn render(code: &CodeHost, page: &CodePage, form: &Form, notice: Option<&str>, tree: &mut Tree) {
    tree.title = title(code, page);
    tree.push(0, Role::RootWebArea, tree.title.clone(), Target::None);
    tree.link(1, code.site_name(), CodePage::HOME);
    tree.link(1, code.user_name(code.me as usize), Page::Code(CodePage::User(code.me)));
    if let Some(p) = page.project(code) {
        tree.push(1, Role::Navigation, "Project navigation", Target::None);
        tree.link(2, code.project_path(p), Page::Code(CodePage::Project(p as u8)));
        tree.link(2, "Issues", CodePage::issues(p));
        tree.link(2, "Merge requests", CodePage::mrs(p));
        tree.link(2, "Members", Page::Code(CodePage::Members(p as u8)));
    }
    if let Some(notice) = notice {
        tree.text(1, notice);
    }
    match *page {
        CodePage::Home(sort) => home(code, sort, tree),
        CodePage::Project(p) => project(code, p as usize, tree),
        CodePage::Issues { project, state, label, page } => issues(code, project, state, label, page, tree),
        CodePage::Issue(i) => issue(code, i as usize, form, tree),
        CodePage::MergeRequests { project, state } => merge_requests(code, project, state, tree),
        CodePage::MergeRequest(m) => merge_request(code, m as usize, tree),
        CodePage::Members(p) => members(code, p as usize, form, tree),
        CodePage::User(u) => user(code, u as usize, tree),
    }
}

fn user_link(code: &CodeHost, tree: &mut Tree, depth: u8, u: u16) {
    tree.link(depth, code.user_name(u as usize), Page::Code(CodePage::User(u)));
}

/// A form field, with its value shown as a child line when it has one.
fn field(tree: &mut Tree, role: Role, name: &str, field: Field, value: Option<&str>) {
    tree.push(1, role, name, Target::Field(field));
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        tree.text(2, value);
    }
}

fn home(code: &CodeHost, sort: ProjectSort, tree: &mut Tree) {
    tree.heading(1, "Projects");
    for s in ProjectSort::ALL {
        tree.link(1, s.label(), Page::Code(CodePage::Home(s)));
    }
    for p in project_listing(code, sort) {
        tree.link(2, code.project_path(p), Page::Code(CodePage::Project(p as u8)));
        tree.text(2, format_args!("{} · {}", plural(code.projects[p].stars as usize, "star"), code.description(p)));
    }
}

fn project(code: &CodeHost, p: usize, tree: &mut Tree) {
    tree.heading(1, code.project_name(p));
    tree.text(1, code.description(p));
    tree.text(1, "Owner:");
    user_link(code, tree, 1, code.projects[p].owner);
    tree.text(1, format_args!("Stars: {}", code.projects[p].stars));
    tree.text(1, format_args!("Commits: {}", code.project_commits(p)));
    tree.text(1, format_args!("Open issues: {}", issue_listing(code, p, IssueState::Open, None).len()));
    tree.text(1, format_args!("Open merge requests: {}", mr_listing(code, p, MrFilter::OPEN).len()));
}

fn issues(code: &CodeHost, project: u8, state: IssueState, label: Option<u8>, page: u16, tree: &mut Tree) {
    let p = project as usize;
    tree.heading(1, "Issues");
    for s in IssueState::ALL {
        let n = issue_listing(code, p, s, label).len();
        tree.link(
            1,
            format_args!("{} ({n})", s.label()),
            Page::Code(CodePage::Issues { project, state: s, label, page: 1 }),
        );
    }
    tree.text(1, "Filter by label:");
    let used = code.issues.iter().filter(|i| i.project == project).fold(0u16, |acc, i| acc | i.labels);
    for l in (0..LABELS.len()).filter(|&l| used & (1 << l) != 0) {
        let at = CodePage::Issues { project, state, label: Some(l as u8), page: 1 };
        tree.link(2, LABELS[l], Page::Code(at));
    }
    if label.is_some() {
        tree.link(2, "Any label", Page::Code(CodePage::Issues { project, state, label: None, page: 1 }));
    }
    let items = issue_listing(code, p, state, label);
    let pages = items.len().div_ceil(PAGE_SIZE).max(1);
    let start = ((page as usize - 1) * PAGE_SIZE).min(items.len());
    let shown = &items[start..(start + PAGE_SIZE).min(items.len())];
    tree.text(1, format_args!("{} found", plural(items.len(), "issue")));
    for &i in shown {
        let issue = &code.issues[i];
        tree.link(2, code.issue_title(i), Page::Code(CodePage::Issue(i as u16)));
        let assignee = issue.assignee.map_or("None".to_string(), |u| code.user_name(u as usize));
        tree.text(
            2,
            format_args!(
                "#{} · {} · opened {} by {} · Labels: {} · Assignee: {assignee}",
                issue.iid,
                if issue.open { "Open" } else { "Closed" },
                days_text(issue.age),
                code.user_name(issue.author as usize),
                code.label_text(i)
            ),
        );
    }
    tree.text(1, format_args!("Page {page} of {pages}"));
    let at = |n: u16| Page::Code(CodePage::Issues { project, state, label, page: n });
    if page > 1 {
        tree.link(1, "Previous", at(page - 1));
    }
    if (page as usize) < pages {
        tree.link(1, "Next", at(page + 1));
    }
}

fn issue(code: &CodeHost, i: usize, form: &Form, tree: &mut Tree) {
    let issue = &code.issues[i];
    tree.heading(1, code.issue_title(i));
    let state = if issue.open { "Open" } else { "Closed" };
    tree.text(1, format_args!("#{} · {state} · opened {} by", issue.iid, days_text(issue.age)));
    user_link(code, tree, 1, issue.author);
    let assignee = issue.assignee.map_or("None".to_string(), |u| code.user_name(u as usize));
    tree.text(1, format_args!("Assignee: {assignee}"));
    tree.text(1, format_args!("Labels: {}", code.label_text(i)));
    let toggle = if issue.open { "Close issue" } else { "Reopen issue" };
    tree.button(1, toggle, Op::ToggleIssue(i as u16));
    field(tree, Role::Combobox, "Label", Field::Label, form.get(Field::Label));
    tree.button(1, "Add label", Op::AddLabel(i as u16));
    tree.heading(1, plural(issue.notes.len(), "comment"));
    for note in &issue.notes {
        user_link(code, tree, 2, note.author);
        tree.text(2, note.text());
    }
    field(tree, Role::Textbox, "Comment", Field::Comment, form.get(Field::Comment));
    tree.button(1, "Comment", Op::IssueComment(i as u16));
}

fn merge_requests(code: &CodeHost, project: u8, state: MrFilter, tree: &mut Tree) {
    let p = project as usize;
    tree.heading(1, "Merge requests");
    for s in MrFilter::ALL {
        let n = mr_listing(code, p, s).len();
        tree.link(1, format_args!("{} ({n})", s.label()), Page::Code(CodePage::MergeRequests { project, state: s }));
    }
    let items = mr_listing(code, p, state);
    if items.is_empty() {
        tree.text(1, "There are no merge requests here.");
    }
    for m in items {
        let mr = &code.mrs[m];
        tree.link(2, code.mr_title(m), Page::Code(CodePage::MergeRequest(m as u16)));
        tree.text(
            2,
            format_args!(
                "!{} · {} → main · by {} · {}",
                mr.iid,
                code.source_branch(m),
                code.user_name(mr.author as usize),
                MR_STATES[mr.state as usize]
            ),
        );
    }
}

fn merge_request(code: &CodeHost, m: usize, tree: &mut Tree) {
    let mr = &code.mrs[m];
    tree.heading(1, code.mr_title(m));
    tree.text(1, format_args!("!{} · {} · opened {} by", mr.iid, MR_STATES[mr.state as usize], days_text(mr.age)));
    user_link(code, tree, 1, mr.author);
    tree.text(1, format_args!("Source branch: {}", code.source_branch(m)));
    tree.text(1, "Target branch: main");
}

fn members(code: &CodeHost, p: usize, form: &Form, tree: &mut Tree) {
    tree.heading(1, format_args!("Members ({})", code.members_of(p).count()));
    for member in code.members_of(p) {
        user_link(code, tree, 2, member.user);
        tree.text(2, format_args!("{} · {}", ROLES[member.role as usize], plural(member.commits as usize, "commit")));
    }
    tree.heading(1, "Invite member");
    field(tree, Role::Textbox, "Username", Field::Username, form.get(Field::Username));
    field(tree, Role::Combobox, "Role", Field::Role, Some(form.get(Field::Role).unwrap_or(ROLES[0])));
    tree.button(1, "Invite", Op::AddMember(p as u8));
}

fn user(code: &CodeHost, u: usize, tree: &mut Tree) {
    tree.heading(1, code.user_name(u));
    tree.text(1, format_args!("Total commits: {}", code.user_commits(u)));
    let memberships: Vec<_> = code.members.iter().filter(|m| m.user as usize == u).collect();
    tree.heading(1, format_args!("Projects ({})", memberships.len()));
    for m in memberships {
        tree.link(2, code.project_path(m.project as usize), Page::Code(CodePage::Project(m.project)));
        tree.text(2, format_args!("{} · {}", ROLES[m.role as usize], plural(m.commits as usize, "commit")));
    }
    let authored: Vec<usize> = (0..code.mrs.len()).filter(|&m| code.mrs[m].author as usize == u).collect();
    tree.heading(1, format_args!("Merge requests ({})", authored.len()));
    for m in authored {
        tree.link(2, code.mr_title(m), Page::Code(CodePage::MergeRequest(m as u16)));
        let mr = &code.mrs[m];
        tree.text(2, format_args!("in {} · {}", code.project_name(mr.project as usize), MR_STATES[mr.state as usize]));
    }
    let assigned: Vec<usize> = (0..code.issues.len()).filter(|&i| code.issues[i].assignee == Some(u as u16)).collect();
    tree.heading(1, format_args!("Assigned issues ({})", assigned.len()));
    for i in assigned {
        tree.link(2, code.issue_title(i), Page::Code(CodePage::Issue(i as u16)));
        let issue = &code.issues[i];
        let state = if issue.open { "Open" } else { "Closed" };
        tree.text(2, format_args!("in {} · {state}", code.project_name(issue.project as usize)));
    }
}

// ---- actions ----

/// The options of a combobox of this site.
pub fn options(field: Field) -> &'static [&'static str] {
    match field {
        // Owner is not granted by invitation.
        Field::Role => &ROLES[..4],
        Field::Label => &LABELS,
        _ => &[],
    }
}

/// Applies a button or form submission of the code-hosting site.
pub fn apply(code: &mut CodeHost, op: Op, form: &Form) -> Effect {
    match op {
        Op::ToggleIssue(i) => {
            let issue = &mut code.issues[i as usize];
            issue.open = !issue.open;
            let what = if issue.open { "reopened" } else { "closed" };
            Effect::stay(format!("Issue #{} was {what}.", issue.iid))
        }
        Op::IssueComment(i) => {
            let text = form.get(Field::Comment).unwrap_or("").trim();
            if text.is_empty() {
                return Effect::error("The comment is empty.");
            }
            if text.chars().count() > MAX_NOTE_CHARS {
                return Effect::error(&format!("The comment is too long (at most {MAX_NOTE_CHARS} characters)."));
            }
            let note = Note { author: code.me, text: Text::Own(text.into()) };
            code.issues[i as usize].notes.push(note);
            Effect::stay("Your comment was added.".into())
        }
        Op::AddLabel(i) => {
            let Some(l) = form.get(Field::Label).and_then(|name| LABELS.iter().position(|l| *l == name)) else {
                return Effect::error("Choose a label first.");
            };
            let issue = &mut code.issues[i as usize];
            if issue.labels & (1 << l) != 0 {
                return Effect::error(&format!("The issue already has the label {}.", LABELS[l]));
            }
            issue.labels |= 1 << l;
            Effect::stay(format!("Added the label {}.", LABELS[l]))
        }
        Op::AddMember(p) => add_member(code, p, form),
        _ => Effect::error("This button does nothing here."),
    }
}

fn add_member(code: &mut CodeHost, p: u8, form: &Form) -> Effect {
    let name = form.get(Field::Username).unwrap_or("").trim().trim_start_matches('@');
    if name.is_empty() {
        return Effect::error("Enter the username of the member to invite.");
    }
    let Some(u) = code.user_by_name(name) else {
        return Effect::error(&format!("There is no user named '{}'.", super::grammar::clip(name, 60)));
    };
    if code.member(p as usize, u).is_some() {
        return Effect::error(&format!("{name} is already a member of this project."));
    }
    let role = form.get(Field::Role).and_then(|r| ROLES.iter().position(|x| *x == r)).unwrap_or(0);
    code.members.push(super::data::Member { project: p, user: u as u16, role: role as u8, commits: 0 });
    Effect::stay(format!("{name} was added to the project as {}.", ROLES[role]))
}
