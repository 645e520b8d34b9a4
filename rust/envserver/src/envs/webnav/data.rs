//! The data model of the generated sites and its seeded generation.
//!
//! Everything a page shows is drawn here from the crate's own RNG, so a seed gives the same
//! shop, forum or code host on every machine. Names are kept as indices into the word tables
//! below and composed when a page is rendered: a session holds a few kilobytes, not rendered
//! text.
//! Generation keeps what tasks ask about unambiguous: product names, prices, order dates,
//! post titles and per-forum post scores are distinct; so are project names and star counts,
//! and per project, issue and merge request titles and members' commit counts.

use std::collections::BTreeSet;

use crate::rng::Rng;

/// A product category: its name, URL slug and the nouns of its products.
pub struct CategoryKind {
    pub name: &'static str,
    pub slug: &'static str,
    pub nouns: [&'static str; 8],
}

pub const CATEGORIES: [CategoryKind; 8] = [
    CategoryKind {
        name: "Kitchen",
        slug: "kitchen",
        nouns: [
            "Kettle",
            "Skillet",
            "Blender",
            "Toaster",
            "Cutting Board",
            "Mixing Bowl",
            "Knife Block",
            "Coffee Grinder",
        ],
    },
    CategoryKind {
        name: "Office",
        slug: "office",
        nouns: ["Stapler", "Desk Lamp", "Notebook", "Pen Case", "Monitor Stand", "Shredder", "Organizer", "Whiteboard"],
    },
    CategoryKind {
        name: "Outdoor",
        slug: "outdoor",
        nouns: ["Tent", "Sleeping Bag", "Lantern", "Trekking Pole", "Camp Stove", "Water Filter", "Hammock", "Cooler"],
    },
    CategoryKind {
        name: "Electronics",
        slug: "electronics",
        nouns: ["Headphones", "Speaker", "Charger", "Webcam", "Keyboard", "Mouse", "Power Bank", "Router"],
    },
    CategoryKind {
        name: "Home Decor",
        slug: "home-decor",
        nouns: ["Vase", "Wall Clock", "Throw Pillow", "Candle", "Picture Frame", "Rug", "Mirror", "Planter"],
    },
    CategoryKind {
        name: "Fitness",
        slug: "fitness",
        nouns: [
            "Yoga Mat",
            "Dumbbell",
            "Jump Rope",
            "Resistance Band",
            "Foam Roller",
            "Water Bottle",
            "Kettlebell",
            "Gym Bag",
        ],
    },
    CategoryKind {
        name: "Pet Supplies",
        slug: "pet-supplies",
        nouns: ["Dog Leash", "Cat Tree", "Pet Bed", "Feeding Bowl", "Chew Toy", "Litter Box", "Pet Carrier", "Brush"],
    },
    CategoryKind {
        name: "Garden",
        slug: "garden",
        nouns: [
            "Watering Can",
            "Pruning Shears",
            "Garden Hose",
            "Trowel",
            "Seed Tray",
            "Wheelbarrow",
            "Rake",
            "Compost Bin",
        ],
    },
];

pub const BRANDS: [&str; 20] = [
    "Acme",
    "Northwind",
    "Brightline",
    "Oakridge",
    "Silverleaf",
    "Bluepeak",
    "Redwood",
    "Ironclad",
    "Sunhaven",
    "Clearwater",
    "Stonebridge",
    "Maplecrest",
    "Goldfield",
    "Lakeside",
    "Pinehurst",
    "Westbrook",
    "Highland",
    "Copperton",
    "Fairmont",
    "Riverside",
];

pub const ADJECTIVES: [&str; 16] = [
    "Classic",
    "Compact",
    "Deluxe",
    "Premium",
    "Essential",
    "Ultra",
    "Eco",
    "Pro",
    "Sturdy",
    "Portable",
    "Smart",
    "Vintage",
    "Modern",
    "Lightweight",
    "Rugged",
    "Elite",
];

pub const SHOP_NAMES: [&str; 8] = [
    "Cornerstone Market",
    "Harbor Goods",
    "Everyday Emporium",
    "Summit Supply",
    "Maple Street Store",
    "Bluebird Bazaar",
    "Lantern Lane Shop",
    "Northgate Outlet",
];

pub const FIRST_NAMES: [&str; 16] = [
    "Maria", "James", "Aisha", "Chen", "Olivia", "Mateo", "Priya", "Lukas", "Sofia", "Kwame", "Hannah", "Diego",
    "Yuki", "Noah", "Elena", "Omar",
];

pub const LAST_NAMES: [&str; 16] = [
    "Garcia", "Smith", "Okafor", "Wang", "Novak", "Rossi", "Patel", "Berg", "Silva", "Mensah", "Keller", "Lopez",
    "Tanaka", "Brown", "Ivanova", "Haddad",
];

pub const CITIES: [&str; 10] = [
    "Springfield",
    "Riverton",
    "Lakewood",
    "Fairview",
    "Georgetown",
    "Salem",
    "Madison",
    "Ashland",
    "Clinton",
    "Dayton",
];

/// Review texts by star rating (index = stars - 1).
pub const REVIEW_PHRASES: [[&str; 3]; 5] = [
    ["Broke after a week.", "Not as described at all.", "Would not buy again."],
    ["Disappointing quality.", "Works, but barely.", "Arrived scratched."],
    ["It does the job.", "Average for the price.", "Fine, nothing special."],
    ["Good value overall.", "Solid and well made.", "Happy with it so far."],
    ["Absolutely love it!", "Best purchase this year.", "Exceeded my expectations."],
];

pub const ORDER_STATUSES: [&str; 3] = ["Complete", "Complete", "Canceled"];

/// Flat shipping charge of every order, in cents.
pub const SHIPPING_CENTS: u32 = 500;

/// A person's name: indices into [`FIRST_NAMES`] and [`LAST_NAMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Person {
    pub first: u8,
    pub last: u8,
}

