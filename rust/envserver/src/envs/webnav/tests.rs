//! webnav's behaviour: determinism, the planner solving every template, near misses rejected,
//! bad input, ids in view being actionable, and golden renders of every page type.
//!
//! Goldens live in `rust/envserver/tests/webnav_golden/`; after an intended change of the
//! rendering, rewrite them with `WEBNAV_BLESS=1 cargo test webnav` and review the diff.

use super::data::Line;
use super::tasks::Check;
use super::*;

fn factory(pairs: &[(&str, &str)]) -> WebNavFactory {
    let options: Options = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    WebNavFactory::new(&options).unwrap()
}

fn session(task_id: u64) -> WebNav {
    session_with(task_id, &[])
}

fn session_with(task_id: u64, options: &[(&str, &str)]) -> WebNav {
    let mut env = factory(options).session();
    env.reset(task_id).unwrap();
    env
}

fn episode(env: &WebNav) -> &Episode {
    env.episode.as_ref().unwrap()
}

fn feedback(env: &WebNav) -> Option<&str> {
    episode(env).feedback.as_deref()
}

/// Plays the planner to the end; returns (reward, actions).
fn solve(env: &mut WebNav) -> (f32, Vec<String>) {
    let mut actions = Vec::new();
    for _ in 0..MAX_PLAN_STEPS {
        let step = env.expert().unwrap();
        actions.push(step.action.clone());
        let out = env.step(&step.action);
        let fb = feedback(env).unwrap_or("");
        assert!(
            out.done || fb.is_empty(),
            "task {}: planner action {:?} was refused: {fb}\n{}",
            episode(env).task_id,
            step.action,
            out.observation
        );
        if out.done {
            return (out.reward, actions);
        }
    }
    panic!("task {}: the planner did not finish: {actions:?}", episode(env).task_id);
}

const T: u64 = TEMPLATES.len() as u64;

#[test]
fn there_are_46_templates_over_three_sites_and_kinds() {
    assert_eq!(TEMPLATES.len(), 46);
    let names: std::collections::BTreeSet<&str> = TEMPLATES.iter().map(|t| t.name).collect();
    assert_eq!(names.len(), TEMPLATES.len());
    // The template layout: the shop's first, then the forum's, then the code host's, then the
    // forum's edit template; templates keep their index when one is added at the end.
    let sites: Vec<SiteKind> = TEMPLATES.iter().map(|t| t.site).collect();
    assert!(sites[..17].iter().all(|&s| s == SiteKind::Shop) && sites[17..30].iter().all(|&s| s == SiteKind::Forum));
    assert!(sites[30..45].iter().all(|&s| s == SiteKind::Code) && sites[45] == SiteKind::Forum);
    for site in [SiteKind::Shop, SiteKind::Forum, SiteKind::Code] {
        for kind in [tasks::Kind::Info, tasks::Kind::Nav, tasks::Kind::State] {
            assert!(TEMPLATES.iter().filter(|t| t.site == site && t.kind == kind).count() >= 3);
        }
    }
}

#[test]
fn same_task_same_episode_different_tasks_differ() {
    for task_id in [0, 7, 31, 29 + 30 * 5, 12_345] {
        let a = session(task_id);
        let b = session(task_id);
        assert_eq!(a.observation, b.observation);
        assert_eq!(episode(&a).site, episode(&b).site);
        assert_eq!(episode(&a).task, episode(&b).task);
    }
    // Same template, next seed: another site and objective.
    let a = session(3);
    let b = session(3 + T);
    assert_ne!(episode(&a).site, episode(&b).site);
    assert_ne!(a.observation, b.observation);
    // Same seed, other template: the same site, another objective.
    let c = session(4);
    assert_eq!(episode(&a).site, episode(&c).site);
    assert_ne!(episode(&a).task.intent, episode(&c).task.intent);
    // The same on the code host: one site per seed, generated the same way twice.
    let (code, again, next_seed, same_seed) = (session(30), session(30), session(30 + T), session(44));
    assert!(matches!(episode(&code).site, Site::Code(_)));
    assert_eq!(episode(&code).site, episode(&again).site);
    assert_eq!(code.observation, again.observation);
    assert_ne!(episode(&code).site, episode(&next_seed).site);
    assert_eq!(episode(&code).site, episode(&same_seed).site);
    let Site::Code(site) = &episode(&code).site else { unreachable!() };
    assert_eq!(*site, data::generate_code(&mut Rng::derive(SITE_SEED ^ 2, 0)));
}

#[test]
fn the_site_of_a_seed_is_pinned() {
    // A changed draw changes every task on every machine: this pins the stream.
    let env = session(0);
    let Site::Shop(shop) = &episode(&env).site else { panic!("template 0 is a shop task") };
    let first = format!("{} {}", shop.product_name(0), data::money(shop.products[0].price_cents));
    let again = session(0);
    let Site::Shop(shop2) = &episode(&again).site else { unreachable!() };
    assert_eq!(first, format!("{} {}", shop2.product_name(0), data::money(shop2.products[0].price_cents)));
    assert_eq!(shop.products.len(), shop2.products.len());
}

