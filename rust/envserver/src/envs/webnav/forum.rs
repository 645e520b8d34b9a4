//! The forum's pages (as accessibility trees) and what its buttons and forms do.

use super::data::{Comment, Forum, Post, Text};
use super::pages::{Field, Form, Op, Page, PostSort};
use super::tree::{Role, Target, Tree};
use super::{plural, Effect};

/// Posts on one page of a forum listing.
pub const PAGE_SIZE: usize = 8;
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_TEXT_CHARS: usize = 2000;

/// The posts of forum `f` in `sort` order (ties by post index, so the order is total).
pub fn listing(forum: &Forum, f: usize, sort: PostSort) -> Vec<usize> {
    let mut items: Vec<usize> = (0..forum.posts.len()).filter(|&p| forum.posts[p].forum as usize == f).collect();
    let key = |p: &usize| -> i64 {
        let post = &forum.posts[*p];
        match sort {
            // Integer "hotness": score per hour of age, so the order is the same everywhere.
            PostSort::Hot => -(i64::from(post.score) * 1000 / (i64::from(post.age) + 2)),
            PostSort::New => i64::from(post.age),
            PostSort::Top => -i64::from(post.score),
        }
    };
    items.sort_by_key(|p| (key(p), *p));
    items
}

/// The page of `sort` order on which post `p` is listed.
pub fn listing_page(forum: &Forum, p: usize, sort: PostSort) -> u16 {
    let items = listing(forum, forum.posts[p].forum as usize, sort);
    (items.iter().position(|&q| q == p).unwrap_or(0) / PAGE_SIZE + 1) as u16
}

pub fn age_text(hours: u16) -> String {
    match hours {
        0 => "just now".into(),
        1 => "1 hour ago".into(),
        h if h < 24 => format!("{h} hours ago"),
        h if h < 48 => "1 day ago".into(),
        h => format!("{} days ago", h / 24),
    }
}

pub fn title(forum: &Forum, page: &Page) -> String {
    match page {
        Page::Forum { forum: f, .. } => format!("f/{}", forum.forum_name(*f as usize)),
        Page::Post(p) => forum.posts[*p as usize].title.to_string(),
        Page::Submit(_) => "Create submission".into(),
        Page::EditPost(_) => "Edit submission".into(),
        Page::User(u) => forum.user_name(*u as usize),
        _ => forum.site_name().into(),
    }
}

/// Builds the tree of `page` (a forum page) into `tree`.
pub fn render(forum: &Forum, page: &Page, form: &Form, notice: Option<&str>, tree: &mut Tree) {
    tree.title = title(forum, page);
    tree.push(0, Role::RootWebArea, tree.title.clone(), Target::None);
    tree.link(1, forum.site_name(), Page::ForumHome);
    tree.link(1, forum.user_name(forum.me as usize), Page::User(forum.me));
    tree.push(1, Role::Navigation, "Forums", Target::None);
    for f in 0..forum.forums.len() {
        tree.link(2, format_args!("f/{}", forum.forum_name(f)), Page::forum(f));
    }
    if let Some(notice) = notice {
        tree.text(1, notice);
    }
    match page {
        Page::Forum { forum: f, sort, page } => listing_page_tree(forum, *f as usize, *sort, *page, tree),
        Page::Post(p) => post(forum, *p as usize, form, tree),
        Page::Submit(f) => submit(forum, *f as usize, form, tree),
        Page::EditPost(p) => edit(forum, *p as usize, form, tree),
        Page::User(u) => user(forum, *u as usize, tree),
        _ => home(forum, tree),
    }
}

fn home(forum: &Forum, tree: &mut Tree) {
    tree.heading(1, "Front page");
    tree.text(1, "Most popular posts");
    let mut top: Vec<usize> = (0..forum.posts.len()).collect();
    top.sort_by_key(|&p| (-forum.posts[p].score, p));
    for &p in top.iter().take(5) {
        listing_item(forum, p, tree);
    }
}

fn vote_buttons(tree: &mut Tree, depth: u8, vote: i8, up: Op, down: Op) {
    let i = tree.button(depth, "Upvote", up);
    tree.nodes[i].pressed = vote > 0;
    let i = tree.button(depth, "Downvote", down);
    tree.nodes[i].pressed = vote < 0;
}

fn listing_item(forum: &Forum, p: usize, tree: &mut Tree) {
    let post = &forum.posts[p];
    tree.link(2, &post.title, Page::Post(p as u16));
    tree.text(
        2,
        format_args!(
            "{} points · submitted {} by {} to f/{} · {}",
            post.score,
            age_text(post.age),
            forum.user_name(post.author as usize),
            forum.forum_name(post.forum as usize),
            plural(post.comments.len(), "comment")
        ),
    );
    vote_buttons(tree, 2, post.vote, Op::VotePost(p as u16, 1), Op::VotePost(p as u16, -1));
}