impl Person {
    fn draw(rng: &mut Rng) -> Self {
        Self { first: rng.index(FIRST_NAMES.len()) as u8, last: rng.index(LAST_NAMES.len()) as u8 }
    }

    /// "Maria G." as reviews sign.
    pub fn short(&self) -> String {
        format!("{} {}.", FIRST_NAMES[self.first as usize], &LAST_NAMES[self.last as usize][..1])
    }

    pub fn full(&self) -> String {
        format!("{} {}", FIRST_NAMES[self.first as usize], LAST_NAMES[self.last as usize])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Review {
    pub author: Person,
    pub stars: u8,
    pub phrase: u8,
}

impl Review {
    pub fn text(&self) -> &'static str {
        REVIEW_PHRASES[self.stars as usize - 1][self.phrase as usize]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Product {
    /// Index into [`Shop::categories`].
    pub category: u8,
    pub brand: u8,
    pub adjective: u8,
    /// Index into the category's nouns.
    pub noun: u8,
    pub sku: u32,
    pub price_cents: u32,
    pub reviews: Vec<Review>,
}

/// One line of a cart or an order: product index and quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub product: u16,
    pub qty: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub number: u32,
    /// Days since 2022-01-01.
    pub day: u16,
    pub lines: Vec<Line>,
    pub status: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub person: Person,
    pub phone: String,
    pub city: String,
}

impl Account {
    pub fn email(&self) -> String {
        let p = &self.person;
        format!("{}.{}@example.com", FIRST_NAMES[p.first as usize], LAST_NAMES[p.last as usize]).to_lowercase()
    }
}

/// An online shop: catalogue, order history, cart and account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shop {
    pub name: u8,
    /// Indices into [`CATEGORIES`], in menu order.
    pub categories: Vec<u8>,
    /// By category, then in listing ("position") order.
    pub products: Vec<Product>,
    /// Oldest first.
    pub orders: Vec<Order>,
    pub cart: Vec<Line>,
    pub account: Account,
    /// The day new orders are placed on (after every generated order).
    pub today: u16,
}

impl Shop {
    pub fn product_name(&self, p: usize) -> String {
        let prod = &self.products[p];
        let kind = &CATEGORIES[self.categories[prod.category as usize] as usize];
        format!(
            "{} {} {}",
            BRANDS[prod.brand as usize], ADJECTIVES[prod.adjective as usize], kind.nouns[prod.noun as usize]
        )
    }

    pub fn category_kind(&self, c: usize) -> &'static CategoryKind {
        &CATEGORIES[self.categories[c] as usize]
    }

    /// Products of category `c`, in position order.
    pub fn in_category(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.products.len()).filter(move |&p| self.products[p].category as usize == c)
    }

    /// Mean stars in tenths (42 = 4.2), or None without reviews.
    pub fn rating_tenths(&self, p: usize) -> Option<u32> {
        let reviews = &self.products[p].reviews;
        if reviews.is_empty() {
            return None;
        }
        let sum: u32 = reviews.iter().map(|r| u32::from(r.stars)).sum();
        // Rounded half up, in integers so the text is the same everywhere.
        Some((sum * 20 + reviews.len() as u32) / (2 * reviews.len() as u32))
    }

    pub fn order_subtotal(&self, order: &Order) -> u32 {
        order.lines.iter().map(|l| self.products[l.product as usize].price_cents * l.qty).sum()
    }

    pub fn cart_subtotal(&self) -> u32 {
        self.cart.iter().map(|l| self.products[l.product as usize].price_cents * l.qty).sum()
    }

    pub fn cart_qty(&self, product: usize) -> Option<u32> {
        self.cart.iter().find(|l| l.product as usize == product).map(|l| l.qty)
    }

    pub fn order_index(&self, number: u32) -> Option<usize> {
        self.orders.iter().position(|o| o.number == number)
    }

    pub fn shop_name(&self) -> &'static str {
        SHOP_NAMES[self.name as usize]
    }
}