#[test]
fn the_planner_solves_every_template() {
    let mut difficulty = vec![Vec::new(); TEMPLATES.len()];
    for seed in 0..40 {
        for template in 0..T {
            let task_id = seed * T + template;
            let mut env = session(task_id);
            let (reward, actions) = solve(&mut env);
            assert_eq!(reward, 1.0, "task {task_id} ({}): {actions:?}", TEMPLATES[template as usize].name);
            assert_eq!(env.info()["difficulty"], actions.len(), "task {task_id}");
            assert_eq!(env.info()["success"], true);
            difficulty[template as usize].push(actions.len());
        }
    }
    for (t, counts) in difficulty.iter().enumerate() {
        assert!(counts.iter().all(|&n| n >= 2), "{}: {counts:?}", TEMPLATES[t].name);
    }
}

#[test]
fn info_names_the_task() {
    let env = session(12);
    let info = env.info();
    assert_eq!(info["template"], "shop_add_to_cart");
    assert_eq!(info["kind"], "state_change");
    assert_eq!(info["site"], "shop");
    assert!(info["intent"].as_str().unwrap().starts_with("Add "));
    assert!(info["difficulty"].as_u64().unwrap() >= 3);
}

/// The task id of `template` with seed `seed`.
fn task_of(name: &str, seed: u64) -> u64 {
    seed * T + TEMPLATES.iter().position(|t| t.name == name).unwrap() as u64
}

#[test]
fn near_miss_answers_are_rejected() {
    for seed in 0..20 {
        let env = session(task_of("shop_product_price", seed));
        let Goal::Answer { rule, .. } = &episode(&env).task.goal else { panic!() };
        let tasks::AnswerRule::Exact(golds) = rule else { panic!() };
        let gold = &golds[0];
        assert!(answer_accepted(rule, gold) && answer_accepted(rule, &format!("  '{}' ", gold.to_uppercase())));
        // As strict as WebArena's exact_match: no `$` dropped, no final full stop.
        assert!(!answer_accepted(rule, &gold.replace('$', "")) && !answer_accepted(rule, &format!("{gold}.")));
        let cents: u32 = gold.replace(['$', '.'], "").parse().unwrap();
        for wrong in [cents + 1, cents - 1, cents + 100] {
            assert!(!answer_accepted(rule, &data::money(wrong)), "{gold} vs {wrong}");
        }
        let env = session(task_of("shop_order_products", seed));
        let Goal::Answer { rule: tasks::AnswerRule::MustInclude(names), .. } = &episode(&env).task.goal else {
            panic!()
        };
        assert!(answer_accepted(&episode(&env).task.goal_rule(), &names.join(" and ")));
        if names.len() > 1 {
            assert!(!answer_accepted(&episode(&env).task.goal_rule(), &names[1..].join(", ")));
        }
        let env = session(task_of("forum_comment_count", seed));
        let rule = episode(&env).task.goal_rule();
        let tasks::AnswerRule::Exact(golds) = &rule else { panic!() };
        let n: i64 = golds[0].parse().unwrap();
        assert!(!answer_accepted(&rule, &(n + 1).to_string()) && !answer_accepted(&rule, &format!("1{n}")));
        code_near_miss_answers(seed);
    }
}

/// The code host's answers: counts off by one, another merge request's branch, the member
/// with the second most commits, another project.
fn code_near_miss_answers(seed: u64) {
    let code_of = |env: &WebNav| match &episode(env).site {
        Site::Code(c) => c.clone(),
        _ => panic!("not a code-hosting task"),
    };
    for name in ["code_project_stars", "code_labelled_issue_count", "code_user_commits"] {
        let env = session(task_of(name, seed));
        let rule = episode(&env).task.goal_rule();
        let tasks::AnswerRule::Exact(golds) = &rule else { panic!() };
        let n: i64 = golds[0].parse().unwrap();
        assert!(answer_accepted(&rule, &format!("\"{n}\"")), "{name}");
        for wrong in [n + 1, n - 1, n * 10] {
            assert!(!answer_accepted(&rule, &wrong.to_string()), "{name}: {n} vs {wrong}");
        }
    }
    let env = session(task_of("code_mr_source_branch", seed));
    let c = code_of(&env);
    let rule = episode(&env).task.goal_rule();
    let tasks::AnswerRule::Exact(golds) = &rule else { panic!() };
    assert_eq!(golds.len(), 1);
    for m in 0..c.mrs.len() {
        assert_eq!(answer_accepted(&rule, &c.source_branch(m)), c.source_branch(m) == golds[0]);
    }
    assert!(!answer_accepted(&rule, &golds[0].replace('/', "-")));
    let env = session(task_of("code_top_committer", seed));
    let c = code_of(&env);
    let Goal::Answer { rule, evidence: (Page::Code(code::CodePage::Members(p)), _) } = &episode(&env).task.goal else {
        panic!("the top committer is read off a members page")
    };
    let mut by_commits: Vec<&data::Member> = c.members_of(*p as usize).collect();
    by_commits.sort_by_key(|m| std::cmp::Reverse(m.commits));
    assert!(answer_accepted(rule, &c.user_name(by_commits[0].user as usize)));
    assert!(!answer_accepted(rule, &c.user_name(by_commits[1].user as usize)));
    let env = session(task_of("code_most_starred", seed));
    let c = code_of(&env);
    let rule = episode(&env).task.goal_rule();
    let second = code::project_listing(&c, code::ProjectSort::Stars)[1];
    assert!(!answer_accepted(&rule, &c.project_name(second)) && !answer_accepted(&rule, &c.project_path(second)));
}

