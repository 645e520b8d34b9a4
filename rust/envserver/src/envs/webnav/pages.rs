//! The pages of the sites, their URLs, form fields and buttons.
//!
//! A [`Page`] is a parsed URL: links, history and navigation tasks compare pages, never URL
//! strings, so `?page=1` and a missing page parameter are the same page. Only the hosts of the
//! sites are reachable; `about:blank` is the empty new tab. The code-hosting site's pages and
//! URLs are in `code.rs`.

use super::code::{self, CodePage};
use super::data::{CodeHost, Forum, Shop, CATEGORIES};

pub const SHOP_HOST: &str = "shop.test";
pub const FORUM_HOST: &str = "forum.test";
pub const CODE_HOST: &str = "code.test";

/// Product listing order of a category page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Position,
    Name,
    Price,
    Rating,
}

impl Sort {
    pub const ALL: [Sort; 4] = [Sort::Position, Sort::Name, Sort::Price, Sort::Rating];

    /// The option's label in the "Sort By" box.
    pub fn label(self) -> &'static str {
        match self {
            Sort::Position => "Position",
            Sort::Name => "Product Name",
            Sort::Price => "Price",
            Sort::Rating => "Rating",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Sort::Position => "position",
            Sort::Name => "name",
            Sort::Price => "price",
            Sort::Rating => "rating",
        }
    }
}

/// Post listing order of a forum page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostSort {
    Hot,
    New,
    Top,
}

impl PostSort {
    pub const ALL: [PostSort; 3] = [PostSort::Hot, PostSort::New, PostSort::Top];

    pub fn label(self) -> &'static str {
        match self {
            PostSort::Hot => "Hot",
            PostSort::New => "New",
            PostSort::Top => "Top",
        }
    }

    fn key(self) -> &'static str {
        match self {
            PostSort::Hot => "hot",
            PostSort::New => "new",
            PostSort::Top => "top",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    Blank,
    ShopHome,
    Category {
        cat: u8,
        sort: Sort,
        page: u16,
    },
    /// `query` is kept trimmed, lower-cased, with single spaces.
    Search {
        query: Box<str>,
        page: u16,
    },
    /// Product index.
    Product(u16),
    Cart,
    Checkout,
    Orders,
    /// Order number.
    Order(u32),
    Account,
    ForumHome,
    Forum {
        forum: u8,
        sort: PostSort,
        page: u16,
    },
    /// Post index.
    Post(u16),
    /// The new-post form of a forum.
    Submit(u8),
    /// The edit form of a post (the signed-in user's own posts only).
    EditPost(u16),
    /// User index.
    User(u16),
    /// A page of the code-hosting site.
    Code(CodePage),
}

impl Page {
    pub fn search(query: &str, page: u16) -> Page {
        Page::Search { query: canonical_query(query).into(), page }
    }

    pub fn category(cat: usize) -> Page {
        Page::Category { cat: cat as u8, sort: Sort::Position, page: 1 }
    }

    pub fn forum(forum: usize) -> Page {
        Page::Forum { forum: forum as u8, sort: PostSort::Hot, page: 1 }
    }
}

/// The form of a search query as pages keep it.
pub fn canonical_query(query: &str) -> String {
    query.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// A form field: what `type` writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Search,
    Sort,
    Qty,
    /// The quantity box of the cart line of a product.
    CartQty(u16),
    Phone,
    City,
    Comment,
    Title,
    Body,
    /// The username box of the invite form.
    Username,
    /// The role box of the invite form.
    Role,
    /// The label box of an issue.
    Label,
}

/// A button, or what pressing Enter in a field submits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Search,
    /// Adds the Qty field's quantity (1 when the page has no such field) of a product.
    AddToCart(u16),
    RemoveLine(u16),
    UpdateCart,
    PlaceOrder,
    SaveAccount,
    VotePost(u16, i8),
    /// (post, comment index, direction).
    VoteComment(u16, u8, i8),
    Comment(u16),
    CreatePost(u8),
    /// Saves the Title and Body fields (the post's own text where untouched) into a post.
    EditPost(u16),
    ToggleSubscription(u8),
    /// Closes or reopens an issue (issue index).
    ToggleIssue(u16),
    /// Adds the Comment field's text to an issue.
    IssueComment(u16),
    /// Adds the Label field's label to an issue.
    AddLabel(u16),
    /// Invites the Username field's user with the Role field's role to a project.
    AddMember(u8),
}