/// Generates the shop of `seed`.
pub fn generate_shop(rng: &mut Rng) -> Shop {
    let mut kinds: Vec<u8> = (0..CATEGORIES.len() as u8).collect();
    rng.shuffle(&mut kinds);
    kinds.truncate(5);
    let mut prices = BTreeSet::new();
    let mut products = Vec::new();
    for c in 0..kinds.len() {
        let count = rng.int(7, 12) as usize;
        let mut names = BTreeSet::new();
        while names.len() < count {
            names.insert((rng.index(BRANDS.len()) as u8, rng.index(ADJECTIVES.len()) as u8, rng.index(8) as u8));
        }
        let mut names: Vec<_> = names.into_iter().collect();
        rng.shuffle(&mut names);
        for (brand, adjective, noun) in names {
            let price_cents = loop {
                let cents = rng.int(4, 240) as u32 * 100 + [99, 49, 95, 0, 25][rng.index(5)];
                if prices.insert(cents) {
                    break cents;
                }
            };
            products.push(Product {
                category: c as u8,
                brand,
                adjective,
                noun,
                sku: 0,
                price_cents,
                reviews: generate_reviews(rng),
            });
        }
    }
    let mut skus = BTreeSet::new();
    for p in &mut products {
        p.sku = loop {
            let sku = rng.int(10_000, 100_000) as u32;
            if skus.insert(sku) {
                break sku;
            }
        };
    }
    let (orders, today) = generate_orders(rng, products.len());
    let cart = draw_lines(rng, products.len(), 1, 3);
    let account = Account {
        person: Person::draw(rng),
        phone: format!("555-{:04}", rng.int(100, 10_000)),
        city: CITIES[rng.index(CITIES.len())].to_string(),
    };
    Shop { name: rng.index(SHOP_NAMES.len()) as u8, categories: kinds, products, orders, cart, account, today }
}

fn generate_reviews(rng: &mut Rng) -> Vec<Review> {
    let n = rng.int(0, 6) as usize;
    let mut authors = BTreeSet::new();
    while authors.len() < n {
        authors.insert(Person::draw(rng));
    }
    let mut authors: Vec<Person> = authors.into_iter().collect();
    rng.shuffle(&mut authors);
    authors
        .into_iter()
        .map(|author| Review { author, stars: rng.int(1, 6) as u8, phrase: rng.index(3) as u8 })
        .collect()
}

/// `lo..=hi` distinct products with quantities 1 to 3.
fn draw_lines(rng: &mut Rng, num_products: usize, lo: i64, hi: i64) -> Vec<Line> {
    let n = rng.int(lo, hi + 1) as usize;
    let mut chosen: Vec<u16> = Vec::with_capacity(n);
    while chosen.len() < n {
        let p = rng.index(num_products) as u16;
        if !chosen.contains(&p) {
            chosen.push(p);
        }
    }
    chosen.into_iter().map(|product| Line { product, qty: rng.int(1, 4) as u32 }).collect()
}

fn generate_orders(rng: &mut Rng, num_products: usize) -> (Vec<Order>, u16) {
    let n = rng.int(3, 7) as usize;
    let mut days = BTreeSet::new();
    while days.len() < n {
        days.insert(rng.int(0, 700) as u16);
    }
    let mut number = rng.int(100, 900) as u32;
    let mut orders = Vec::with_capacity(n);
    for day in days {
        number += rng.int(1, 40) as u32;
        let lines = draw_lines(rng, num_products, 1, 3);
        orders.push(Order { number, day, lines, status: rng.index(ORDER_STATUSES.len()) as u8 });
    }
    let today = orders.last().map_or(0, |o| o.day) + rng.int(1, 20) as u16;
    (orders, today)
}

/// "March 4, 2023" for a day counted from 2022-01-01.
pub fn date_text(day: u16) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let mut year = 2022;
    let mut rest = u32::from(day);
    loop {
        let len = if year % 4 == 0 { 366 } else { 365 };
        if rest < len {
            break;
        }
        rest -= len;
        year += 1;
    }
    let mut month = 0;
    loop {
        let len = match month {
            1 if year % 4 == 0 => 29,
            1 => 28,
            3 | 5 | 8 | 10 => 30,
            _ => 31,
        };
        if rest < len {
            break;
        }
        rest -= len;
        month += 1;
    }
    format!("{} {}, {year}", MONTHS[month], rest + 1)
}

/// "$12.49".
pub fn money(cents: u32) -> String {
    format!("${}.{:02}", cents / 100, cents % 100)
}