impl Task {
    fn goal_rule(&self) -> tasks::AnswerRule {
        match &self.goal {
            Goal::Answer { rule, .. } => rule.clone(),
            _ => panic!("not an information task"),
        }
    }
}

/// Runs the planner to completion on a clone, then lets `spoil` change the final state; the
/// spoiled state must fail the check.
fn spoiled(name: &str, seed: u64, spoil: impl Fn(&mut Site, &Check)) {
    let mut env = session(task_of(name, seed));
    let Goal::State(check) = episode(&env).task.goal.clone() else { panic!("{name} is not a state task") };
    // Play until just before `stop`.
    loop {
        let step = env.expert().unwrap();
        if step.action.starts_with("stop") {
            break;
        }
        env.step(&step.action);
    }
    let e = env.episode.as_mut().unwrap();
    assert!(state_accepted(&check, &e.site), "{name} seed {seed}: the planner's state passes");
    spoil(&mut e.site, &check);
    assert!(!state_accepted(&check, &e.site), "{name} seed {seed}: a near miss passed");
    let out = env.step("stop [done]");
    assert!(out.done && out.reward == 0.0);
}

#[test]
fn near_miss_states_are_rejected() {
    for seed in 0..10 {
        let off_by_one = |site: &mut Site, check: &Check| {
            let (Site::Shop(s), Check::CartQty { product, .. }) = (site, check) else { panic!() };
            s.cart.iter_mut().find(|l| l.product == *product).unwrap().qty += 1;
        };
        spoiled("shop_add_to_cart", seed, off_by_one);
        spoiled("shop_set_cart_qty", seed, off_by_one);
        spoiled("shop_add_to_cart", seed, |site, check| {
            // The wrong item: the product's line moved to another product.
            let (Site::Shop(s), Check::CartQty { product, .. }) = (site, check) else { panic!() };
            let other = (0..s.products.len() as u16).find(|p| s.cart_qty(*p as usize).is_none()).unwrap();
            s.cart.iter_mut().find(|l| l.product == *product).unwrap().product = other;
        });
        spoiled("shop_remove_from_cart", seed, |site, check| {
            // The wrong item removed too, or the item still there.
            let (Site::Shop(s), Check::CartWithout { product, rest }) = (site, check) else { panic!() };
            if rest.is_empty() {
                s.cart.push(Line { product: *product, qty: 1 });
            } else {
                s.cart.remove(0);
            }
        });
        spoiled("shop_buy_product", seed, |site, _| {
            let Site::Shop(s) = site else { panic!() };
            s.orders.last_mut().unwrap().lines[0].qty -= 1;
        });
        spoiled("shop_update_phone", seed, |site, _| {
            let Site::Shop(s) = site else { panic!() };
            s.account.phone.push('1');
        });
        spoiled("forum_upvote_post", seed, |site, check| {
            // Upvoted twice: the vote is taken back.
            let (Site::Forum(f), Check::PostVote { post, .. }) = (site, check) else { panic!() };
            f.posts[*post as usize].vote = 0;
        });
        spoiled("forum_downvote_comment", seed, |site, check| {
            let (Site::Forum(f), Check::CommentVote { post, comment, .. }) = (site, check) else { panic!() };
            f.posts[*post as usize].comments[*comment as usize].vote = 1;
        });
        spoiled("forum_comment", seed, |site, check| {
            // The comment in the wrong thread.
            let (Site::Forum(f), Check::Commented { post, .. }) = (site, check) else { panic!() };
            let moved = f.posts[*post as usize].comments.pop().unwrap();
            let other = (*post as usize + 1) % f.posts.len();
            f.posts[other].comments.push(moved);
        });
        spoiled("forum_comment", seed, |site, check| {
            let (Site::Forum(f), Check::Commented { post, .. }) = (site, check) else { panic!() };
            let c = f.posts[*post as usize].comments.last_mut().unwrap();
            c.text = data::Text::Own(format!("{}!", c.text().trim_end_matches('.')).into());
        });
        spoiled("forum_create_post", seed, |site, check| {
            let (Site::Forum(f), Check::Posted { forum, .. }) = (site, check) else { panic!() };
            let p = f.posts.last_mut().unwrap();
            p.forum = (*forum + 1) % f.forums.len() as u8;
        });
        spoiled("forum_edit_post", seed, |site, check| {
            // The edit made to the user's other post.
            let (Site::Forum(f), Check::Edited { post, .. }) = (site, check) else { panic!() };
            let other = (0..f.posts.len()).find(|&p| p != *post as usize && f.posts[p].author == f.me).unwrap();
            let (title, body) = (f.posts[*post as usize].title.clone(), f.posts[*post as usize].body.clone());
            f.posts[other].title = title;
            f.posts[other].body = body;
            let original = data::generate_forum(&mut Rng::derive(SITE_SEED ^ 1, seed)).posts[*post as usize].clone();
            f.posts[*post as usize] = original;
        });
        spoiled("forum_edit_post", seed, |site, check| {
            // The new text with a word left out.
            let (Site::Forum(f), Check::Edited { post, title, .. }) = (site, check) else { panic!() };
            let p = &mut f.posts[*post as usize];
            if p.title.as_ref() == title.as_str() {
                p.title = title.split_once(' ').unwrap().1.into();
            } else {
                p.body = p.body.split_once(' ').unwrap().1.into();
            }
        });
        spoiled("forum_subscription", seed, |site, check| {
            let (Site::Forum(f), Check::Subscribed { forum, .. }) = (site, check) else { panic!() };
            f.subscribed[*forum as usize] = !f.subscribed[*forum as usize];
        });
        code_near_miss_states(seed);
    }
}

