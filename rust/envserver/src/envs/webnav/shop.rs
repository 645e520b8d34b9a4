//! The shop's pages (as accessibility trees) and what its buttons and forms do.

use super::data::{date_text, money, Line, Order, Shop, BRANDS, ORDER_STATUSES, SHIPPING_CENTS};
use super::pages::{Field, Form, Op, Page, Sort};
use super::tree::{Role, Target, Tree};
use super::{plural, Effect};

/// Products on one page of a category or search listing.
pub const PAGE_SIZE: usize = 6;
const MAX_QTY: u32 = 99;

/// The products of category `cat` in `sort` order.
pub fn category_listing(shop: &Shop, cat: usize, sort: Sort) -> Vec<usize> {
    let mut items: Vec<usize> = shop.in_category(cat).collect();
    match sort {
        Sort::Position => {}
        Sort::Name => items.sort_by_key(|&p| shop.product_name(p)),
        Sort::Price => items.sort_by_key(|&p| shop.products[p].price_cents),
        // Highest rated first; unrated last; ties keep position order (the sort is stable).
        Sort::Rating => items.sort_by_key(|&p| std::cmp::Reverse(shop.rating_tenths(p).map_or(0, |r| r + 1))),
    }
    items
}

/// Products whose name contains every word of `query` (case-insensitive), in position order.
pub fn search_results(shop: &Shop, query: &str) -> Vec<usize> {
    let words: Vec<&str> = query.split_whitespace().collect();
    (0..shop.products.len())
        .filter(|&p| {
            let name = shop.product_name(p).to_lowercase();
            !words.is_empty() && words.iter().all(|w| name.contains(w))
        })
        .collect()
}

pub fn title(shop: &Shop, page: &Page) -> String {
    match page {
        Page::Category { cat, .. } => shop.category_kind(*cat as usize).name.to_string(),
        Page::Search { query, .. } => format!("Search results for: '{query}'"),
        Page::Product(p) => shop.product_name(*p as usize),
        Page::Cart => "Shopping Cart".into(),
        Page::Checkout => "Checkout".into(),
        Page::Orders => "My Orders".into(),
        Page::Order(n) => format!("Order # {n}"),
        Page::Account => "My Account".into(),
        _ => shop.shop_name().into(),
    }
}

/// Builds the tree of `page` (a shop page) into `tree`.
pub fn render(shop: &Shop, page: &Page, form: &Form, notice: Option<&str>, tree: &mut Tree) {
    tree.title = title(shop, page);
    tree.push(0, Role::RootWebArea, tree.title.clone(), Target::None);
    header(shop, form, tree);
    if let Some(notice) = notice {
        tree.text(1, notice);
    }
    match page {
        Page::Category { cat, sort, page } => category(shop, *cat as usize, *sort, *page, form, tree),
        Page::Search { query, page } => search(shop, query, *page, tree),
        Page::Product(p) => product(shop, *p as usize, form, tree),
        Page::Cart => cart(shop, form, tree),
        Page::Checkout => checkout(shop, tree),
        Page::Orders => orders(shop, tree),
        Page::Order(n) => match shop.order_index(*n) {
            Some(i) => order(shop, &shop.orders[i], tree),
            None => _ = tree.text(1, "This order does not exist."),
        },
        Page::Account => account(shop, form, tree),
        _ => home(shop, tree),
    }
}

fn field(tree: &mut Tree, depth: u8, role: Role, name: &str, field: Field, value: Option<&str>) {
    tree.push(depth, role, name, Target::Field(field));
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        tree.text(depth + 1, value);
    }
}

fn header(shop: &Shop, form: &Form, tree: &mut Tree) {
    tree.link(1, shop.shop_name(), Page::ShopHome);
    tree.link(1, "My Account", Page::Account);
    tree.link(1, "My Orders", Page::Orders);
    let items: u32 = shop.cart.iter().map(|l| l.qty).sum();
    tree.link(1, format_args!("My Cart ({items})"), Page::Cart);
    field(tree, 1, Role::Searchbox, "Search entire store here...", Field::Search, form.get(Field::Search));
    tree.button(1, "Search", Op::Search);
    tree.push(1, Role::Navigation, "Categories", Target::None);
    for c in 0..shop.categories.len() {
        tree.link(2, shop.category_kind(c).name, Page::category(c));
    }
}

