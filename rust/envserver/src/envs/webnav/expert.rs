//! The planner: the next action of an agent that knows the site's data, in WebArena's grammar.
//!
//! It reads the true state and the current render, never the hidden parts of a page: a link
//! outside the view is scrolled to first. Navigation clicks a link to the target when the page
//! has one, else walks back along the route a person would take (search box for products,
//! category menu, order history, forum listing pages, a project's lists and members) and, with
//! no route, types the URL.

use super::browser::Browser;
use super::code::{issue_list_page, CodePage, IssueState, MrFilter, ProjectSort};
use super::data::{CodeHost, Forum, Line, Shop, LABELS, ROLES};
use super::forum::listing_page;
use super::pages::{Field, Op, Page, PostSort, Sort};
use super::tasks::{gold_answer, state_accepted, Check, Goal, Task};
use super::tree::Target;
use super::Site;

/// One planned step: the action and why.
pub type Step = (String, String);

/// How the planner reaches a page that the current page does not link to.
enum Route {
    /// Reach this page first; it links to the target.
    Via(Page),
    /// Type into a field of this page (any page with the field when `None`), Enter after.
    Type { on: Option<Page>, field: Field, text: String },
    /// Type the URL.
    Goto,
}

/// The next step towards `task` (the caller has checked the episode is not over).
pub fn next_step(site: &Site, browser: &Browser, task: &Task) -> Step {
    match &task.goal {
        Goal::Answer { rule, evidence: (page, text) } => {
            if browser.tab().page() != page {
                return navigate(site, browser, page);
            }
            match browser.tree.find_text(text) {
                Some(i) if !browser.view().shows(i) => reveal(browser, i),
                _ => (format!("stop [{}]", gold_answer(rule)), "The page shows the answer.".into()),
            }
        }
        Goal::Url(page) if browser.tab().page() == page => ("stop [N/A]".into(), "This is the requested page.".into()),
        Goal::Url(page) => navigate(site, browser, page),
        Goal::State(check) if state_accepted(check, site) => ("stop [N/A]".into(), "The change is done.".into()),
        Goal::State(check) => change(site, browser, check),
    }
}

/// Scrolls towards node `index`.
fn reveal(browser: &Browser, index: usize) -> Step {
    let up = index <= browser.tab().scroll;
    let dir = if up { "up" } else { "down" };
    (format!("scroll [{dir}]"), format!("What I need is further {dir} the page."))
}

/// Clicks the first node with `target`, scrolling to it first, if the page has one.
fn act(browser: &Browser, target: &Target, why: &str) -> Option<Step> {
    let i = browser.tree.find(target)?;
    if !browser.view().shows(i) {
        return Some(reveal(browser, i));
    }
    Some((format!("click [{}]", i + 1), why.to_string()))
}

/// Types `text` into `field` of the current page (scrolling to it first), if it has the field.
fn type_into(browser: &Browser, field: Field, text: &str, enter: bool, why: &str) -> Option<Step> {
    let i = browser.tree.find(&Target::Field(field))?;
    if !browser.view().shows(i) {
        return Some(reveal(browser, i));
    }
    Some((format!("type [{}] [{text}] [{}]", i + 1, u8::from(enter)), why.to_string()))
}

fn navigate(site: &Site, browser: &Browser, target: &Page) -> Step {
    let mut target = target.clone();
    // Each hop moves one page back along the route; routes are a few pages long.
    for _ in 0..12 {
        if let Some(step) = act(browser, &Target::Go(target.clone()), "This link leads where I need to go.") {
            return step;
        }
        match route(site, &target) {
            Route::Via(page) if &page == browser.tab().page() => break,
            Route::Via(page) => target = page,
            Route::Type { on, field, text } => {
                let here = on.as_ref().is_none_or(|p| p == browser.tab().page());
                if here {
                    if let Some(step) = type_into(browser, field, &text, true, "Typing here gets me closer.") {
                        return step;
                    }
                }
                target = on.unwrap_or_else(|| site.home());
            }
            Route::Goto => break,
        }
    }
    (format!("goto [{}]", site.url(&target)), "I open the page by its address.".into())
}