fn code_near_miss_states(seed: u64) {
    fn parts(site: &mut Site) -> &mut data::CodeHost {
        match site {
            Site::Code(c) => c,
            _ => panic!("not a code-hosting task"),
        }
    }
    spoiled("code_close_issue", seed, |site, check| {
        // Another issue closed instead.
        let Check::IssueClosed { issue } = check else { panic!() };
        let c = parts(site);
        c.issues[*issue as usize].open = true;
        let other = (*issue as usize + 1) % c.issues.len();
        c.issues[other].open = false;
    });
    spoiled("code_comment_issue", seed, |site, check| {
        // The comment on the wrong issue.
        let Check::IssueCommented { issue, .. } = check else { panic!() };
        let c = parts(site);
        let note = c.issues[*issue as usize].notes.pop().unwrap();
        let other = (*issue as usize + 1) % c.issues.len();
        c.issues[other].notes.push(note);
    });
    spoiled("code_comment_issue", seed, |site, check| {
        // Someone else's comment with the text, or the text changed.
        let Check::IssueCommented { issue, .. } = check else { panic!() };
        let c = parts(site);
        let me = c.me;
        let note = c.issues[*issue as usize].notes.last_mut().unwrap();
        if seed.is_multiple_of(2) {
            note.author = me + 1;
        } else {
            note.text = data::Text::Own(format!("{} Thanks", note.text()).into());
        }
    });
    spoiled("code_add_label", seed, |site, check| {
        // A wrong label added as well, or instead of one that should be there.
        let Check::IssueLabels { issue, labels } = check else { panic!() };
        let c = parts(site);
        let extra = (0..data::LABELS.len()).find(|&l| labels & (1 << l) == 0).unwrap();
        let top = 15 - labels.leading_zeros();
        let issue = &mut c.issues[*issue as usize];
        issue.labels = if seed.is_multiple_of(2) { labels | 1 << extra } else { (labels & !(1 << top)) | 1 << extra };
    });
    spoiled("code_add_member", seed, |site, check| {
        // The right user with another role, or in another project.
        let Check::Member { project, user, role } = check else { panic!() };
        let c = parts(site);
        let m = c.members.iter_mut().find(|m| m.project == *project && m.user == *user).unwrap();
        if seed.is_multiple_of(2) {
            m.role = (*role + 1) % 4;
        } else {
            m.project = (*project + 1) % c.projects.len() as u8;
        }
    });
}

#[test]
fn code_forms_refuse_bad_input_with_feedback() {
    // On an issue page: an option that is not a label, a label it has, an empty comment.
    let mut env = session(task_of("code_add_label", 3));
    let Goal::State(Check::IssueLabels { issue, .. }) = episode(&env).task.goal.clone() else { panic!() };
    let e = episode(&env);
    let url = e.site.url(&Page::Code(code::CodePage::Issue(issue)));
    let Site::Code(c) = &e.site else { panic!() };
    let has = data::LABELS[(0..data::LABELS.len()).find(|&l| c.issues[issue as usize].labels & (1 << l) != 0).unwrap()];
    let project = c.issues[issue as usize].project as usize;
    let (outsider, insider) = (
        (0..c.users.len()).find(|&u| c.member(project, u).is_none()).map(|u| c.user_name(u)).unwrap(),
        c.user_name(c.projects[project].owner as usize),
    );
    let members_url = e.site.url(&Page::Code(code::CodePage::Members(project as u8)));
    env.step(&format!("goto [{url}]"));
    let id = |env: &WebNav, target: Target| episode(env).browser.tree.find(&target).unwrap() + 1;
    let label = id(&env, Target::Field(pages::Field::Label));
    env.step(&format!("type [{label}] [wontfix] [1]"));
    assert!(feedback(&env).unwrap().contains("'wontfix' is not an option of 'Label'"), "{:?}", feedback(&env));
    env.step(&format!("click [{}]", id(&env, Target::Op(pages::Op::AddLabel(issue)))));
    assert!(env.observation().contains("Choose a label first."));
    // The notice above the page moved the fields down a line.
    let label = id(&env, Target::Field(pages::Field::Label));
    env.step(&format!("type [{label}] [{}] [1]", has.to_uppercase()));
    assert!(env.observation().contains("already has the label"), "{}", env.observation());
    let comment = id(&env, Target::Field(pages::Field::Comment));
    env.step(&format!("type [{comment}] [   ] [1]"));
    assert!(env.observation().contains("The comment is empty."));
    // The invite form: unknown user, a member already, a role that is not offered.
    env.step(&format!("goto [{members_url}]"));
    let username = id(&env, Target::Field(pages::Field::Username));
    env.step(&format!("type [{username}] [nobody_here1] [1]"));
    assert!(env.observation().contains("There is no user named 'nobody_here1'."));
    let username = id(&env, Target::Field(pages::Field::Username));
    env.step(&format!("type [{username}] [{insider}] [1]"));
    assert!(env.observation().contains("is already a member"));
    let role = id(&env, Target::Field(pages::Field::Role));
    env.step(&format!("type [{role}] [Owner] [0]"));
    assert!(feedback(&env).unwrap().contains("not an option of 'Role'"));
    env.step(&format!("type [{role}] [reporter] [0]"));
    env.step(&format!("type [{username}] [@{outsider}] [1]"));
    assert!(env.observation().contains(&format!("{outsider} was added to the project as Reporter.")));
    // URLs that name nothing on the site.
    for url in [
        "http://code.test/nobody/nothing",
        &format!("{members_url}/extra"),
        &url.replace("/-/issues/", "/-/issues/9"),
        &format!("{}?label_name=wontfix", url.rsplit_once('/').unwrap().0),
        &format!("{}?label_name=%ZZ", url.rsplit_once('/').unwrap().0),
        &format!("{}?state=merged", url.rsplit_once('/').unwrap().0),
        "http://code.test/?sort=forks",
    ] {
        env.step(&format!("goto [{url}]"));
        assert!(feedback(&env).unwrap_or_default().contains("page not found"), "{url}: {:?}", feedback(&env));
    }
    env.step("goto [http://shop.test/]");
    assert!(feedback(&env).unwrap().contains("not part of this task"));
    assert!(!env.step("scroll [down]").done);
}