fn home(shop: &Shop, tree: &mut Tree) {
    tree.heading(1, format_args!("Welcome to {}", shop.shop_name()));
    tree.text(1, "Featured products");
    // The first product of each category.
    for c in 0..shop.categories.len() {
        if let Some(p) = shop.in_category(c).next() {
            listing_item(shop, p, tree);
        }
    }
}

fn rating_text(shop: &Shop, p: usize) -> String {
    match shop.rating_tenths(p) {
        None => "No reviews yet".into(),
        Some(r) => format!("Rating: {}.{} out of 5", r / 10, r % 10),
    }
}

fn listing_item(shop: &Shop, p: usize, tree: &mut Tree) {
    tree.link(2, shop.product_name(p), Page::Product(p as u16));
    tree.text(2, format_args!("{} · {}", money(shop.products[p].price_cents), rating_text(shop, p)));
    tree.button(2, "Add to Cart", Op::AddToCart(p as u16));
}

/// The items of page `page` of `items`, a range text and the number of pages.
fn paginate(items: &[usize], page: u16) -> (&[usize], usize) {
    let pages = items.len().div_ceil(PAGE_SIZE).max(1);
    let start = ((page as usize - 1) * PAGE_SIZE).min(items.len());
    (&items[start..(start + PAGE_SIZE).min(items.len())], pages)
}

fn pager(tree: &mut Tree, page: u16, pages: usize, at: impl Fn(u16) -> Page) {
    tree.text(1, format_args!("Page {page} of {pages}"));
    if page > 1 {
        tree.link(1, "Previous", at(page - 1));
    }
    if (page as usize) < pages {
        tree.link(1, "Next", at(page + 1));
    }
}

fn category(shop: &Shop, cat: usize, sort: Sort, page: u16, form: &Form, tree: &mut Tree) {
    let items = category_listing(shop, cat, sort);
    let (shown, pages) = paginate(&items, page);
    tree.heading(1, shop.category_kind(cat).name);
    field(tree, 1, Role::Combobox, "Sort By", Field::Sort, Some(form.get(Field::Sort).unwrap_or(sort.label())));
    if shown.is_empty() {
        tree.text(1, "We can't find products matching the selection.");
    } else {
        tree.text(
            1,
            format_args!(
                "Items {}-{} of {}",
                (page as usize - 1) * PAGE_SIZE + 1,
                (page as usize - 1) * PAGE_SIZE + shown.len(),
                items.len()
            ),
        );
    }
    for &p in shown {
        listing_item(shop, p, tree);
    }
    pager(tree, page, pages, |n| Page::Category { cat: cat as u8, sort, page: n });
}

fn search(shop: &Shop, query: &str, page: u16, tree: &mut Tree) {
    let items = search_results(shop, query);
    let (shown, pages) = paginate(&items, page);
    tree.heading(1, format_args!("Search results for: '{query}'"));
    if items.is_empty() {
        tree.text(1, "Your search returned no results.");
        return;
    }
    tree.text(1, format_args!("{} items", items.len()));
    for &p in shown {
        listing_item(shop, p, tree);
    }
    let query: Box<str> = query.into();
    pager(tree, page, pages, |n| Page::Search { query: query.clone(), page: n });
}