/// The values typed into the fields of the current page (empty after navigating away).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Form {
    values: Vec<(Field, String)>,
}

impl Form {
    pub fn get(&self, field: Field) -> Option<&str> {
        self.values.iter().find(|(f, _)| *f == field).map(|(_, v)| v.as_str())
    }

    pub fn set(&mut self, field: Field, value: &str) {
        match self.values.iter_mut().find(|(f, _)| *f == field) {
            Some((_, v)) => {
                v.clear();
                v.push_str(value);
            }
            None => self.values.push((field, value.to_string())),
        }
    }

    pub fn clear(&mut self) {
        self.values.clear();
    }

    pub fn entries(&self) -> &[(Field, String)] {
        &self.values
    }
}

/// The page's URL, e.g. `http://shop.test/category/garden?sort=price&page=2`.
pub fn url(shop: Option<&Shop>, forum: Option<&Forum>, code: Option<&CodeHost>, page: &Page) -> String {
    let shop_url = |path: String| format!("http://{SHOP_HOST}{path}");
    let forum_url = |path: String| format!("http://{FORUM_HOST}{path}");
    match page {
        Page::Blank => "about:blank".into(),
        Page::ShopHome => shop_url("/".into()),
        Page::Category { cat, sort, page } => {
            let slug = shop.map_or("", |s| CATEGORIES[s.categories[*cat as usize] as usize].slug);
            let query = listing_query((*sort != Sort::Position).then(|| sort.key()), *page);
            shop_url(format!("/category/{slug}{query}"))
        }
        Page::Search { query, page } => {
            let more = if *page > 1 { format!("&page={page}") } else { String::new() };
            shop_url(format!("/search?q={}{more}", encode_query(query)))
        }
        Page::Product(p) => shop_url(format!("/product/{}", shop.map_or(0, |s| s.products[*p as usize].sku))),
        Page::Cart => shop_url("/cart".into()),
        Page::Checkout => shop_url("/checkout".into()),
        Page::Orders => shop_url("/orders".into()),
        Page::Order(n) => shop_url(format!("/orders/{n}")),
        Page::Account => shop_url("/account".into()),
        Page::ForumHome => forum_url("/".into()),
        Page::Forum { forum: f, sort, page } => {
            let name = forum.map_or("", |s| s.forum_name(*f as usize));
            let query = listing_query((*sort != PostSort::Hot).then(|| sort.key()), *page);
            forum_url(format!("/f/{name}{query}"))
        }
        Page::Post(p) => {
            let (name, id) = forum.map_or(("", 0), |s| (s.forum_name(s.posts[*p as usize].forum as usize), *p));
            forum_url(format!("/f/{name}/{id}"))
        }
        Page::Submit(f) => forum_url(format!("/f/{}/submit", forum.map_or("", |s| s.forum_name(*f as usize)))),
        Page::EditPost(p) => {
            let name = forum.map_or("", |s| s.forum_name(s.posts[*p as usize].forum as usize));
            forum_url(format!("/f/{name}/{p}/edit"))
        }
        Page::User(u) => forum_url(format!("/user/{}", forum.map_or(String::new(), |s| s.user_name(*u as usize)))),
        Page::Code(page) => format!("http://{CODE_HOST}{}", code.map_or("/".into(), |c| code::path(c, page))),
    }
}

fn listing_query(sort: Option<&str>, page: u16) -> String {
    match (sort, page > 1) {
        (None, false) => String::new(),
        (Some(s), false) => format!("?sort={s}"),
        (None, true) => format!("?page={page}"),
        (Some(s), true) => format!("?sort={s}&page={page}"),
    }
}

/// Form encoding of a query: letters and digits as they are, spaces as `+`, the rest `%XX`.
pub fn encode_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    for b in query.bytes() {
        match b {
            b' ' => out.push('+'),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn decode_query(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let raw = text.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => bytes.push(b),
        }
        i += 1;
    }
    String::from_utf8(bytes).ok()
}

