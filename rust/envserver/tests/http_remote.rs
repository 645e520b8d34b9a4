//! The HTTP server and the remote pool together, without Python: a RemotePool over
//! agentgym-envservers plays the same episodes as a local EnvPool.

use agentgym_envserver::remote::{RemoteConfig, RemotePool};
use agentgym_envserver::server::{Server, ServerConfig};
use agentgym_envserver::{EnvPool, Options};

fn babyai_server() -> Server {
    let config =
        ServerConfig { env: "babyai".into(), port: 0, workers: Some(1), env_threads: Some(1), ..Default::default() };
    Server::start(config).expect("server starts")
}

fn url(server: &Server) -> String {
    format!("http://{}", server.addr())
}

fn remote(urls: Vec<String>, batch: bool) -> RemotePool {
    let mut config = RemoteConfig::new(urls, "babyai");
    config.batch = Some(batch);
    RemotePool::new(config).expect("remote pool")
}

#[test]
fn remote_sessions_play_like_local_ones() {
    let servers = [babyai_server(), babyai_server()];
    let local = EnvPool::new("babyai", &Options::new(), Some(1)).unwrap();
    for batch in [true, false] {
        let pool = remote(servers.iter().map(url).collect(), batch);
        assert_eq!(pool.num_tasks().unwrap(), local.num_tasks());
        let ids = pool.create(6).unwrap();
        let lids = local.create(6).unwrap();
        assert_eq!(servers.iter().map(|s| s.state().pool.len()).collect::<Vec<_>>(), [3, 3]);
        let tasks: Vec<i64> = (40..46).collect();
        assert_eq!(pool.reset(&ids, &tasks).unwrap(), local.reset(&lids, &tasks).unwrap());
        for action in ["turn left", "move forward", "go to goal", "turn right", "move forward"] {
            let actions: Vec<Result<String, String>> = vec![Ok(action.to_string()); 6];
            let got = pool.step(&ids, &actions).unwrap();
            let want = local.step(&lids, &[action; 6]).unwrap();
            assert_eq!(got, want, "batch={batch} action={action}");
        }
        assert_eq!(pool.close(&ids).unwrap(), 6);
        local.close(&lids).unwrap();
        assert_eq!(servers.iter().map(|s| s.state().pool.len()).sum::<usize>(), 0);
    }
}

#[test]
fn a_stopped_server_fails_only_its_own_sessions() {
    let alive = babyai_server();
    let doomed = babyai_server();
    let doomed_url = url(&doomed);
    let pool = remote(vec![url(&alive), doomed_url.clone()], true);
    let ids = pool.create(4).unwrap();
    pool.reset(&ids, &[0, 1, 2, 3]).unwrap();
    doomed.stop();
    let actions: Vec<Result<String, String>> = vec![Ok("turn left".into()); 4];
    let results = pool.step(&ids, &actions).unwrap();
    let infos = pool.info(&ids).unwrap();
    for (r, info) in results.iter().zip(&infos) {
        if info["server"] == doomed_url.as_str() {
            let error = r.error.as_deref().expect("the stopped server's sessions fail");
            assert!(error.contains(&doomed_url), "{error}");
            assert_eq!(info["phase"], "failed");
        } else {
            assert_eq!(r.error, None);
        }
    }
    // New sessions avoid the dead server.
    let more = pool.create(2).unwrap();
    for info in pool.info(&more).unwrap() {
        assert_eq!(info["server"], url(&alive).as_str());
    }
}

#[test]
fn a_reply_past_the_cap_fails_its_sessions_instead_of_being_buffered() {
    let server = babyai_server();
    let mut config = RemoteConfig::new(vec![url(&server)], "babyai");
    config.batch = Some(true);
    config.client.max_reply_bytes = 200; // a reset reply holds ~300-byte observations
    let pool = RemotePool::new(config).expect("remote pool");
    let ids = pool.create(2).unwrap();
    let results = pool.reset(&ids, &[0, 1]).unwrap();
    for r in &results {
        let error = r.as_ref().expect_err("the reply is over the cap");
        assert!(error.contains("200-byte cap"), "{error}");
    }
}