fn product(shop: &Shop, p: usize, form: &Form, tree: &mut Tree) {
    let prod = &shop.products[p];
    let name = shop.product_name(p);
    tree.heading(1, &name);
    tree.text(1, format_args!("SKU: {}", prod.sku));
    tree.text(1, format_args!("Price: {}", money(prod.price_cents)));
    match prod.reviews.len() {
        0 => tree.text(1, "No reviews yet"),
        n => tree.text(1, format_args!("{} ({})", rating_text(shop, p), plural(n, "review"))),
    };
    field(tree, 1, Role::Textbox, "Qty", Field::Qty, Some(form.get(Field::Qty).unwrap_or("1")));
    tree.button(1, "Add to Cart", Op::AddToCart(p as u16));
    tree.heading(1, "Details");
    let kind = shop.category_kind(prod.category as usize);
    tree.text(1, format_args!("Category: {} · Brand: {}", kind.name, BRANDS[prod.brand as usize]));
    tree.heading(1, format_args!("Customer Reviews ({})", prod.reviews.len()));
    for review in &prod.reviews {
        tree.text(2, format_args!("{} rated it {} out of 5", review.author.short(), review.stars));
        tree.text(2, review.text());
    }
}

fn cart(shop: &Shop, form: &Form, tree: &mut Tree) {
    tree.heading(1, "Shopping Cart");
    if shop.cart.is_empty() {
        tree.text(1, "You have no items in your shopping cart.");
        return;
    }
    for line in &shop.cart {
        let p = line.product as usize;
        tree.link(2, shop.product_name(p), Page::Product(line.product));
        tree.text(2, format_args!("Price: {}", money(shop.products[p].price_cents)));
        let qty = line.qty.to_string();
        field(
            tree,
            2,
            Role::Textbox,
            "Qty",
            Field::CartQty(line.product),
            Some(form.get(Field::CartQty(line.product)).unwrap_or(&qty)),
        );
        tree.text(2, format_args!("Subtotal: {}", money(shop.products[p].price_cents * line.qty)));
        tree.button(2, "Remove item", Op::RemoveLine(line.product));
    }
    tree.button(1, "Update Shopping Cart", Op::UpdateCart);
    tree.text(1, format_args!("Subtotal: {}", money(shop.cart_subtotal())));
    tree.link(1, "Proceed to Checkout", Page::Checkout);
}

fn checkout(shop: &Shop, tree: &mut Tree) {
    tree.heading(1, "Checkout");
    if shop.cart.is_empty() {
        tree.text(1, "Your cart is empty.");
        return;
    }
    tree.text(1, format_args!("Ship to: {}, {}", shop.account.person.full(), shop.account.city));
    for line in &shop.cart {
        let p = line.product as usize;
        tree.text(
            2,
            format_args!("{} x {}: {}", line.qty, shop.product_name(p), money(shop.products[p].price_cents * line.qty)),
        );
    }
    tree.text(1, format_args!("Shipping: {}", money(SHIPPING_CENTS)));
    tree.text(1, format_args!("Order Total: {}", money(shop.cart_subtotal() + SHIPPING_CENTS)));
    tree.button(1, "Place Order", Op::PlaceOrder);
}

fn orders(shop: &Shop, tree: &mut Tree) {
    tree.heading(1, "My Orders");
    // Newest first, as order histories list them.
    for order in shop.orders.iter().rev() {
        tree.text(
            2,
            format_args!(
                "Order #{} · {} · {} · {}",
                order.number,
                date_text(order.day),
                money(shop.order_subtotal(order) + SHIPPING_CENTS),
                ORDER_STATUSES[order.status as usize]
            ),
        );
        tree.link(2, "View Order", Page::Order(order.number));
    }
}

fn order(shop: &Shop, order: &Order, tree: &mut Tree) {
    tree.heading(1, format_args!("Order # {}", order.number));
    tree.text(1, format_args!("Status: {}", ORDER_STATUSES[order.status as usize]));
    tree.text(1, format_args!("Order Date: {}", date_text(order.day)));
    for line in &order.lines {
        let p = line.product as usize;
        tree.link(2, shop.product_name(p), Page::Product(line.product));
        tree.text(2, format_args!("Qty: {} · Subtotal: {}", line.qty, money(shop.products[p].price_cents * line.qty)));
    }
    tree.text(1, format_args!("Subtotal: {}", money(shop.order_subtotal(order))));
    tree.text(1, format_args!("Shipping & Handling: {}", money(SHIPPING_CENTS)));
    tree.text(1, format_args!("Grand Total: {}", money(shop.order_subtotal(order) + SHIPPING_CENTS)));
}