// ---- forum ----

/// A forum's name and the nouns its post titles are about.
pub struct ForumKind {
    pub name: &'static str,
    pub nouns: [&'static str; 8],
}

pub const FORUMS: [ForumKind; 8] = [
    ForumKind {
        name: "books",
        nouns: ["novel", "audiobook", "poetry collection", "e-reader", "library", "bookshelf", "memoir", "book club"],
    },
    ForumKind {
        name: "cooking",
        nouns: ["sourdough", "cast iron pan", "curry", "spice rack", "pasta", "pressure cooker", "meal prep", "chili"],
    },
    ForumKind {
        name: "gardening",
        nouns: [
            "tomato plant",
            "compost",
            "raised bed",
            "seed starting",
            "herb garden",
            "mulch",
            "rose bush",
            "greenhouse",
        ],
    },
    ForumKind {
        name: "cycling",
        nouns: ["road bike", "helmet", "bike lock", "commute", "gravel ride", "tire pressure", "saddle", "bike light"],
    },
    ForumKind {
        name: "photography",
        nouns: [
            "prime lens",
            "tripod",
            "night sky shot",
            "film camera",
            "portrait",
            "light meter",
            "photo edit",
            "camera bag",
        ],
    },
    ForumKind {
        name: "boardgames",
        nouns: [
            "deck builder",
            "game night",
            "card sleeve",
            "co-op game",
            "dice tower",
            "party game",
            "rulebook",
            "expansion",
        ],
    },
    ForumKind {
        name: "astronomy",
        nouns: [
            "telescope",
            "meteor shower",
            "star chart",
            "eyepiece",
            "moon photo",
            "dark sky site",
            "planet sighting",
            "binocular",
        ],
    },
    ForumKind {
        name: "woodworking",
        nouns: [
            "workbench",
            "dovetail joint",
            "hand plane",
            "cutting board",
            "wood finish",
            "chisel",
            "bookcase",
            "router table",
        ],
    },
];

/// Post title patterns; `{}` takes a noun of the forum.
pub const TITLE_PATTERNS: [&str; 10] = [
    "Best {} for a beginner?",
    "Finally finished my {} project",
    "How do you take care of your {}?",
    "Is an expensive {} worth it?",
    "Unpopular opinion about the {}",
    "Help me choose a {}",
    "What I learned from my first {}",
    "Weekly {} discussion",
    "My {} setup after two years",
    "Anyone else struggling with their {}?",
];

/// Post bodies; `{}` takes the post's noun.
pub const BODY_PATTERNS: [&str; 5] = [
    "I have been thinking about the {} for a while and would love to hear your experience.",
    "Sharing some notes on the {} in case they help someone here.",
    "Long time reader, first post. The {} question keeps coming up for me.",
    "Please tell me what worked for you with the {}. Budget is limited.",
    "After many weekends on this, here is where I landed with the {}.",
];

pub const COMMENT_PHRASES: [&str; 16] = [
    "Great post, thanks for sharing.",
    "I had the same problem last year.",
    "Have you tried asking at a local shop?",
    "This is exactly what I needed today.",
    "Strongly disagree, but interesting take.",
    "Saving this for later.",
    "Could you post a photo?",
    "The second option is better in my experience.",
    "Patience is the real trick here.",
    "I would start with something cheaper.",
    "Welcome to the community!",
    "Check the wiki, it covers this in detail.",
    "That looks fantastic.",
    "Did the same and never looked back.",
    "Following, I am curious too.",
    "Quality over quantity, always.",
];

pub const USER_ADJECTIVES: [&str; 16] = [
    "quiet", "rapid", "sunny", "lucky", "brave", "misty", "clever", "gentle", "witty", "cosmic", "rusty", "happy",
    "salty", "frosty", "golden", "wild",
];

pub const USER_ANIMALS: [&str; 16] = [
    "otter", "falcon", "badger", "heron", "lynx", "panda", "walrus", "gecko", "moose", "raven", "beaver", "koala",
    "bison", "marten", "ibis", "yak",
];

pub const FORUM_SITE_NAMES: [&str; 4] = ["Postmark", "Threadline", "Campfire", "Commons"];

/// A username: `quiet_otter42`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Handle {
    pub adjective: u8,
    pub animal: u8,
    pub number: u8,
}

impl Handle {
    pub fn text(&self) -> String {
        format!("{}_{}{}", USER_ADJECTIVES[self.adjective as usize], USER_ANIMALS[self.animal as usize], self.number)
    }
}

/// Generated or typed text: generated text stays an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Stock(u8),
    Own(Box<str>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub author: u16,
    pub text: Text,
    pub score: i32,
    /// The signed-in user's vote: -1, 0 or 1 (already counted in `score`).
    pub vote: i8,
    /// Hours since posting.
    pub age: u16,
}

