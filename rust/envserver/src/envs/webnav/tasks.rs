//! Task templates: from a site and a seed, an intent and the exact check of its outcome.
//!
//! WebArena's three kinds: information seeking (the `stop [answer]` text, normalised, must
//! equal one accepted answer or include every required string), navigation (the page open at
//! `stop` must be the target page) and state changes (a program check on the site's state at
//! `stop`). Each template also names where the evidence of an answer is shown, for the planner.

use super::code::{issue_listing, project_listing, CodePage, IssueState, ProjectSort};
use super::data::{money, CodeHost, Forum, Line, Shop, FORUMS, LABELS, ROLES};
use super::forum::listing;
use super::pages::{Page, PostSort, Sort};
use super::shop::search_results;
use super::Site;
use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    Shop,
    Forum,
    Code,
}

impl SiteKind {
    pub fn name(self) -> &'static str {
        match self {
            SiteKind::Shop => "shop",
            SiteKind::Forum => "forum",
            SiteKind::Code => "code",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Info,
    Nav,
    State,
}

impl Kind {
    /// WebArena's names of the three kinds.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Info => "information_seeking",
            Kind::Nav => "navigation",
            Kind::State => "state_change",
        }
    }
}

/// How a `stop [answer]` is judged: WebArena's `exact_match` and `must_include`, both sides
/// read by [`clean_answer`] ([`answer_accepted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerRule {
    /// Equal to one of these. WebArena has one reference per `exact_match`; where a question
    /// has several fair forms (`4`, `4 stars`), they stand in for its LLM-judged `fuzzy_match`.
    Exact(Vec<String>),
    /// Contains every one of these (WebArena's word-level match for a one-character reference
    /// does not arise: every reference here is a name).
    MustInclude(Vec<String>),
}

