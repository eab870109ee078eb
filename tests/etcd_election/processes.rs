//! Replicas as processes, killed.

use super::*;

fn spawn_replica(endpoint: &str, lines: &mpsc::Sender<String>) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["replica_process", "--exact", "--ignored", "--nocapture"])
        .env("TEND_TEST_REPLICA_ENDPOINT", endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("LEADER ") && lines.send(line).is_err() {
                break;
            }
        }
    });
    child
}

/// Kills its children on drop, even when the test panics.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_as_processes_fail_over_after_sigkill() {
    let etcd = server().await;
    let (tx, rx) = mpsc::channel();
    let mut children = Children(
        (0..3)
            .map(|_| spawn_replica(&etcd.endpoint(), &tx))
            .collect(),
    );
    let next_leader = |limit: Duration| -> (u32, u64) {
        let line = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no replica led within {limit:?}"));
        let mut parts = line.split_whitespace().skip(1);
        let pid = parts.next().unwrap().parse().unwrap();
        let token = parts.next().unwrap().parse().unwrap();
        (pid, token)
    };
    let (mut pid, mut token) = tokio::task::block_in_place(|| next_leader(LIMIT));
    for round in 0..2 {
        let index = children.0.iter().position(|c| c.id() == pid).unwrap();
        let mut leader = children.0.remove(index);
        leader.kill().unwrap(); // SIGKILL: no resign, no cleanup
        leader.wait().unwrap();
        let killed = Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next_pid, next_token) = tokio::task::block_in_place(|| next_leader(bound));
        eprintln!("round {round}: process failover in {:?}", killed.elapsed());
        assert_ne!(next_pid, pid);
        assert!(next_token > token);
        (pid, token) = (next_pid, next_token);
    }
}