/// Parses a URL typed into `goto`; the error says why it cannot be opened.
pub fn parse_url(
    shop: Option<&Shop>,
    forum: Option<&Forum>,
    code: Option<&CodeHost>,
    text: &str,
) -> Result<Page, String> {
    let text = text.trim();
    if text == "about:blank" {
        return Ok(Page::Blank);
    }
    let rest = text.strip_prefix("http://").or_else(|| text.strip_prefix("https://")).unwrap_or(text);
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let path = path.trim_end_matches('/');
    let params: Vec<(&str, &str)> =
        query.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, ""))).collect();
    let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let not_found = || format!("{text} does not exist on this site (page not found)");
    let page_number = || -> Result<u16, String> {
        match param("page") {
            None => Ok(1),
            Some(v) => v.parse::<u16>().ok().filter(|&n| n >= 1).ok_or_else(not_found),
        }
    };
    match host.to_ascii_lowercase().as_str() {
        SHOP_HOST => {
            let shop = shop.ok_or_else(|| format!("{host} is not part of this task's websites"))?;
            let parts: Vec<&str> = path.split('/').collect();
            match parts.as_slice() {
                [""] => Ok(Page::ShopHome),
                ["category", slug] => {
                    let cat = (0..shop.categories.len())
                        .find(|&c| CATEGORIES[shop.categories[c] as usize].slug == *slug)
                        .ok_or_else(not_found)?;
                    let sort = match param("sort") {
                        None => Sort::Position,
                        Some(k) => *Sort::ALL.iter().find(|s| s.key() == k).ok_or_else(not_found)?,
                    };
                    Ok(Page::Category { cat: cat as u8, sort, page: page_number()? })
                }
                ["search"] => {
                    let query = decode_query(param("q").unwrap_or("")).ok_or_else(not_found)?;
                    Ok(Page::search(&query, page_number()?))
                }
                ["product", sku] => {
                    let sku: u32 = sku.parse().map_err(|_| not_found())?;
                    let p = shop.products.iter().position(|p| p.sku == sku).ok_or_else(not_found)?;
                    Ok(Page::Product(p as u16))
                }
                ["cart"] => Ok(Page::Cart),
                ["checkout"] => Ok(Page::Checkout),
                ["orders"] => Ok(Page::Orders),
                ["orders", n] => {
                    let n: u32 = n.parse().map_err(|_| not_found())?;
                    shop.order_index(n).ok_or_else(not_found)?;
                    Ok(Page::Order(n))
                }
                ["account"] => Ok(Page::Account),
                _ => Err(not_found()),
            }
        }
        FORUM_HOST => {
            let forum = forum.ok_or_else(|| format!("{host} is not part of this task's websites"))?;
            let parts: Vec<&str> = path.split('/').collect();
            match parts.as_slice() {
                [""] => Ok(Page::ForumHome),
                ["f", name] => {
                    let f = forum.forum_by_name(name).ok_or_else(not_found)?;
                    let sort = match param("sort") {
                        None => PostSort::Hot,
                        Some(k) => *PostSort::ALL.iter().find(|s| s.key() == k).ok_or_else(not_found)?,
                    };
                    Ok(Page::Forum { forum: f as u8, sort, page: page_number()? })
                }
                ["f", name, "submit"] => Ok(Page::Submit(forum.forum_by_name(name).ok_or_else(not_found)? as u8)),
                ["f", name, id] | ["f", name, id, "edit"] => {
                    let f = forum.forum_by_name(name).ok_or_else(not_found)?;
                    let id: usize = id.parse().map_err(|_| not_found())?;
                    let post = forum.posts.get(id).filter(|post| post.forum as usize == f).ok_or_else(not_found)?;
                    if parts.len() == 3 {
                        Ok(Page::Post(id as u16))
                    } else if post.author == forum.me {
                        Ok(Page::EditPost(id as u16))
                    } else {
                        Err("only its author can edit this submission (403 Forbidden)".into())
                    }
                }
                ["user", name] => Ok(Page::User(forum.user_by_name(name).ok_or_else(not_found)? as u16)),
                _ => Err(not_found()),
            }
        }
        CODE_HOST => {
            let code = code.ok_or_else(|| format!("{host} is not part of this task's websites"))?;
            let parts: Vec<&str> = path.split('/').collect();
            // A value that does not decode stays raw, so it names nothing and is not found.
            let decoded = |key: &str| param(key).map(|v| decode_query(v).unwrap_or_else(|| v.to_string()));
            code::parse(code, &parts, &decoded).map(Page::Code).ok_or_else(not_found)
        }
        _ => Err(format!(
            "{text} is outside the websites of this task (http://{SHOP_HOST}/, http://{FORUM_HOST}/ and \
             http://{CODE_HOST}/ host them)"
        )),
    }
}