fn listing_page_tree(forum: &Forum, f: usize, sort: PostSort, page: u16, tree: &mut Tree) {
    tree.heading(1, format_args!("f/{}", forum.forum_name(f)));
    let label = if forum.subscribed[f] { "Unsubscribe" } else { "Subscribe" };
    tree.button(1, label, Op::ToggleSubscription(f as u8));
    tree.link(1, "Submit a new post", Page::Submit(f as u8));
    for s in PostSort::ALL {
        tree.link(1, s.label(), Page::Forum { forum: f as u8, sort: s, page: 1 });
    }
    let items = listing(forum, f, sort);
    let pages = items.len().div_ceil(PAGE_SIZE).max(1);
    let start = ((page as usize - 1) * PAGE_SIZE).min(items.len());
    let shown = &items[start..(start + PAGE_SIZE).min(items.len())];
    if shown.is_empty() {
        tree.text(1, "There are no posts here.");
    }
    for &p in shown {
        listing_item(forum, p, tree);
    }
    tree.text(1, format_args!("Page {page} of {pages}"));
    if page > 1 {
        tree.link(1, "Previous", Page::Forum { forum: f as u8, sort, page: page - 1 });
    }
    if (page as usize) < pages {
        tree.link(1, "Next", Page::Forum { forum: f as u8, sort, page: page + 1 });
    }
}

fn text_field(tree: &mut Tree, name: &str, field: Field, form: &Form) {
    text_field_holding(tree, name, field, form, "");
}

/// A textbox that shows what was typed into it, or `current` before anything was.
fn text_field_holding(tree: &mut Tree, name: &str, field: Field, form: &Form, current: &str) {
    tree.push(1, Role::Textbox, name, Target::Field(field));
    let value = form.get(field).unwrap_or(current);
    if !value.is_empty() {
        tree.text(2, value);
    }
}

fn post(forum: &Forum, p: usize, form: &Form, tree: &mut Tree) {
    let post = &forum.posts[p];
    tree.heading(1, &post.title);
    tree.text(1, format_args!("Submitted {} to f/{} by", age_text(post.age), forum.forum_name(post.forum as usize)));
    tree.link(1, forum.user_name(post.author as usize), Page::User(post.author));
    if post.author == forum.me {
        tree.link(1, "Edit", Page::EditPost(p as u16));
    }
    tree.text(1, format_args!("{} points", post.score));
    vote_buttons(tree, 1, post.vote, Op::VotePost(p as u16, 1), Op::VotePost(p as u16, -1));
    tree.text(1, &post.body);
    tree.heading(1, plural(post.comments.len(), "comment"));
    text_field(tree, "Comment", Field::Comment, form);
    tree.button(1, "Post comment", Op::Comment(p as u16));
    for (i, comment) in post.comments.iter().enumerate() {
        tree.link(2, forum.user_name(comment.author as usize), Page::User(comment.author));
        tree.text(2, format_args!("{} points · {}", comment.score, age_text(comment.age)));
        tree.text(2, comment.text());
        vote_buttons(
            tree,
            2,
            comment.vote,
            Op::VoteComment(p as u16, i as u8, 1),
            Op::VoteComment(p as u16, i as u8, -1),
        );
    }
}

fn submit(forum: &Forum, f: usize, form: &Form, tree: &mut Tree) {
    tree.heading(1, "Create submission");
    tree.text(1, format_args!("Forum: f/{}", forum.forum_name(f)));
    text_field(tree, "Title", Field::Title, form);
    text_field(tree, "Body", Field::Body, form);
    tree.button(1, "Create submission", Op::CreatePost(f as u8));
}

fn edit(forum: &Forum, p: usize, form: &Form, tree: &mut Tree) {
    let post = &forum.posts[p];
    tree.heading(1, "Edit submission");
    tree.text(1, format_args!("Forum: f/{}", forum.forum_name(post.forum as usize)));
    text_field_holding(tree, "Title", Field::Title, form, &post.title);
    text_field_holding(tree, "Body", Field::Body, form, &post.body);
    tree.button(1, "Save changes", Op::EditPost(p as u16));
    tree.link(1, "Cancel", Page::Post(p as u16));
}