fn route(site: &Site, target: &Page) -> Route {
    match (site, target) {
        (Site::Shop(s), Page::Product(p)) => {
            Route::Type { on: None, field: Field::Search, text: s.product_name(*p as usize) }
        }
        (_, Page::Search { query, page: 1 }) => Route::Type { on: None, field: Field::Search, text: query.to_string() },
        (_, Page::Search { query, page }) => Route::Via(Page::Search { query: query.clone(), page: page - 1 }),
        (_, Page::Category { cat, sort: Sort::Position, page: 1 }) => {
            Route::Via(Page::category(*cat as usize)).home_if_same(target, site)
        }
        (_, Page::Category { cat, sort, page: 1 }) => {
            Route::Type { on: Some(Page::category(*cat as usize)), field: Field::Sort, text: sort.label().into() }
        }
        (_, Page::Category { cat, sort, page }) => {
            Route::Via(Page::Category { cat: *cat, sort: *sort, page: page - 1 })
        }
        (_, Page::Cart | Page::Orders | Page::Account) => Route::Via(Page::ShopHome),
        (_, Page::Order(_)) => Route::Via(Page::Orders),
        (_, Page::Checkout) => Route::Via(Page::Cart),
        (_, Page::Forum { forum, sort: PostSort::Hot, page: 1 }) => {
            Route::Via(Page::forum(*forum as usize)).home_if_same(target, site)
        }
        (_, Page::Forum { forum, page: 1, .. }) => Route::Via(Page::forum(*forum as usize)),
        (_, Page::Forum { forum, sort, page }) => {
            Route::Via(Page::Forum { forum: *forum, sort: *sort, page: page - 1 })
        }
        (Site::Forum(f), Page::Post(p)) => {
            let forum = f.posts[*p as usize].forum;
            Route::Via(Page::Forum { forum, sort: PostSort::Hot, page: listing_page(f, *p as usize, PostSort::Hot) })
        }
        (_, Page::Submit(forum)) => Route::Via(Page::forum(*forum as usize)),
        (_, Page::EditPost(p)) => Route::Via(Page::Post(*p)),
        (Site::Forum(f), Page::User(u)) => {
            let authored = f.posts.iter().position(|p| p.author == *u);
            let commented = || f.posts.iter().position(|p| p.comments.iter().any(|c| c.author == *u));
            match authored.or_else(commented) {
                Some(p) => Route::Via(Page::Post(p as u16)),
                None => Route::Goto,
            }
        }
        (Site::Code(c), Page::Code(page)) => code_route(c, page),
        _ => Route::Goto,
    }
}

/// Routes on the code-hosting site: project pages from the project list, lists and members
/// from the project's navigation, filtered lists from the unfiltered one, an issue or merge
/// request from the list that shows it, a user from a project's members.
fn code_route(c: &CodeHost, target: &CodePage) -> Route {
    let via = |page: CodePage| Route::Via(Page::Code(page));
    match *target {
        CodePage::Home(ProjectSort::Name) => Route::Goto,
        CodePage::Home(_) | CodePage::Project(_) => Route::Via(CodePage::HOME),
        CodePage::Issues { project, state, label, page } if page > 1 => {
            via(CodePage::Issues { project, state, label, page: page - 1 })
        }
        CodePage::Issues { project, state, label: Some(_), .. } => {
            via(CodePage::Issues { project, state, label: None, page: 1 })
        }
        CodePage::Issues { project, state: IssueState::Open, .. } | CodePage::Members(project) => {
            via(CodePage::Project(project))
        }
        CodePage::Issues { project, .. } => Route::Via(CodePage::issues(project as usize)),
        CodePage::Issue(i) => Route::Via(issue_list_page(c, i as usize)),
        CodePage::MergeRequests { project, state: MrFilter::OPEN } => via(CodePage::Project(project)),
        CodePage::MergeRequests { project, .. } => Route::Via(CodePage::mrs(project as usize)),
        CodePage::MergeRequest(m) => {
            let mr = &c.mrs[m as usize];
            via(CodePage::MergeRequests { project: mr.project, state: MrFilter(Some(mr.state)) })
        }
        CodePage::User(u) => {
            let member = c.members.iter().find(|m| m.user == u).map(|m| CodePage::Members(m.project));
            let authored = || c.mrs.iter().position(|m| m.author == u).map(|m| CodePage::MergeRequest(m as u16));
            let issue = || {
                let touched = |i: &super::data::Issue| i.author == u || i.notes.iter().any(|n| n.author == u);
                c.issues.iter().position(touched).map(|i| CodePage::Issue(i as u16))
            };
            member.or_else(authored).or_else(issue).map_or(Route::Goto, via)
        }
    }
}