impl Comment {
    pub fn text(&self) -> &str {
        match &self.text {
            Text::Stock(i) => COMMENT_PHRASES[*i as usize],
            Text::Own(s) => s,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    /// Index into [`Forum::forums`].
    pub forum: u8,
    pub author: u16,
    pub title: Box<str>,
    pub body: Box<str>,
    pub score: i32,
    pub vote: i8,
    pub age: u16,
    pub comments: Vec<Comment>,
}

/// A discussion site: forums, posts, comments, users and the signed-in user's subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forum {
    pub name: u8,
    /// Indices into [`FORUMS`].
    pub forums: Vec<u8>,
    pub subscribed: Vec<bool>,
    pub users: Vec<Handle>,
    /// The signed-in user (index into `users`).
    pub me: u16,
    pub posts: Vec<Post>,
}

impl Forum {
    pub fn forum_name(&self, f: usize) -> &'static str {
        FORUMS[self.forums[f] as usize].name
    }

    pub fn user_name(&self, u: usize) -> String {
        self.users[u].text()
    }

    pub fn site_name(&self) -> &'static str {
        FORUM_SITE_NAMES[self.name as usize]
    }

    pub fn forum_by_name(&self, name: &str) -> Option<usize> {
        (0..self.forums.len()).find(|&f| self.forum_name(f) == name)
    }

    pub fn user_by_name(&self, name: &str) -> Option<usize> {
        (0..self.users.len()).find(|&u| self.user_name(u) == name)
    }
}

/// Generates the forum site of `seed`.
pub fn generate_forum(rng: &mut Rng) -> Forum {
    let mut kinds: Vec<u8> = (0..FORUMS.len() as u8).collect();
    rng.shuffle(&mut kinds);
    kinds.truncate(4);
    let mut handles = BTreeSet::new();
    while handles.len() < 24 {
        handles.insert(Handle {
            adjective: rng.index(USER_ADJECTIVES.len()) as u8,
            animal: rng.index(USER_ANIMALS.len()) as u8,
            number: rng.int(1, 100) as u8,
        });
    }
    let mut users: Vec<Handle> = handles.into_iter().collect();
    rng.shuffle(&mut users);
    let me = 0u16;
    let mut posts = Vec::new();
    for f in 0..kinds.len() {
        let kind = &FORUMS[kinds[f] as usize];
        let count = rng.int(8, 15) as usize;
        let mut titles = BTreeSet::new();
        let mut scores = BTreeSet::new();
        let mut ages = BTreeSet::new();
        while titles.len() < count {
            titles.insert((rng.index(TITLE_PATTERNS.len()), rng.index(kind.nouns.len())));
        }
        let mut titles: Vec<_> = titles.into_iter().collect();
        rng.shuffle(&mut titles);
        for (pattern, noun) in titles {
            let noun_text = kind.nouns[noun];
            let score = loop {
                let s = rng.int(-5, 400) as i32;
                if scores.insert(s) {
                    break s;
                }
            };
            let age = loop {
                let a = rng.int(1, 2000) as u16;
                if ages.insert(a) {
                    break a;
                }
            };
            // Other users wrote the generated posts; two become the signed-in user's below.
            let author = rng.int(1, users.len() as i64) as u16;
            let comments = (0..rng.int(0, 7))
                .map(|_| Comment {
                    author: rng.int(1, users.len() as i64) as u16,
                    text: Text::Stock(rng.index(COMMENT_PHRASES.len()) as u8),
                    score: rng.int(-3, 60) as i32,
                    vote: 0,
                    age: rng.int(0, age as i64) as u16,
                })
                .collect();
            posts.push(Post {
                forum: f as u8,
                author,
                title: TITLE_PATTERNS[pattern].replace("{}", noun_text).into(),
                body: BODY_PATTERNS[rng.index(BODY_PATTERNS.len())].replace("{}", noun_text).into(),
                score,
                vote: 0,
                age,
                comments,
            });
        }
    }
    let subscribed = (0..kinds.len()).map(|_| rng.bool()).collect();
    let name = rng.index(FORUM_SITE_NAMES.len()) as u8;
    // The signed-in user's own posts (the ones edit tasks change): two, in different forums.
    let first = rng.index(posts.len());
    let others: Vec<usize> = (0..posts.len()).filter(|&p| posts[p].forum != posts[first].forum).collect();
    let second = *rng.choice(&others);
    for p in [first, second] {
        posts[p].author = me;
    }
    Forum { name, forums: kinds, subscribed, users, me, posts }
}

// ---- code hosting ----

pub const CODE_SITE_NAMES: [&str; 4] = ["Forgehub", "Commitline", "Branchyard", "Mergewell"];