#[test]
fn only_own_posts_can_be_edited_and_an_edit_needs_a_title() {
    let mut env = session(task_of("forum_edit_post", 2));
    let Goal::State(Check::Edited { post, .. }) = episode(&env).task.goal.clone() else { panic!() };
    let e = episode(&env);
    let Site::Forum(f) = &e.site else { panic!() };
    let before = f.posts[post as usize].clone();
    let theirs = (0..f.posts.len()).find(|&p| f.posts[p].author != f.me).unwrap() as u16;
    let (mine_url, theirs_url) = (e.site.url(&Page::EditPost(post)), e.site.url(&Page::EditPost(theirs)));
    assert!(mine_url.ends_with("/edit") && e.site.parse_url(&mine_url) == Ok(Page::EditPost(post)));
    // Another user's post: no edit page, and its own page has no Edit link.
    env.step(&format!("goto [{theirs_url}]"));
    assert!(feedback(&env).unwrap().contains("only its author can edit"), "{:?}", feedback(&env));
    env.step(&format!("goto [{}]", theirs_url.trim_end_matches("/edit")));
    assert!(!env.observation().contains("link 'Edit'"));
    // The own post: an emptied title is refused and nothing changes; Cancel leaves it as it was.
    env.step(&format!("goto [{mine_url}]"));
    let id = |env: &WebNav, target: Target| episode(env).browser.tree.find(&target).unwrap() + 1;
    let title = id(&env, Target::Field(pages::Field::Title));
    env.step(&format!("type [{title}] [   ] [1]"));
    assert!(env.observation().contains("Title is required."), "{}", env.observation());
    let Site::Forum(f) = &episode(&env).site else { panic!() };
    assert_eq!(f.posts[post as usize], before);
    env.step(&format!("click [{}]", id(&env, Target::Go(Page::Post(post)))));
    assert_eq!(episode(&env).browser.tab().page(), &Page::Post(post));
    // Saving with one field typed keeps the other's text.
    env.step(&format!("goto [{mine_url}]"));
    let body = id(&env, Target::Field(pages::Field::Body));
    env.step(&format!("type [{body}] [A new body.] [0]"));
    env.step(&format!("click [{}]", id(&env, Target::Op(pages::Op::EditPost(post)))));
    assert!(env.observation().contains("Your submission was updated."));
    let Site::Forum(f) = &episode(&env).site else { panic!() };
    assert_eq!((&*f.posts[post as usize].title, &*f.posts[post as usize].body), (&*before.title, "A new body."));
}

#[test]
fn code_urls_round_trip() {
    for seed in 0..5 {
        let env = session(task_of("code_project_stars", seed));
        let site = &episode(&env).site;
        let Site::Code(c) = site else { panic!() };
        let mut pages =
            vec![code::CodePage::Home(code::ProjectSort::Name), code::CodePage::Home(code::ProjectSort::Stars)];
        for p in 0..c.projects.len() as u8 {
            pages.push(code::CodePage::Project(p));
            pages.push(code::CodePage::Members(p));
            for state in code::IssueState::ALL {
                for label in [None, Some(7), Some(0)] {
                    pages.push(code::CodePage::Issues { project: p, state, label, page: 2 });
                }
            }
            for state in code::MrFilter::ALL {
                pages.push(code::CodePage::MergeRequests { project: p, state });
            }
        }
        pages.extend((0..c.issues.len() as u16).map(code::CodePage::Issue));
        pages.extend((0..c.mrs.len() as u16).map(code::CodePage::MergeRequest));
        pages.extend((0..c.users.len() as u16).map(code::CodePage::User));
        for page in pages {
            let page = Page::Code(page);
            let url = site.url(&page);
            assert_eq!(site.parse_url(&url), Ok(page.clone()), "{url}");
        }
    }
}