fn user(forum: &Forum, u: usize, tree: &mut Tree) {
    tree.heading(1, forum.user_name(u));
    let posts: Vec<usize> = (0..forum.posts.len()).filter(|&p| forum.posts[p].author as usize == u).collect();
    tree.heading(1, format_args!("Submissions ({})", posts.len()));
    for &p in &posts {
        tree.link(2, &forum.posts[p].title, Page::Post(p as u16));
        tree.text(
            2,
            format_args!("in f/{} · {} points", forum.forum_name(forum.posts[p].forum as usize), forum.posts[p].score),
        );
    }
    let comments: Vec<(usize, &Comment)> = forum
        .posts
        .iter()
        .enumerate()
        .flat_map(|(p, post)| post.comments.iter().filter(|c| c.author as usize == u).map(move |c| (p, c)))
        .collect();
    tree.heading(1, format_args!("Comments ({})", comments.len()));
    for (p, comment) in comments {
        tree.text(2, comment.text());
        tree.link(2, format_args!("on: {}", forum.posts[p].title), Page::Post(p as u16));
    }
}

fn vote(score: &mut i32, vote: &mut i8, dir: i8) {
    // Voting the same way again takes the vote back, as on Reddit-style sites.
    let new = if *vote == dir { 0 } else { dir };
    *score += i32::from(new - *vote);
    *vote = new;
}

/// The text typed into `field`, trimmed, or the error to show.
fn required(form: &Form, field: Field, name: &str, max: usize) -> Result<String, Effect> {
    let text = form.get(field).unwrap_or("").trim();
    if text.is_empty() {
        return Err(Effect::error(&format!("{name} is required.")));
    }
    if text.chars().count() > max {
        return Err(Effect::error(&format!("{name} is too long (at most {max} characters).")));
    }
    Ok(text.to_string())
}

/// Applies a forum button or form submission.
pub fn apply(forum: &mut Forum, op: Op, form: &Form) -> Effect {
    match op {
        Op::VotePost(p, dir) => {
            let post = &mut forum.posts[p as usize];
            vote(&mut post.score, &mut post.vote, dir);
            Effect::stay_quiet()
        }
        Op::VoteComment(p, i, dir) => {
            let comment = &mut forum.posts[p as usize].comments[i as usize];
            vote(&mut comment.score, &mut comment.vote, dir);
            Effect::stay_quiet()
        }
        Op::Comment(p) => {
            let text = match required(form, Field::Comment, "Comment", MAX_TEXT_CHARS) {
                Ok(t) => t,
                Err(e) => return e,
            };
            let me = forum.me;
            forum.posts[p as usize].comments.push(Comment {
                author: me,
                text: Text::Own(text.into()),
                score: 1,
                vote: 0,
                age: 0,
            });
            Effect::stay("Your comment was posted.".into())
        }
        Op::CreatePost(f) => {
            let title = match required(form, Field::Title, "Title", MAX_TITLE_CHARS) {
                Ok(t) => t,
                Err(e) => return e,
            };
            let body = match required(form, Field::Body, "Body", MAX_TEXT_CHARS) {
                Ok(t) => t,
                Err(e) => return e,
            };
            forum.posts.push(Post {
                forum: f,
                author: forum.me,
                title: title.into(),
                body: body.into(),
                score: 1,
                vote: 0,
                age: 0,
                comments: Vec::new(),
            });
            Effect::go(Page::Post(forum.posts.len() as u16 - 1), Some("Your submission was created.".into()))
        }
        Op::EditPost(p) => {
            let post = &forum.posts[p as usize];
            if post.author != forum.me {
                return Effect::error("Only its author can edit this submission.");
            }
            // A field left untouched keeps the post's text; one typed empty is refused.
            let mut typed = form.clone();
            for (field, current) in [(Field::Title, &post.title), (Field::Body, &post.body)] {
                if typed.get(field).is_none() {
                    typed.set(field, current);
                }
            }
            let title = match required(&typed, Field::Title, "Title", MAX_TITLE_CHARS) {
                Ok(t) => t,
                Err(e) => return e,
            };
            let body = match required(&typed, Field::Body, "Body", MAX_TEXT_CHARS) {
                Ok(t) => t,
                Err(e) => return e,
            };
            let post = &mut forum.posts[p as usize];
            post.title = title.into();
            post.body = body.into();
            Effect::go(Page::Post(p), Some("Your submission was updated.".into()))
        }
        Op::ToggleSubscription(f) => {
            let s = &mut forum.subscribed[f as usize];
            *s = !*s;
            let name = forum.forum_name(f as usize);
            let what = if forum.subscribed[f as usize] { "subscribed to" } else { "unsubscribed from" };
            Effect::stay(format!("You {what} f/{name}."))
        }
        _ => Effect::error("This button does nothing here."),
    }
}