impl Route {
    /// Pages linked from every page of their site (menus): reached from the home page.
    fn home_if_same(self, target: &Page, site: &Site) -> Route {
        match self {
            Route::Via(page) if &page == target => Route::Via(site.home()),
            other => other,
        }
    }
}

fn shop(site: &Site) -> &Shop {
    match site {
        Site::Shop(s) => s,
        _ => unreachable!("a shop check on another site"),
    }
}

fn code(site: &Site) -> &CodeHost {
    match site {
        Site::Code(c) => c,
        _ => unreachable!("a code-hosting check on another site"),
    }
}

fn forum(site: &Site) -> &Forum {
    match site {
        Site::Forum(f) => f,
        _ => unreachable!("a forum check on another site"),
    }
}

/// The next step of a state change that is not done yet.
fn change(site: &Site, browser: &Browser, check: &Check) -> Step {
    let here = browser.tab().page();
    let step = match check {
        Check::CartQty { product, qty } => return cart_qty(site, browser, *product, *qty),
        Check::CartWithout { product, .. } => {
            act(browser, &Target::Op(Op::RemoveLine(*product)), "I remove this line.")
        }
        Check::Ordered { product, qty, .. } => return order(site, browser, *product, *qty),
        Check::Phone(phone) => type_into(browser, Field::Phone, phone, true, "I enter the new phone number and save.")
            .filter(|_| here == &Page::Account),
        Check::PostVote { post, vote } => act(browser, &Target::Op(Op::VotePost(*post, *vote)), "I vote on the post."),
        Check::CommentVote { post, comment, vote } => {
            act(browser, &Target::Op(Op::VoteComment(*post, *comment, *vote)), "I vote on the comment.")
        }
        Check::Commented { post, text } => {
            type_into(browser, Field::Comment, text, true, "I write the comment and post it.")
                .filter(|_| here == &Page::Post(*post))
        }
        Check::Posted { forum, title, body } if here == &Page::Submit(*forum) => {
            if browser.tab().form.get(Field::Title) != Some(title.as_str()) {
                type_into(browser, Field::Title, title, false, "I fill in the title.")
            } else {
                type_into(browser, Field::Body, body, true, "I fill in the body and submit.")
            }
        }
        Check::Posted { .. } => None,
        Check::Edited { post, title, body } if here == &Page::EditPost(*post) => {
            let p = &forum(site).posts[*post as usize];
            let typed = |field: Field, current: &str| browser.tab().form.get(field).unwrap_or(current).to_string();
            if &typed(Field::Title, &p.title) != title {
                let done = &typed(Field::Body, &p.body) == body;
                type_into(browser, Field::Title, title, done, "I replace the title.")
            } else {
                type_into(browser, Field::Body, body, true, "I replace the body and save.")
            }
        }
        Check::Edited { .. } => None,
        Check::Subscribed { forum, .. } => {
            act(browser, &Target::Op(Op::ToggleSubscription(*forum)), "I change the subscription.")
        }
        Check::IssueClosed { issue } => act(browser, &Target::Op(Op::ToggleIssue(*issue)), "I close the issue."),
        Check::IssueCommented { issue, text } => {
            type_into(browser, Field::Comment, text, true, "I write the comment and post it.")
                .filter(|_| here == &Page::Code(CodePage::Issue(*issue)))
        }
        Check::IssueLabels { issue, labels } => {
            let missing = labels & !code(site).issues[*issue as usize].labels;
            (0..LABELS.len())
                .find(|&l| missing & (1 << l) != 0)
                .and_then(|l| type_into(browser, Field::Label, LABELS[l], true, "I choose the label and add it."))
                .filter(|_| here == &Page::Code(CodePage::Issue(*issue)))
        }
        Check::Member { project, user, role } if here == &Page::Code(CodePage::Members(*project)) => {
            let name = code(site).user_name(*user as usize);
            if browser.tab().form.get(Field::Username) != Some(name.as_str()) {
                type_into(browser, Field::Username, &name, false, "I enter the username.")
            } else {
                type_into(browser, Field::Role, ROLES[*role as usize], true, "I choose the role and invite.")
            }
        }
        Check::Member { .. } => None,
    };
    step.unwrap_or_else(|| navigate(site, browser, &where_to(check)))
}