#[test]
fn stopping_on_the_wrong_page_fails_a_navigation_task() {
    let mut env = session(task_of("shop_category_by_price", 2));
    // The category, but in its default order.
    let step = env.expert().unwrap();
    env.step(&step.action);
    assert!(episode(&env).browser.tab().page().clone() != Page::ShopHome);
    let out = env.step("stop [N/A]");
    assert!(out.done && out.reward == 0.0);
}

#[test]
fn bad_input_gets_feedback_and_the_episode_goes_on() {
    let cases: &[(&str, &str)] = &[
        ("", "is not valid"),
        ("click [9999]", "no element [9999]"),
        ("click [abc]", "not an element id"),
        ("type [2] [hello]", "cannot be typed into"),
        ("press [Hyper+x]", "not a key combination"),
        ("goto [http://evil.example/]", "outside the websites"),
        ("goto [http://forum.test/]", "not part of this task"),
        ("goto [http://shop.test/product/1]", "page not found"),
        ("tab_focus [3]", "no tab 3"),
        ("close_tab", "cannot be closed"),
        ("go_back", "no previous page"),
        ("go_forward", "no next page"),
        ("scroll [sideways]", "scroll takes"),
        ("fly [1]", "is not valid"),
        ("stop [aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]", "too long"),
    ];
    let mut env = session_with(0, &[("viewport", "10")]);
    for (action, want) in cases {
        let out = env.step(action);
        assert!(!out.done, "{action:?}");
        let fb = feedback(&env).unwrap_or_default();
        assert!(fb.contains(want), "{action:?}: {fb}");
        assert!(out.observation.contains(&format!("FEEDBACK: {fb}")));
    }
    // A field in view takes text; a node below the view does not.
    let obs = env.observation();
    assert!(obs.contains("(content below"), "{obs}");
    let last = episode(&env).browser.tree.nodes.len();
    env.step(&format!("click [{last}]"));
    assert!(feedback(&env).unwrap().contains("not in the current view"));
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng::new(5);
    let pieces = [
        "click",
        "type",
        "[",
        "]",
        "1",
        "12",
        "99999999999",
        "scroll",
        "[down]",
        "stop",
        "goto",
        "http://shop.test/",
        "press",
        "[Enter]",
        "new_tab",
        "close_tab",
        "tab_focus",
        "go_back",
        "\n",
        "é",
        "[0]",
        "[1]",
        " ",
        "hover",
        "http://shop.test/search?q=%ZZ",
        "http://shop.test/category/x?page=0",
        "http://code.test/",
        "http://code.test/a/b/-/issues?label_name=%ZZ&page=0",
        "/-/merge_requests/",
        "[Maintainer]",
        "[bug]",
        "%",
        "]]",
        "[[",
    ];
    for task_id in 0..3 * T {
        let mut env = session(task_id);
        for _ in 0..30 {
            let n = rng.int(1, 6);
            let action: String =
                (0..n).map(|_| *rng.choice(&pieces)).collect::<Vec<_>>().join(if rng.bool() { " " } else { "" });
            if action.starts_with("stop") {
                continue;
            }
            let out = env.step(&action);
            assert!(out.observation.contains("OBJECTIVE:"));
        }
    }
}

#[test]
fn every_id_in_view_is_actionable() {
    let mut rng = Rng::new(9);
    for task_id in 0..3 * T {
        let mut env = session(task_id);
        for _ in 0..12 {
            let obs = env.observation();
            let ids: Vec<u32> =
                obs.lines().filter_map(|l| l.trim_start().strip_prefix('[')?.split_once(']')?.0.parse().ok()).collect();
            assert!(!ids.is_empty());
            for &id in &ids {
                let mut probe = WebNav {
                    settings: env.settings.clone(),
                    cache: env.cache.clone(),
                    episode: env.episode.clone(),
                    observation: String::new(),
                };
                let line = obs.lines().find(|l| l.trim_start().starts_with(&format!("[{id}] "))).unwrap();
                let editable = [" textbox '", " searchbox '", " combobox '"].iter().any(|r| line.contains(r));
                let action = if editable && line.contains("combobox") {
                    // An option of each combobox: Sort By, a code host's Role and Label.
                    let option = [("'Sort By'", "Price"), ("'Role'", "Developer"), ("'Label'", "bug")]
                        .iter()
                        .find(|(name, _)| line.contains(name))
                        .map(|(_, option)| *option)
                        .unwrap_or("Price");
                    format!("type [{id}] [{option}] [0]")
                } else if editable {
                    format!("type [{id}] [2] [0]")
                } else {
                    format!("click [{id}]")
                };
                probe.step(&action);
                assert_eq!(feedback(&probe), None, "task {task_id}: {action} on {line}");
            }
            // Move on: a random valid action.
            let menu = env.available_actions().unwrap();
            let action = rng.choice(&menu).clone();
            env.step(&action);
        }
    }
}

#[test]
fn scrolling_moves_the_view_and_says_so() {
    let mut env = session_with(task_of("shop_review_stars", 1), &[("viewport", "10")]);
    let top = env.observation();
    let out = env.step("scroll [down]");
    assert_ne!(top, out.observation);
    assert!(out.observation.contains("(content above"));
    let out = env.step("scroll [up]");
    assert_eq!(out.observation.replace("scroll [up]", ""), top.replace("None", ""));
}