fn account(shop: &Shop, form: &Form, tree: &mut Tree) {
    tree.heading(1, "My Account");
    tree.text(1, format_args!("Name: {}", shop.account.person.full()));
    tree.text(1, format_args!("Email: {}", shop.account.email()));
    field(tree, 1, Role::Textbox, "Phone", Field::Phone, Some(form.get(Field::Phone).unwrap_or(&shop.account.phone)));
    field(tree, 1, Role::Textbox, "City", Field::City, Some(form.get(Field::City).unwrap_or(&shop.account.city)));
    tree.button(1, "Save", Op::SaveAccount);
}

/// The quantity typed into `field`, or the error to show.
fn quantity(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if n <= MAX_QTY => Ok(n),
        _ => Err(format!("Please enter a whole number from 0 to {MAX_QTY} as the quantity (got '{}').", text.trim())),
    }
}

/// Applies a shop button or form submission on `page`.
pub fn apply(shop: &mut Shop, op: Op, form: &Form) -> Effect {
    match op {
        Op::Search => {
            let query = form.get(Field::Search).unwrap_or("");
            if query.trim().is_empty() {
                return Effect::error("Please enter a search term.");
            }
            Effect::go(Page::search(query, 1), None)
        }
        Op::AddToCart(p) => {
            let qty = match quantity(form.get(Field::Qty).unwrap_or("1")) {
                Ok(0) => return Effect::error("The quantity must be at least 1."),
                Ok(n) => n,
                Err(e) => return Effect::error(&e),
            };
            match shop.cart.iter_mut().find(|l| l.product == p) {
                Some(line) if line.qty + qty > MAX_QTY => {
                    return Effect::error(&format!("The most you can have in the cart is {MAX_QTY}."))
                }
                Some(line) => line.qty += qty,
                None => shop.cart.push(Line { product: p, qty }),
            }
            Effect::stay(format!("You added {} to your shopping cart.", shop.product_name(p as usize)))
        }
        Op::RemoveLine(p) => {
            shop.cart.retain(|l| l.product != p);
            Effect::stay(format!("You removed {} from your shopping cart.", shop.product_name(p as usize)))
        }
        Op::UpdateCart => {
            let mut updated = shop.cart.clone();
            for line in &mut updated {
                if let Some(text) = form.get(Field::CartQty(line.product)) {
                    match quantity(text) {
                        Ok(n) => line.qty = n,
                        Err(e) => return Effect::error(&e),
                    }
                }
            }
            updated.retain(|l| l.qty > 0);
            shop.cart = updated;
            Effect::stay("Your shopping cart was updated.".into())
        }
        Op::PlaceOrder => {
            if shop.cart.is_empty() {
                return Effect::error("Your cart is empty.");
            }
            let number = shop.orders.last().map_or(100, |o| o.number) + 1;
            let lines = std::mem::take(&mut shop.cart);
            shop.orders.push(Order { number, day: shop.today, lines, status: 0 });
            Effect::go(
                Page::Order(number),
                Some(format!("Thank you for your purchase! Your order number is {number}.")),
            )
        }
        Op::SaveAccount => {
            let phone = form.get(Field::Phone).unwrap_or(&shop.account.phone).trim().to_string();
            let city = form.get(Field::City).unwrap_or(&shop.account.city).trim().to_string();
            if phone.is_empty() || city.is_empty() {
                return Effect::error("Phone and City are required fields.");
            }
            if phone.chars().count() > 40 || city.chars().count() > 40 {
                return Effect::error("Phone and City take at most 40 characters.");
            }
            shop.account.phone = phone;
            shop.account.city = city;
            Effect::stay("You saved the account information.".into())
        }
        _ => Effect::error("This button does nothing here."),
    }
}