/// The page on which a state change is made.
fn where_to(check: &Check) -> Page {
    match check {
        Check::CartQty { product, .. } | Check::Ordered { product, .. } => Page::Product(*product),
        Check::CartWithout { .. } => Page::Cart,
        Check::Phone(_) => Page::Account,
        Check::PostVote { post, .. } | Check::CommentVote { post, .. } | Check::Commented { post, .. } => {
            Page::Post(*post)
        }
        Check::Posted { forum, .. } => Page::Submit(*forum),
        Check::Edited { post, .. } => Page::EditPost(*post),
        Check::Subscribed { forum, .. } => Page::forum(*forum as usize),
        Check::IssueClosed { issue } | Check::IssueCommented { issue, .. } | Check::IssueLabels { issue, .. } => {
            Page::Code(CodePage::Issue(*issue))
        }
        Check::Member { project, .. } => Page::Code(CodePage::Members(*project)),
    }
}

fn cart_qty(site: &Site, browser: &Browser, product: u16, qty: u32) -> Step {
    let s = shop(site);
    let here = browser.tab().page();
    let text = qty.to_string();
    if s.cart_qty(product as usize).is_some() {
        if here == &Page::Cart {
            if let Some(step) =
                type_into(browser, Field::CartQty(product), &text, true, "I set the quantity in the cart.")
            {
                return step;
            }
        }
        return navigate(site, browser, &Page::Cart);
    }
    if here != &Page::Product(product) {
        if qty == 1 {
            if let Some(step) = act(browser, &Target::Op(Op::AddToCart(product)), "One is what I need; I add it here.")
            {
                return step;
            }
        }
        return navigate(site, browser, &Page::Product(product));
    }
    let typed = browser.tab().form.get(Field::Qty).unwrap_or("1");
    if typed != text {
        if let Some(step) = type_into(browser, Field::Qty, &text, false, "I set the quantity.") {
            return step;
        }
    }
    act(browser, &Target::Op(Op::AddToCart(product)), "I add the product to the cart.")
        .unwrap_or_else(|| navigate(site, browser, &Page::Product(product)))
}

fn order(site: &Site, browser: &Browser, product: u16, qty: u32) -> Step {
    let s = shop(site);
    let wanted = [Line { product, qty }];
    if s.cart == wanted {
        if browser.tab().page() == &Page::Checkout {
            if let Some(step) = act(browser, &Target::Op(Op::PlaceOrder), "The cart holds just what I want; I order.") {
                return step;
            }
        }
        return navigate(site, browser, &Page::Checkout);
    }
    if let Some(other) = s.cart.iter().find(|l| l.product != product) {
        if browser.tab().page() == &Page::Cart {
            if let Some(step) =
                act(browser, &Target::Op(Op::RemoveLine(other.product)), "This item must not be in the order.")
            {
                return step;
            }
        }
        return navigate(site, browser, &Page::Cart);
    }
    cart_qty(site, browser, product, qty)
}
