//! Replicas as processes: SIGKILL and SIGSTOP.

use super::*;

/// Replica processes, killed on drop (also when the test panics), and the
/// lines they print.
struct Replicas {
    children: Vec<Child>,
    lines: mpsc::Receiver<String>,
}

impl Replicas {
    /// One replica per entry of `servers`, each sent to its server (or to
    /// the API server when `None`).
    fn spawn(namespace: &str, kubeconfig: &std::path::Path, servers: &[Option<&str>]) -> Self {
        let (tx, lines) = mpsc::channel();
        let children = servers
            .iter()
            .map(|server| {
                let mut command = Command::new(std::env::current_exe().unwrap());
                command
                    .args(["replica_process", "--exact", "--ignored", "--nocapture"])
                    .env("TEND_TEST_KUBECONFIG", kubeconfig)
                    .env("TEND_TEST_NAMESPACE", namespace);
                if let Some(server) = server {
                    command.env("TEND_TEST_SERVER", server);
                }
                let mut child = command
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let stdout = child.stdout.take().unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        let ours = ["LEADER ", "FENCED ", "LOST "]
                            .iter()
                            .any(|p| line.starts_with(p));
                        if ours && tx.send(line).is_err() {
                            break;
                        }
                    }
                });
                child
            })
            .collect();
        Self { children, lines }
    }

    /// The next line starting with `word`, as `(pid, rest)`, within `limit`
    /// (other lines are skipped).
    fn next(&self, word: &str, limit: Duration) -> (u32, Option<u64>) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `{word}` line within {limit:?}"));
            let mut parts = line.split_whitespace();
            if parts.next() != Some(word) {
                continue;
            }
            let pid = parts.next().unwrap().parse().unwrap();
            return (pid, parts.next().map(|token| token.parse().unwrap()));
        }
    }

    fn signal(pid: u32, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("the kill command");
        assert!(status.success(), "kill {signal} {pid}");
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_processes_fail_over_within_the_lease_duration_and_a_second_after_sigkill() {
    let (_, namespace) = setup("sigkill").await;
    let kubeconfig = plane().await.kubeconfig_path();
    let mut replicas = Replicas::spawn(&namespace, kubeconfig, &[None, None, None]);
    tokio::task::block_in_place(|| {
        let (pid, token) = replicas.next("LEADER", LIMIT);
        let index = replicas
            .children
            .iter()
            .position(|c| c.id() == pid)
            .unwrap();
        std::thread::sleep(Duration::from_millis(800));
        let mut leader = replicas.children.remove(index);
        leader.kill().unwrap(); // SIGKILL: no resign, no clean-up
        leader.wait().unwrap();
        let killed = std::time::Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next, next_token) = replicas.next("LEADER", bound);
        eprintln!("SIGKILL to new leader: {:?}", killed.elapsed());
        assert_ne!(next, pid);
        assert!(next_token > token);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_leader_is_deposed_and_fenced_by_its_own_clock_when_it_resumes() {
    let (client, namespace) = setup("sigstop").await;
    // Each replica reaches the API server through a proxy of its own, so
    // that the stopped one can resume cut off: then nothing but its own
    // clock can tell it that it lost.
    let (proxies, urls): (Vec<_>, Vec<_>) = vec![proxy().await, proxy().await].into_iter().unzip();
    let servers: Vec<_> = urls.iter().map(|url| Some(url.as_str())).collect();
    let replicas = Replicas::spawn(&namespace, plane().await.kubeconfig_path(), &servers);
    let next = tokio::task::block_in_place(|| {
        let (paused, token) = replicas.next("LEADER", LIMIT);
        std::thread::sleep(Duration::from_millis(800));
        Replicas::signal(paused, "-STOP");
        let stopped = std::time::Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next, next_token) = replicas.next("LEADER", bound);
        eprintln!("SIGSTOP to new leader: {:?}", stopped.elapsed());
        assert_ne!(next, paused);
        assert!(next_token > token);

        // Resumed past its local deadline, cut off: its next write is
        // refused and `lost()` resolves, with no request answered.
        let index = replicas
            .children
            .iter()
            .position(|c| c.id() == paused)
            .unwrap();
        proxies[index].blackhole(true);
        let resumed = std::time::Instant::now();
        Replicas::signal(paused, "-CONT");
        assert_eq!(replicas.next("FENCED", Duration::from_secs(1)).0, paused);
        assert_eq!(replicas.next("LOST", Duration::from_secs(1)).0, paused);
        eprintln!("SIGCONT to fenced and lost: {:?}", resumed.elapsed());
        next
    });
    let holder = lease(&client, &namespace)
        .await
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(
        holder,
        Some(format!("pid-{next}")),
        "the new leader holds the Lease"
    );
}