/// The site state a state-change task asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    CartQty {
        product: u16,
        qty: u32,
    },
    /// The product is gone from the cart and the other lines are as they were.
    CartWithout {
        product: u16,
        rest: Vec<Line>,
    },
    /// An order placed during the episode holds exactly this line.
    Ordered {
        product: u16,
        qty: u32,
        orders_before: usize,
    },
    Phone(String),
    PostVote {
        post: u16,
        vote: i8,
    },
    CommentVote {
        post: u16,
        comment: u8,
        vote: i8,
    },
    Commented {
        post: u16,
        text: String,
    },
    Posted {
        forum: u8,
        title: String,
        body: String,
    },
    Subscribed {
        forum: u8,
        subscribed: bool,
    },
    /// The signed-in user's post holds exactly this title and body.
    Edited {
        post: u16,
        title: String,
        body: String,
    },
    IssueClosed {
        issue: u16,
    },
    IssueCommented {
        issue: u16,
        text: String,
    },
    /// The issue's labels are exactly these (a bit set over `LABELS`).
    IssueLabels {
        issue: u16,
        labels: u16,
    },
    Member {
        project: u8,
        user: u16,
        role: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Goal {
    /// `evidence`: the page showing the answer and a text of the node showing it.
    Answer {
        rule: AnswerRule,
        evidence: (Page, String),
    },
    Url(Page),
    State(Check),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub template: usize,
    pub intent: String,
    pub goal: Goal,
}

pub struct Template {
    pub name: &'static str,
    pub site: SiteKind,
    pub kind: Kind,
    make: fn(&Site, &mut Rng) -> (String, Goal),
}

impl Template {
    /// The task of this template on `site` (which is of the template's site kind).
    pub fn make(&self, index: usize, site: &Site, rng: &mut Rng) -> Task {
        let (intent, goal) = (self.make)(site, rng);
        Task { template: index, intent, goal }
    }
}

const fn t(name: &'static str, site: SiteKind, kind: Kind, make: fn(&Site, &mut Rng) -> (String, Goal)) -> Template {
    Template { name, site, kind, make }
}

use Kind::{Info, Nav, State};
use SiteKind::{Code as C, Forum as F, Shop as S};

/// Every template, in task id order (`task_id % TEMPLATES.len()`): the shop's (0-16), the
/// forum's (17-29, 45), the code host's (30-44).
pub const TEMPLATES: &[Template] = &[
    t("shop_product_price", S, Info, product_price),
    t("shop_review_count", S, Info, review_count),
    t("shop_review_stars", S, Info, review_stars),
    t("shop_cheapest_in_category", S, Info, cheapest_in_category),
    t("shop_order_total", S, Info, order_total),
    t("shop_order_products", S, Info, order_products),
    t("shop_account_email", S, Info, account_email),
    t("shop_search_count", S, Info, search_count),
    t("shop_open_product", S, Nav, open_product),
    t("shop_category_by_price", S, Nav, category_by_price),
    t("shop_search_page", S, Nav, search_page),
    t("shop_open_order", S, Nav, open_order),
    t("shop_add_to_cart", S, State, add_to_cart),
    t("shop_remove_from_cart", S, State, remove_from_cart),
    t("shop_set_cart_qty", S, State, set_cart_qty),
    t("shop_buy_product", S, State, buy_product),
    t("shop_update_phone", S, State, update_phone),
    t("forum_post_author", F, Info, post_author),
    t("forum_comment_count", F, Info, comment_count),
    t("forum_post_score", F, Info, post_score),
    t("forum_top_post", F, Info, top_post),
    t("forum_author_post_count", F, Info, author_post_count),
    t("forum_open_forum", F, Nav, open_forum),
    t("forum_open_author", F, Nav, open_author),
    t("forum_open_newest", F, Nav, open_newest),
    t("forum_upvote_post", F, State, upvote_post),
    t("forum_downvote_comment", F, State, downvote_comment),
    t("forum_comment", F, State, comment_on_post),
    t("forum_create_post", F, State, create_post),
    t("forum_subscription", F, State, subscription),
    t("code_project_stars", C, Info, project_stars),
    t("code_most_starred", C, Info, most_starred),
    t("code_issue_assignee", C, Info, issue_assignee),
    t("code_mr_source_branch", C, Info, mr_source_branch),
    t("code_top_committer", C, Info, top_committer),
    t("code_labelled_issue_count", C, Info, labelled_issue_count),
    t("code_user_commits", C, Info, user_commits),
    t("code_filter_issues", C, Nav, filter_issues),
    t("code_open_mr", C, Nav, open_mr),
    t("code_open_members", C, Nav, open_members),
    t("code_open_mr_author", C, Nav, open_mr_author),
    t("code_close_issue", C, State, close_issue),
    t("code_comment_issue", C, State, comment_issue),
    t("code_add_label", C, State, add_label),
    t("code_add_member", C, State, add_member),
    t("forum_edit_post", F, State, edit_post),
];

fn shop(site: &Site) -> &Shop {
    match site {
        Site::Shop(s) => s,
        _ => unreachable!("a shop template on another site"),
    }
}

fn forum(site: &Site) -> &Forum {
    match site {
        Site::Forum(f) => f,
        _ => unreachable!("a forum template on another site"),
    }
}

fn code(site: &Site) -> &CodeHost {
    match site {
        Site::Code(c) => c,
        _ => unreachable!("a code-hosting template on another site"),
    }
}

fn exact(answers: &[&str], page: Page, evidence: String) -> Goal {
    Goal::Answer {
        rule: AnswerRule::Exact(answers.iter().map(|a| a.to_string()).collect()),
        evidence: (page, evidence),
    }
}

/// A uniformly chosen element of `items`, which generation keeps non-empty.
fn pick<T: Copy>(rng: &mut Rng, items: &[T], what: &str) -> T {
    assert!(!items.is_empty(), "webnav: no {what} to ask about");
    *rng.choice(items)
}

// ---- shop ----

fn product_price(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = rng.index(s.products.len());
    let price = money(s.products[p].price_cents);
    let intent = format!("What is the price of the {}?", s.product_name(p));
    (intent, exact(&[&price], Page::Product(p as u16), format!("Price: {price}")))
}

fn review_count(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = rng.index(s.products.len());
    let n = s.products[p].reviews.len();
    let intent = format!("How many customer reviews does the {} have?", s.product_name(p));
    (intent, exact(&[&n.to_string()], Page::Product(p as u16), format!("Customer Reviews ({n})")))
}

fn review_stars(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let reviewed: Vec<usize> = (0..s.products.len()).filter(|&p| !s.products[p].reviews.is_empty()).collect();
    let p = pick(rng, &reviewed, "reviewed product");
    let review = *rng.choice(&s.products[p].reviews);
    let who = review.author.short();
    let intent = format!("How many stars did {who} give the {} in their review?", s.product_name(p));
    let stars = review.stars.to_string();
    let goal = exact(
        &[&stars, &format!("{stars} stars"), &format!("{stars} out of 5")],
        Page::Product(p as u16),
        format!("{who} rated it"),
    );
    (intent, goal)
}

fn cheapest_in_category(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let c = rng.index(s.categories.len());
    let cheapest = s.in_category(c).min_by_key(|&p| s.products[p].price_cents).expect("categories have products");
    let name = s.product_name(cheapest);
    let intent = format!("What is the cheapest product in the {} category?", s.category_kind(c).name);
    (intent, exact(&[&name], Page::Category { cat: c as u8, sort: Sort::Price, page: 1 }, name.clone()))
}

fn order_total(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let order = rng.choice(&s.orders);
    let total = money(s.order_subtotal(order) + super::data::SHIPPING_CENTS);
    let intent = format!("What was the grand total of my order #{}?", order.number);
    (intent, exact(&[&total], Page::Order(order.number), format!("Grand Total: {total}")))
}

fn order_products(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let order = rng.choice(&s.orders);
    let names = order.lines.iter().map(|l| s.product_name(l.product as usize)).collect();
    let intent = format!("Which products did I buy in the order I placed on {}?", super::data::date_text(order.day));
    let evidence = (Page::Order(order.number), "Grand Total".to_string());
    (intent, Goal::Answer { rule: AnswerRule::MustInclude(names), evidence })
}

fn account_email(site: &Site, _rng: &mut Rng) -> (String, Goal) {
    let email = shop(site).account.email();
    ("What is the email address of my account?".into(), exact(&[&email], Page::Account, format!("Email: {email}")))
}

fn search_count(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = rng.index(s.products.len());
    let name = s.product_name(p);
    let word = name.rsplit(' ').next().expect("names have words").to_lowercase();
    let n = search_results(s, &word).len();
    let intent = format!("How many products does a search for '{word}' in the shop find?");
    (intent, exact(&[&n.to_string()], Page::search(&word, 1), format!("{n} items")))
}

fn open_product(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = rng.index(s.products.len());
    (format!("Open the product page of the {}.", s.product_name(p)), Goal::Url(Page::Product(p as u16)))
}

fn category_by_price(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let c = rng.index(s.categories.len());
    let intent = format!("Show me the {} category with its products sorted by price.", s.category_kind(c).name);
    (intent, Goal::Url(Page::Category { cat: c as u8, sort: Sort::Price, page: 1 }))
}

fn search_page(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = rng.index(s.products.len());
    let brand = s.product_name(p).split(' ').next().expect("names have words").to_string();
    (format!("Show me the shop's search results for '{brand}'."), Goal::Url(Page::search(&brand, 1)))
}

fn open_order(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let order = rng.choice(&shop(site).orders);
    (format!("Open the details page of my order #{}.", order.number), Goal::Url(Page::Order(order.number)))
}

fn not_in_cart(s: &Shop) -> Vec<usize> {
    (0..s.products.len()).filter(|&p| s.cart_qty(p).is_none()).collect()
}

fn add_to_cart(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = pick(rng, &not_in_cart(s), "product outside the cart");
    let qty = rng.int(1, 6) as u32;
    let intent = format!("Add {qty} of the {} to my shopping cart.", s.product_name(p));
    (intent, Goal::State(Check::CartQty { product: p as u16, qty }))
}

fn remove_from_cart(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let line = *rng.choice(&s.cart);
    let rest = s.cart.iter().filter(|l| l.product != line.product).copied().collect();
    let intent = format!("Remove the {} from my shopping cart.", s.product_name(line.product as usize));
    (intent, Goal::State(Check::CartWithout { product: line.product, rest }))
}

fn set_cart_qty(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let line = *rng.choice(&s.cart);
    let qty = loop {
        let q = rng.int(1, 8) as u32;
        if q != line.qty {
            break q;
        }
    };
    let intent =
        format!("Change the quantity of the {} in my shopping cart to {qty}.", s.product_name(line.product as usize));
    (intent, Goal::State(Check::CartQty { product: line.product, qty }))
}

fn buy_product(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let p = pick(rng, &not_in_cart(s), "product outside the cart");
    let qty = rng.int(1, 4) as u32;
    let intent = format!("Buy {qty} of the {}. The order must contain nothing else.", s.product_name(p));
    (intent, Goal::State(Check::Ordered { product: p as u16, qty, orders_before: s.orders.len() }))
}

fn update_phone(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let s = shop(site);
    let phone = loop {
        let phone = format!("555-{:04}", rng.int(100, 10_000));
        if phone != s.account.phone {
            break phone;
        }
    };
    (format!("Change the phone number of my account to {phone}."), Goal::State(Check::Phone(phone)))
}

// ---- forum ----

fn post_ref(f: &Forum, p: usize) -> String {
    format!("'{}' in f/{}", f.posts[p].title, f.forum_name(f.posts[p].forum as usize))
}

fn post_author(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let author = f.user_name(f.posts[p].author as usize);
    (format!("Who submitted the post {}?", post_ref(f, p)), exact(&[&author], Page::Post(p as u16), author.clone()))
}

fn comment_count(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let n = f.posts[p].comments.len();
    let intent = format!("How many comments does the post {} have?", post_ref(f, p));
    (intent, exact(&[&n.to_string()], Page::Post(p as u16), super::plural(n, "comment")))
}

fn post_score(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let score = f.posts[p].score;
    let intent = format!("How many points does the post {} have?", post_ref(f, p));
    let goal =
        exact(&[&score.to_string(), &format!("{score} points")], Page::Post(p as u16), format!("{score} points"));
    (intent, goal)
}

fn top_post(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let forum_index = rng.index(f.forums.len());
    let top = listing(f, forum_index, PostSort::Top)[0];
    let title = f.posts[top].title.to_string();
    let intent = format!("What is the title of the highest-scoring post in f/{}?", f.forum_name(forum_index));
    let page = Page::Forum { forum: forum_index as u8, sort: PostSort::Top, page: 1 };
    (intent, exact(&[&title], page, title.clone()))
}

fn author_post_count(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let author = f.posts[p].author;
    let n = f.posts.iter().filter(|q| q.author == author).count();
    let intent = format!("How many posts has the author of the post {} submitted in total?", post_ref(f, p));
    (intent, exact(&[&n.to_string()], Page::User(author), format!("Submissions ({n})")))
}

fn open_forum(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let i = rng.index(f.forums.len());
    (format!("Open the forum f/{}.", f.forum_name(i)), Goal::Url(Page::forum(i)))
}

fn open_author(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let intent = format!("Go to the user page of the author of the post {}.", post_ref(f, p));
    (intent, Goal::Url(Page::User(f.posts[p].author)))
}

fn open_newest(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let i = rng.index(f.forums.len());
    let newest = listing(f, i, PostSort::New)[0];
    (format!("Open the newest post in f/{}.", f.forum_name(i)), Goal::Url(Page::Post(newest as u16)))
}

fn upvote_post(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    (format!("Upvote the post {}.", post_ref(f, p)), Goal::State(Check::PostVote { post: p as u16, vote: 1 }))
}

fn downvote_comment(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    // Comments whose author wrote no other comment on that post, so "the comment by X" is one.
    let mut candidates = Vec::new();
    for (p, post) in f.posts.iter().enumerate() {
        for (i, c) in post.comments.iter().enumerate() {
            if post.comments.iter().filter(|d| d.author == c.author).count() == 1 {
                candidates.push((p, i));
            }
        }
    }
    let (p, i) = pick(rng, &candidates, "comment");
    let who = f.user_name(f.posts[p].comments[i].author as usize);
    let intent = format!("Downvote the comment by {who} on the post {}.", post_ref(f, p));
    (intent, Goal::State(Check::CommentVote { post: p as u16, comment: i as u8, vote: -1 }))
}

const REPLIES: [&str; 8] = [
    "Thanks, this helped me a lot.",
    "I will try this next weekend.",
    "Great write-up, bookmarked.",
    "Could you share more details about your setup?",
    "Same experience here, well said.",
    "This deserves more attention.",
    "I changed my mind after reading this.",
    "Where did you buy yours?",
];

fn comment_on_post(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let p = rng.index(f.posts.len());
    let text = rng.choice(&REPLIES).to_string();
    let intent = format!("Reply to the post {} with the comment \"{text}\"", post_ref(f, p));
    (intent, Goal::State(Check::Commented { post: p as u16, text }))
}

const NEW_TITLES: [&str; 5] = [
    "Tips for a {} newbie",
    "Photos of my new {}",
    "Question about {} upkeep",
    "Budget {} recommendations",
    "Show and tell: my {}",
];
const NEW_BODIES: [&str; 4] = [
    "Any advice about the {} is welcome.",
    "Here is what I learned about the {} this month.",
    "Looking for opinions on the {} before I buy.",
    "My {} finally works the way I wanted.",
];

fn create_post(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let i = rng.index(f.forums.len());
    let noun = *rng.choice(&FORUMS[f.forums[i] as usize].nouns);
    let title = rng.choice(&NEW_TITLES).replace("{}", noun);
    let body = rng.choice(&NEW_BODIES).replace("{}", noun);
    let intent = format!("Create a post in f/{} titled \"{title}\" with the body \"{body}\"", f.forum_name(i));
    (intent, Goal::State(Check::Posted { forum: i as u8, title, body }))
}

fn edit_post(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let mine: Vec<usize> = (0..f.posts.len()).filter(|&p| f.posts[p].author == f.me).collect();
    let p = pick(rng, &mine, "post of the signed-in user");
    let post = &f.posts[p];
    let noun = *rng.choice(&FORUMS[f.forums[post.forum as usize] as usize].nouns);
    let (mut title, mut body) = (post.title.to_string(), post.body.to_string());
    let intent = if rng.bool() {
        title = rng.choice(&NEW_TITLES).replace("{}", noun);
        format!("Change the title of my post {} to \"{title}\"", post_ref(f, p))
    } else {
        body = rng.choice(&NEW_BODIES).replace("{}", noun);
        format!("Change the body of my post {} to \"{body}\"", post_ref(f, p))
    };
    (intent, Goal::State(Check::Edited { post: p as u16, title, body }))
}

fn subscription(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let f = forum(site);
    let i = rng.index(f.forums.len());
    let want = !f.subscribed[i];
    let verb = if want { "Subscribe to" } else { "Unsubscribe from" };
    (
        format!("{verb} the forum f/{}.", f.forum_name(i)),
        Goal::State(Check::Subscribed { forum: i as u8, subscribed: want }),
    )
}

// ---- code hosting ----

fn issue_ref(c: &CodeHost, i: usize) -> String {
    format!("'{}' in the project {}", c.issue_title(i), c.project_name(c.issues[i].project as usize))
}

fn mr_ref(c: &CodeHost, m: usize) -> String {
    format!("'{}' in the project {}", c.mr_title(m), c.project_name(c.mrs[m].project as usize))
}

/// A user's name as asked for, bare or with GitLab's `@`.
fn user_answers(c: &CodeHost, u: usize) -> [String; 2] {
    let name = c.user_name(u);
    [name.clone(), format!("@{name}")]
}

fn project_stars(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let p = rng.index(c.projects.len());
    let n = c.projects[p].stars;
    let intent = format!("How many stars does the project {} have?", c.project_name(p));
    let page = Page::Code(CodePage::Project(p as u8));
    (intent, exact(&[&n.to_string(), &format!("{n} stars")], page, format!("Stars: {n}")))
}

fn most_starred(site: &Site, _rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let top = project_listing(c, ProjectSort::Stars)[0];
    let intent = format!("Which project on {} has the most stars?", c.site_name());
    let (name, path) = (c.project_name(top), c.project_path(top));
    (intent, exact(&[&name, &path], Page::Code(CodePage::Home(ProjectSort::Stars)), path.clone()))
}

fn issue_assignee(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let assigned: Vec<usize> = (0..c.issues.len()).filter(|&i| c.issues[i].assignee.is_some()).collect();
    let i = pick(rng, &assigned, "assigned issue");
    let u = c.issues[i].assignee.expect("picked among assigned issues") as usize;
    let [name, at] = user_answers(c, u);
    let intent = format!("Who is assigned to the issue {}?", issue_ref(c, i));
    (intent, exact(&[&name, &at], Page::Code(CodePage::Issue(i as u16)), format!("Assignee: {name}")))
}

fn mr_source_branch(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let m = rng.index(c.mrs.len());
    let branch = c.source_branch(m);
    let intent = format!("What is the source branch of the merge request {}?", mr_ref(c, m));
    let page = Page::Code(CodePage::MergeRequest(m as u16));
    (intent, exact(&[&branch], page, format!("Source branch: {branch}")))
}

fn top_committer(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let p = rng.index(c.projects.len());
    let top = *c.members_of(p).max_by_key(|m| m.commits).expect("projects have members");
    let [name, at] = user_answers(c, top.user as usize);
    let intent = format!("Which member of the project {} has made the most commits?", c.project_name(p));
    let evidence = format!("{} · {}", ROLES[top.role as usize], super::plural(top.commits as usize, "commit"));
    (intent, exact(&[&name, &at], Page::Code(CodePage::Members(p as u8)), evidence))
}

fn labelled_issue_count(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    // (project, label) pairs with at least one open issue, so the count is read off a list.
    let pairs: Vec<(usize, u8)> = (0..c.projects.len())
        .flat_map(|p| (0..LABELS.len() as u8).map(move |l| (p, l)))
        .filter(|&(p, l)| !issue_listing(c, p, IssueState::Open, Some(l)).is_empty())
        .collect();
    let (p, l) = pick(rng, &pairs, "labelled open issue");
    let n = issue_listing(c, p, IssueState::Open, Some(l)).len();
    let intent =
        format!("How many open issues labelled '{}' does the project {} have?", LABELS[l as usize], c.project_name(p));
    let page = Page::Code(CodePage::Issues { project: p as u8, state: IssueState::Open, label: Some(l), page: 1 });
    let golds = [n.to_string(), format!("{n} issues"), format!("{n} open issues")];
    let golds: Vec<&str> = golds.iter().map(String::as_str).collect();
    (intent, exact(&golds, page, format!("{} found", super::plural(n, "issue"))))
}

fn user_commits(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let members: Vec<usize> = (0..c.users.len()).filter(|&u| c.members.iter().any(|m| m.user as usize == u)).collect();
    let u = pick(rng, &members, "member");
    let n = c.user_commits(u);
    let intent = format!("How many commits has {} made across all projects on {}?", c.user_name(u), c.site_name());
    let page = Page::Code(CodePage::User(u as u16));
    (intent, exact(&[&n.to_string(), &format!("{n} commits")], page, format!("Total commits: {n}")))
}

fn filter_issues(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let labelled: Vec<(usize, u8)> = (0..c.issues.len())
        .flat_map(|i| (0..LABELS.len() as u8).map(move |l| (i, l)))
        .filter(|&(i, l)| c.issues[i].labels & (1 << l) != 0)
        .collect();
    let (i, l) = pick(rng, &labelled, "labelled issue");
    let p = c.issues[i].project;
    let state = if rng.bool() { IssueState::Open } else { IssueState::Closed };
    let intent = format!(
        "Show me the {} issues of the project {} that have the label '{}'.",
        state.label().to_lowercase(),
        c.project_name(p as usize),
        LABELS[l as usize]
    );
    (intent, Goal::Url(Page::Code(CodePage::Issues { project: p, state, label: Some(l), page: 1 })))
}

fn open_mr(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let m = rng.index(c.mrs.len());
    (format!("Open the merge request {}.", mr_ref(c, m)), Goal::Url(Page::Code(CodePage::MergeRequest(m as u16))))
}

fn open_members(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let p = rng.index(c.projects.len());
    let intent = format!("Show me the members of the project {}.", c.project_name(p));
    (intent, Goal::Url(Page::Code(CodePage::Members(p as u8))))
}

fn open_mr_author(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let m = rng.index(c.mrs.len());
    let intent = format!("Go to the profile page of the author of the merge request {}.", mr_ref(c, m));
    (intent, Goal::Url(Page::Code(CodePage::User(c.mrs[m].author))))
}

fn close_issue(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let open: Vec<usize> = (0..c.issues.len()).filter(|&i| c.issues[i].open).collect();
    let i = pick(rng, &open, "open issue");
    (format!("Close the issue {}.", issue_ref(c, i)), Goal::State(Check::IssueClosed { issue: i as u16 }))
}

const ISSUE_REPLIES: [&str; 6] = [
    "I am looking into this now.",
    "Fixed on the main branch, please verify.",
    "Could you share the exact version?",
    "This looks like a duplicate of an older report.",
    "Moving this to the next milestone.",
    "A fix is in review.",
];

fn comment_issue(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let i = rng.index(c.issues.len());
    let text = rng.choice(&ISSUE_REPLIES).to_string();
    let intent = format!("Comment \"{text}\" on the issue {}.", issue_ref(c, i));
    (intent, Goal::State(Check::IssueCommented { issue: i as u16, text }))
}

fn add_label(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let missing: Vec<(usize, u8)> = (0..c.issues.len())
        .flat_map(|i| (0..LABELS.len() as u8).map(move |l| (i, l)))
        .filter(|&(i, l)| c.issues[i].labels & (1 << l) == 0)
        .collect();
    let (i, l) = pick(rng, &missing, "label to add");
    let intent = format!("Add the label '{}' to the issue {}.", LABELS[l as usize], issue_ref(c, i));
    (intent, Goal::State(Check::IssueLabels { issue: i as u16, labels: c.issues[i].labels | 1 << l }))
}

fn add_member(site: &Site, rng: &mut Rng) -> (String, Goal) {
    let c = code(site);
    let p = rng.index(c.projects.len());
    let outsiders: Vec<usize> = (0..c.users.len()).filter(|&u| c.member(p, u).is_none()).collect();
    let u = pick(rng, &outsiders, "user outside the project");
    let role = rng.index(4) as u8;
    let intent =
        format!("Invite {} to the project {} as a {}.", c.user_name(u), c.project_name(p), ROLES[role as usize]);
    (intent, Goal::State(Check::Member { project: p as u8, user: u as u16, role }))
}

// ---- checking ----

/// Lower case, single spaces, no surrounding quotes or final period, no `$`: how the state
/// checks compare text the agent typed (comments, titles, the phone number).
pub fn normalize(text: &str) -> String {
    let lowered = text.to_lowercase().replace('$', "");
    let words: Vec<&str> = lowered.split_whitespace().collect();
    let joined = words.join(" ");
    let trimmed = joined.trim_matches(|c| c == '"' || c == '\'' || c == '`').trim();
    trimmed.strip_suffix('.').unwrap_or(trimmed).trim().to_string()
}

/// WebArena's `StringEvaluator.clean_answer`: surrounding whitespace off, then one pair of
/// matching surrounding quotes (`'...'` or `"..."`), then lower case. `$`, inner spaces and a
/// final full stop stay: `200.95` is not `$200.95`.
pub fn clean_answer(text: &str) -> String {
    let text = text.trim_matches(crate::pytext::is_space);
    let unquoted =
        ['\'', '"'].iter().find_map(|&q| text.strip_prefix(q).and_then(|t| t.strip_suffix(q))).unwrap_or(text);
    unquoted.to_lowercase()
}

/// Whether `answer` passes `rule` as WebArena's evaluator judges a `stop` answer: it cleans
/// the answer once when it reads it and once more in the comparison ([`clean_answer`]), the
/// references once.
pub fn answer_accepted(rule: &AnswerRule, answer: &str) -> bool {
    let answer = clean_answer(&clean_answer(answer));
    match rule {
        AnswerRule::Exact(golds) => golds.iter().any(|g| clean_answer(g) == answer),
        AnswerRule::MustInclude(parts) => parts.iter().all(|p| answer.contains(&clean_answer(p))),
    }
}

/// Whether the site's state satisfies `check`.
pub fn state_accepted(check: &Check, site: &Site) -> bool {
    match (check, site) {
        (Check::CartQty { product, qty }, Site::Shop(s)) => s.cart_qty(*product as usize) == Some(*qty),
        (Check::CartWithout { product, rest }, Site::Shop(s)) => {
            s.cart_qty(*product as usize).is_none() && &s.cart == rest
        }
        (Check::Ordered { product, qty, orders_before }, Site::Shop(s)) => s.orders
            [*orders_before.min(&s.orders.len())..]
            .iter()
            .any(|o| o.lines == [Line { product: *product, qty: *qty }]),
        (Check::Phone(phone), Site::Shop(s)) => normalize(&s.account.phone) == normalize(phone),
        (Check::PostVote { post, vote }, Site::Forum(f)) => f.posts[*post as usize].vote == *vote,
        (Check::CommentVote { post, comment, vote }, Site::Forum(f)) => {
            f.posts[*post as usize].comments[*comment as usize].vote == *vote
        }
        (Check::Commented { post, text }, Site::Forum(f)) => {
            f.posts[*post as usize].comments.iter().any(|c| c.author == f.me && normalize(c.text()) == normalize(text))
        }
        (Check::Posted { forum, title, body }, Site::Forum(f)) => f.posts.iter().any(|p| {
            p.forum == *forum
                && p.author == f.me
                && normalize(&p.title) == normalize(title)
                && normalize(&p.body) == normalize(body)
        }),
        (Check::Subscribed { forum, subscribed }, Site::Forum(f)) => f.subscribed[*forum as usize] == *subscribed,
        (Check::Edited { post, title, body }, Site::Forum(f)) => {
            let p = &f.posts[*post as usize];
            p.author == f.me && normalize(&p.title) == normalize(title) && normalize(&p.body) == normalize(body)
        }
        (Check::IssueClosed { issue }, Site::Code(c)) => !c.issues[*issue as usize].open,
        (Check::IssueCommented { issue, text }, Site::Code(c)) => {
            c.issues[*issue as usize].notes.iter().any(|n| n.author == c.me && normalize(n.text()) == normalize(text))
        }
        (Check::IssueLabels { issue, labels }, Site::Code(c)) => c.issues[*issue as usize].labels == *labels,
        (Check::Member { project, user, role }, Site::Code(c)) => {
            c.member(*project as usize, *user as usize).is_some_and(|m| m.role == *role)
        }
        _ => false,
    }
}

/// The answer the planner gives at `stop` for an information task.
pub fn gold_answer(rule: &AnswerRule) -> String {
    match rule {
        AnswerRule::Exact(golds) => golds[0].clone(),
        AnswerRule::MustInclude(parts) => parts.join(", "),
    }
}