#[test]
fn tabs_open_focus_and_close() {
    let mut env = session(0);
    let out = env.step("new_tab");
    assert!(out.observation.contains("Tab 0: ") && out.observation.contains("Tab 1 (current): New Tab"));
    assert!(out.observation.contains("URL: about:blank"));
    env.step("goto [http://shop.test/cart]");
    assert!(env.observation().contains("Tab 1 (current): Shopping Cart"));
    env.step("tab_focus [0]");
    assert!(env.observation().contains("Tab 0 (current): "));
    env.step("close_tab");
    assert!(!env.observation().contains("Tab 1"));
    assert!(env.observation().contains("Tab 0 (current): Shopping Cart"));
}

#[test]
fn tabs_are_capped() {
    let mut env = session(0);
    for _ in 1..super::browser::MAX_TABS {
        env.step("new_tab");
    }
    let out = env.step("new_tab");
    assert!(out.observation.contains("close one first"), "{}", out.observation);
    let last = super::browser::MAX_TABS - 1;
    assert!(out.observation.contains(&format!("Tab {last} (current)")), "{}", out.observation);
    assert!(!out.observation.contains(&format!("Tab {} ", last + 1)));
    env.step("close_tab");
    assert!(!env.step("new_tab").observation.contains("close one first"));
}

#[test]
fn options_are_checked() {
    let bad = |pairs: &[(&str, &str)]| {
        let options: Options = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        WebNavFactory::new(&options).err().unwrap().to_string()
    };
    assert!(bad(&[("colour", "red")]).contains("colour"));
    assert!(bad(&[("viewport", "2")]).contains("viewport"));
    assert!(bad(&[("show_urls", "maybe")]).contains("show_urls"));
    let f = factory(&[("num_seeds", "3"), ("viewport", "12"), ("show_urls", "true")]);
    assert_eq!(f.num_tasks(), 138);
    let mut env = f.make();
    assert!(env.reset(138).is_err());
    let obs = env.reset(0).unwrap();
    assert!(obs.contains(" url: http://shop.test/cart"), "{obs}");
    let shown = obs.lines().filter(|l| l.trim_start().starts_with('[')).count();
    assert_eq!(shown, 13, "the root and 12 lines");
}

#[test]
fn max_steps_ends_an_episode() {
    let mut env = factory(&[("max_steps", "2")]).make();
    env.reset(5).unwrap();
    assert!(!env.step("scroll [down]").done);
    let out = env.step("scroll [down]");
    assert!(out.done && out.reward == 0.0 && out.observation.contains("step limit (2)"));
}