/// First word of a project's name.
pub const PROJECT_PREFIXES: [&str; 12] =
    ["swift", "amber", "lunar", "cobalt", "maple", "delta", "nimbus", "quartz", "echo", "ember", "polar", "velvet"];

/// Second word of a project's name and the project's description.
pub const PROJECT_NOUNS: [(&str, &str); 10] = [
    ("parser", "Parses configuration files into typed settings."),
    ("ledger", "Double-entry bookkeeping for small teams."),
    ("router", "An HTTP request router with middleware."),
    ("atlas", "Map tiles and geocoding helpers."),
    ("forge", "Build orchestration for monorepos."),
    ("relay", "Moves messages between queues and webhooks."),
    ("beacon", "Uptime checks and status pages."),
    ("vault", "Encrypted storage of application secrets."),
    ("canvas", "A 2D drawing library for the browser."),
    ("sentry", "Log scanning and alerting rules."),
];

pub const LABELS: [&str; 8] =
    ["bug", "feature", "documentation", "performance", "security", "ui", "question", "good first issue"];

/// Member roles, lowest first; `Owner` is held by the project's namespace owner only.
pub const ROLES: [&str; 5] = ["Guest", "Reporter", "Developer", "Maintainer", "Owner"];
pub const OWNER_ROLE: u8 = 4;

/// The parts of a project that issues and merge requests are about.
pub const COMPONENTS: [&str; 12] = [
    "login page",
    "settings panel",
    "search index",
    "CLI parser",
    "cache layer",
    "export job",
    "API client",
    "docs site",
    "build script",
    "test runner",
    "webhook handler",
    "dashboard",
];

/// Issue title patterns; `{}` takes a component.
pub const ISSUE_PATTERNS: [&str; 8] = [
    "Crash in the {}",
    "Slow response from the {}",
    "Add dark mode to the {}",
    "Typo in the {} help text",
    "The {} ignores the timeout setting",
    "Support Unicode in the {}",
    "Flaky test around the {}",
    "Improve error messages of the {}",
];

/// Merge request title patterns (`{}` takes a component) and their branch prefixes.
pub const MR_PATTERNS: [(&str, &str); 6] = [
    ("Refactor the {}", "refactor"),
    ("Fix the {} on empty input", "fix"),
    ("Speed up the {}", "perf"),
    ("Add tests for the {}", "test"),
    ("Document the {}", "docs"),
    ("Upgrade dependencies of the {}", "deps"),
];

pub const MR_STATES: [&str; 3] = ["Open", "Merged", "Closed"];

pub const NOTE_PHRASES: [&str; 8] = [
    "I can reproduce this on the latest release.",
    "Is there a workaround for now?",
    "This blocks our next deploy.",
    "Looks related to the recent refactor.",
    "I will take a look this week.",
    "Could you attach the logs?",
    "Confirmed on two machines.",
    "Thanks for the detailed report.",
];

/// A title drawn as (pattern, component) indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Titled {
    pub pattern: u8,
    pub component: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub prefix: u8,
    pub noun: u8,
    /// The user whose namespace holds the project (its Owner).
    pub owner: u16,
    pub stars: u32,
}

/// A user's membership of a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub project: u8,
    pub user: u16,
    /// Index into [`ROLES`].
    pub role: u8,
    pub commits: u32,
}

/// A comment on an issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub author: u16,
    pub text: Text,
}

impl Note {
    pub fn text(&self) -> &str {
        match &self.text {
            Text::Stock(i) => NOTE_PHRASES[*i as usize],
            Text::Own(s) => s,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub project: u8,
    /// The number shown as `#iid`, counted per project from 1.
    pub iid: u16,
    pub title: Titled,
    pub author: u16,
    pub assignee: Option<u16>,
    /// Bit `i` set: the issue has label `LABELS[i]`.
    pub labels: u16,
    pub open: bool,
    /// Days since it was opened.
    pub age: u16,
    pub notes: Vec<Note>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    pub project: u8,
    /// The number shown as `!iid`, counted per project from 1.
    pub iid: u16,
    pub title: Titled,
    pub author: u16,
    /// Index into [`MR_STATES`].
    pub state: u8,
    pub age: u16,
}

/// A code-hosting site: projects, their members with roles and commit counts, issues and
/// merge requests. Per project, issue titles, merge request titles and members' commit counts
/// are distinct; star counts are distinct over the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeHost {
    pub name: u8,
    pub users: Vec<Handle>,
    /// The signed-in user (index into `users`).
    pub me: u16,
    pub projects: Vec<Project>,
    pub members: Vec<Member>,
    pub issues: Vec<Issue>,
    pub mrs: Vec<MergeRequest>,
}

/// "The dashboard ignores ...": a pattern filled with a component, first letter upper case.
fn fill(pattern: &str, component: &str) -> String {
    let text = pattern.replace("{}", component);
    let mut chars = text.chars();
    chars.next().map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

impl CodeHost {
    pub fn site_name(&self) -> &'static str {
        CODE_SITE_NAMES[self.name as usize]
    }

    pub fn user_name(&self, u: usize) -> String {
        self.users[u].text()
    }

    pub fn user_by_name(&self, name: &str) -> Option<usize> {
        (0..self.users.len()).find(|&u| self.user_name(u) == name)
    }

    /// `amber-parser`: unique over the site.
    pub fn project_name(&self, p: usize) -> String {
        let project = &self.projects[p];
        format!("{}-{}", PROJECT_PREFIXES[project.prefix as usize], PROJECT_NOUNS[project.noun as usize].0)
    }

    /// `quiet_otter42/amber-parser`.
    pub fn project_path(&self, p: usize) -> String {
        format!("{}/{}", self.user_name(self.projects[p].owner as usize), self.project_name(p))
    }

    pub fn project_by_path(&self, owner: &str, name: &str) -> Option<usize> {
        (0..self.projects.len())
            .find(|&p| self.project_name(p) == name && self.user_name(self.projects[p].owner as usize) == owner)
    }

    pub fn description(&self, p: usize) -> &'static str {
        PROJECT_NOUNS[self.projects[p].noun as usize].1
    }

    pub fn issue_title(&self, i: usize) -> String {
        let t = self.issues[i].title;
        fill(ISSUE_PATTERNS[t.pattern as usize], COMPONENTS[t.component as usize])
    }

    pub fn mr_title(&self, m: usize) -> String {
        let t = self.mrs[m].title;
        fill(MR_PATTERNS[t.pattern as usize].0, COMPONENTS[t.component as usize])
    }

    /// `fix/cli-parser`.
    pub fn source_branch(&self, m: usize) -> String {
        let t = self.mrs[m].title;
        let component = COMPONENTS[t.component as usize].to_lowercase().replace(' ', "-");
        format!("{}/{component}", MR_PATTERNS[t.pattern as usize].1)
    }

    /// `bug, ui` (label order), or `None`.
    pub fn label_text(&self, i: usize) -> String {
        let names: Vec<&str> =
            (0..LABELS.len()).filter(|&l| self.issues[i].labels & (1 << l) != 0).map(|l| LABELS[l]).collect();
        if names.is_empty() {
            "None".into()
        } else {
            names.join(", ")
        }
    }

    /// The members of project `p`, in the order they joined.
    pub fn members_of(&self, p: usize) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.project as usize == p)
    }

    pub fn member(&self, p: usize, u: usize) -> Option<&Member> {
        self.members_of(p).find(|m| m.user as usize == u)
    }

    pub fn project_commits(&self, p: usize) -> u32 {
        self.members_of(p).map(|m| m.commits).sum()
    }

    pub fn user_commits(&self, u: usize) -> u32 {
        self.members.iter().filter(|m| m.user as usize == u).map(|m| m.commits).sum()
    }

    /// The issue of project `p` numbered `iid`.
    pub fn issue_index(&self, p: usize, iid: u16) -> Option<usize> {
        self.issues.iter().position(|i| i.project as usize == p && i.iid == iid)
    }

    pub fn mr_index(&self, p: usize, iid: u16) -> Option<usize> {
        self.mrs.iter().position(|m| m.project as usize == p && m.iid == iid)
    }
}

/// `count` distinct titles (pattern, component) over `patterns` patterns, in drawn order.
fn distinct_titles(rng: &mut Rng, count: usize, patterns: usize) -> Vec<Titled> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let t = Titled { pattern: rng.index(patterns) as u8, component: rng.index(COMPONENTS.len()) as u8 };
        if seen.insert(t) {
            out.push(t);
        }
    }
    out
}

/// Ages in days, oldest first, so numbers (`#iid`) grow as items get newer.
fn ages(rng: &mut Rng, count: usize) -> Vec<u16> {
    let mut ages: Vec<u16> = (0..count).map(|_| rng.int(0, 900) as u16).collect();
    ages.sort_unstable_by(|a, b| b.cmp(a));
    ages
}