/// Observations of every page type, kept as files.
#[test]
fn golden_pages() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webnav_golden");
    let shop_pages: &[(&str, &[&str])] = &[
        ("shop_home", &[]),
        ("shop_category", &["goto [http://shop.test/category/garden?sort=price]"]),
        ("shop_search", &["type [6] [pro] [1]"]),
        ("shop_product", &["click [16]"]),
        ("shop_cart", &["click [5]"]),
        ("shop_checkout", &["goto [http://shop.test/checkout]"]),
        ("shop_orders", &["click [4]"]),
        ("shop_account", &["click [3]", "type [17] [555-0000] [0]"]),
        ("shop_errors", &["type [6] [ ] [1]", "click [999]"]),
        ("blank_tab", &["new_tab"]),
    ];
    let forum_pages: &[(&str, &[&str])] = &[
        ("forum_home", &[]),
        ("forum_listing", &["click [5]", "click [14]"]),
        ("forum_post", &["click [15]"]),
        ("forum_user", &["click [15]", "click [11]"]),
        ("forum_submit", &["click [5]", "click [11]"]),
        ("forum_own_post", &["click [5]", "click [14]", "@Best pressure cooker"]),
        (
            "forum_edit",
            &[
                "click [5]",
                "click [14]",
                "@Best pressure cooker",
                "@Edit",
                "type [11] [Best pressure cooker for two?] [0]",
            ],
        ),
    ];
    // `@text`: click the first link whose name contains `text`.
    let code_pages: &[(&str, &[&str])] = &[
        ("code_home", &[]),
        ("code_home_stars", &["@Most stars"]),
        ("code_project", &["@/"]),
        ("code_issues", &["@/", "@Issues", "@Closed ("]),
        ("code_issues_label", &["@/", "@Issues", "@bug"]),
        ("code_issues_page2", &["@velvet-vault", "@Issues", "@All (", "@Next"]),
        (
            "code_issue",
            &["@/", "@Issues", "@Closed (", "click [21]", "type [15] [Question] [0]", "type [25] [On it.] [0]"],
        ),
        ("code_mrs", &["@/", "@Merge requests", "@All ("]),
        ("code_mr", &["@/", "@Merge requests", "@All (", "click [14]"]),
        ("code_members", &["@/", "@Members", "type [19] [someone] [0]"]),
        ("code_user", &["@/", "@Members", "click [12]"]),
        ("code_errors", &["@/", "@Members", "click [22]", "type [20] [nobody] [0]", "type [22] [Owner] [1]"]),
    ];
    let bless = std::env::var_os("WEBNAV_BLESS").is_some();
    let mut failures = Vec::new();
    for (task_id, pages) in [(0u64, shop_pages), (17, forum_pages), (30, code_pages)] {
        for (name, actions) in pages {
            let mut env = session(task_id);
            for action in *actions {
                match action.strip_prefix('@') {
                    Some(text) => {
                        let tree = &episode(&env).browser.tree;
                        let link = |i: &usize| tree.nodes[*i].role == tree::Role::Link && tree.name(*i).contains(text);
                        let i = (0..tree.nodes.len()).find(link).unwrap_or_else(|| panic!("{name}: no link {text}"));
                        env.step(&format!("click [{}]", i + 1));
                    }
                    None => _ = env.step(action),
                }
            }
            let mut text = env.observation();
            if *name == "shop_orders" {
                // The orders page with one order opened, too.
                let id = episode(&env).browser.tree.find_text("View Order").unwrap() + 1;
                env.step(&format!("click [{id}]"));
                text = format!("{text}\n\n---\n\n{}", env.observation());
            }
            let path = dir.join(format!("{name}.txt"));
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &text).unwrap();
            } else {
                let want = std::fs::read_to_string(&path).unwrap_or_default();
                if want != text {
                    failures.push(format!("{name}: differs from {} (WEBNAV_BLESS=1 rewrites)\n{text}", path.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_site_cache_hands_out_copies() {
    let f = factory(&[]);
    let mut a = f.session();
    a.reset(task_of("shop_add_to_cart", 4)).unwrap();
    let fresh = data::generate_shop(&mut Rng::derive(SITE_SEED, 4));
    assert_eq!(episode(&a).site, Site::Shop(fresh.clone()), "a cached site is the generated one");
    solve(&mut a);
    let mut b = f.session();
    b.reset(task_of("shop_add_to_cart", 4)).unwrap();
    assert_eq!(episode(&b).site, Site::Shop(fresh), "one session's changes stay in that session");
}

fn previous_action(env: &WebNav) -> String {
    let obs = env.observation();
    let line = obs.lines().find(|l| l.starts_with("PREVIOUS ACTION: ")).expect("a PREVIOUS ACTION line");
    line["PREVIOUS ACTION: ".len()..].to_string()
}

#[test]
fn previous_action_is_webarenas_description() {
    let mut env = session(0);
    assert_eq!(previous_action(&env), "None");
    let search = episode(&env).browser.tree.find(&Target::Field(pages::Field::Search)).unwrap() + 1;
    let searchbox = "searchbox 'Search entire store here...' required: False";
    env.step(&format!("type [{search}] [kid's  toy] [0]"));
    assert_eq!(previous_action(&env), format!("type [{search}] [kid's  toy] where [{search}] is {searchbox}"));
    // The typed text is a name with a `'`, quoted as Python's repr() quotes it.
    assert!(env.observation().contains("StaticText \"kid's  toy\""), "{}", env.observation());
    // The field is focused now; with Enter, WebArena's description ends the text with a space.
    env.step(&format!("type [{search}] [lamp]"));
    let focused = "searchbox 'Search entire store here...' focused: True required: False";
    assert_eq!(previous_action(&env), format!("type [{search}] [lamp ] where [{search}] is {focused}"));
    env.step("go_back");
    let cases = [
        ("click [9999]", "Attempt to perfom \"click\" on element \"[9999]\" but no matching element found. Please check the observation more carefully.".to_string()),
        ("hover [1] now", "hover [1] where [1] is RootWebArea 'Cornerstone Market' focused: True".to_string()),
        ("scroll down", "scroll [down]".to_string()),
        ("press [enter]", "press [Enter]".to_string()),
        ("press [Ctrl+v]", "press [Ctrl+v]".to_string()),
        ("new_tab [1]", "new_tab".to_string()),
        ("tab_focus [0]", "tab_focus [0]".to_string()),
        ("goto [http://shop.test/]", "goto [http://shop.test/]".to_string()),
        (
            "fly [1]\nnow",
            "The previous prediction you issued was \"fly [1] now\". However, the format was incorrect. Ensure that \
             the action is wrapped inside a pair of ``` and enclose arguments within [] as follows: ```action [arg] ...```."
                .to_string(),
        ),
    ];
    for (action, want) in cases {
        env.step(action);
        assert_eq!(previous_action(&env), want, "{action:?}");
    }
}

#[test]
fn answers_are_judged_as_strictly_as_webarenas_exact_match() {
    let rule = tasks::AnswerRule::Exact(vec!["$200.95".into()]);
    for ok in ["$200.95", " $200.95\n", "'$200.95'", "\"$200.95\"", "\"'$200.95'\""] {
        assert!(answer_accepted(&rule, ok), "{ok:?}");
    }
    for bad in ["200.95", "$200.95.", "$ 200.95", "`$200.95`", "'$200.95\"", "$200.950"] {
        assert!(!answer_accepted(&rule, bad), "{bad:?}");
    }
    let names = tasks::AnswerRule::MustInclude(vec!["Blue Lamp".into(), "Red Chair".into()]);
    assert!(answer_accepted(&names, "the red chair and the BLUE LAMP"));
    assert!(!answer_accepted(&names, "the red chair and the blue  lamp"));
}