/// Generates the code-hosting site of `seed`.
pub fn generate_code(rng: &mut Rng) -> CodeHost {
    let mut handles = BTreeSet::new();
    while handles.len() < 16 {
        handles.insert(Handle {
            adjective: rng.index(USER_ADJECTIVES.len()) as u8,
            animal: rng.index(USER_ANIMALS.len()) as u8,
            number: rng.int(1, 100) as u8,
        });
    }
    let mut users: Vec<Handle> = handles.into_iter().collect();
    rng.shuffle(&mut users);
    let mut names = BTreeSet::new();
    let count = rng.int(5, 8) as usize;
    while names.len() < count {
        names.insert((rng.index(PROJECT_PREFIXES.len()) as u8, rng.index(PROJECT_NOUNS.len()) as u8));
    }
    let mut names: Vec<(u8, u8)> = names.into_iter().collect();
    rng.shuffle(&mut names);
    let mut stars = BTreeSet::new();
    let (mut projects, mut members, mut issues, mut mrs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (p, (prefix, noun)) in names.into_iter().enumerate() {
        // 3-6 members, the first the owner; the signed-in user (0) is in about half.
        let mut team: Vec<u16> = Vec::new();
        let size = rng.int(3, 7) as usize;
        while team.len() < size {
            let u = rng.index(users.len()) as u16;
            if !team.contains(&u) {
                team.push(u);
            }
        }
        let mut commits = BTreeSet::new();
        for (k, &user) in team.iter().enumerate() {
            let count = loop {
                let c = rng.int(1, 600) as u32;
                if commits.insert(c) {
                    break c;
                }
            };
            let role = if k == 0 { OWNER_ROLE } else { rng.index(4) as u8 };
            members.push(Member { project: p as u8, user, role, commits: count });
        }
        let star_count = loop {
            let s = rng.int(0, 2000) as u32;
            if stars.insert(s) {
                break s;
            }
        };
        projects.push(Project { prefix, noun, owner: team[0], stars: star_count });
        let n = rng.int(6, 15) as usize;
        for (k, (title, age)) in distinct_titles(rng, n, ISSUE_PATTERNS.len()).into_iter().zip(ages(rng, n)).enumerate()
        {
            let mut labels = 1u16 << rng.index(LABELS.len());
            if rng.bool() {
                labels |= 1 << rng.index(LABELS.len());
            }
            let assignee = if rng.int(0, 10) < 7 { Some(*rng.choice(&team)) } else { None };
            let notes = (0..rng.int(0, 4))
                .map(|_| Note {
                    author: rng.index(users.len()) as u16,
                    text: Text::Stock(rng.index(NOTE_PHRASES.len()) as u8),
                })
                .collect();
            issues.push(Issue {
                project: p as u8,
                iid: k as u16 + 1,
                title,
                author: rng.index(users.len()) as u16,
                assignee,
                labels,
                open: rng.int(0, 10) < 6,
                age,
                notes,
            });
        }
        let n = rng.int(2, 7) as usize;
        for (k, (title, age)) in distinct_titles(rng, n, MR_PATTERNS.len()).into_iter().zip(ages(rng, n)).enumerate() {
            let state = [0, 0, 0, 0, 1, 1, 1, 2, 2, 0][rng.index(10)];
            mrs.push(MergeRequest {
                project: p as u8,
                iid: k as u16 + 1,
                title,
                author: *rng.choice(&team),
                state,
                age,
            });
        }
    }
    CodeHost { name: rng.index(CODE_SITE_NAMES.len()) as u8, users, me: 0, projects, members, issues, mrs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_from_2022() {
        assert_eq!(date_text(0), "January 1, 2022");
        assert_eq!(date_text(59), "March 1, 2022");
        assert_eq!(date_text(365 + 59), "March 1, 2023");
        assert_eq!(date_text(730 + 59), "February 29, 2024");
    }

    #[test]
    fn generated_names_are_unique() {
        for seed in 0..50 {
            let shop = generate_shop(&mut Rng::derive(1, seed));
            let names: BTreeSet<String> = (0..shop.products.len()).map(|p| shop.product_name(p)).collect();
            assert_eq!(names.len(), shop.products.len());
            let prices: BTreeSet<u32> = shop.products.iter().map(|p| p.price_cents).collect();
            assert_eq!(prices.len(), shop.products.len());
            let forum = generate_forum(&mut Rng::derive(2, seed));
            let titles: BTreeSet<&str> = forum.posts.iter().map(|p| &*p.title).collect();
            assert_eq!(titles.len(), forum.posts.len());
            let code = generate_code(&mut Rng::derive(3, seed));
            let paths: BTreeSet<String> = (0..code.projects.len()).map(|p| code.project_name(p)).collect();
            assert_eq!(paths.len(), code.projects.len());
            let stars: BTreeSet<u32> = code.projects.iter().map(|p| p.stars).collect();
            assert_eq!(stars.len(), code.projects.len());
            for p in 0..code.projects.len() {
                let issues: BTreeSet<String> = (0..code.issues.len())
                    .filter(|&i| code.issues[i].project as usize == p)
                    .map(|i| code.issue_title(i))
                    .collect();
                assert_eq!(issues.len(), code.issues.iter().filter(|i| i.project as usize == p).count());
                let commits: BTreeSet<u32> = code.members_of(p).map(|m| m.commits).collect();
                assert_eq!(commits.len(), code.members_of(p).count());
                assert_eq!(code.members_of(p).filter(|m| m.role == OWNER_ROLE).count(), 1);
            }
        }
    }
}
