//! The etcd cluster: one member per host namespace, its data on the host's
//! pausable disk, killed and started again by the observer.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use tend::etcd::etcd_client;
use tend::testing::etcd::connect;
use tokio::time::Instant;

use crate::netns::Host;

/// Client port, the same in every namespace.
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;

/// One member of the cluster.
pub(crate) struct Member {
    pub(crate) host: Host,
    data: PathBuf,
    log: PathBuf,
    cluster: String,
    child: Option<Child>,
}

impl Member {
    /// The members of `hosts`, their data under `disks/{host}` (not yet
    /// started).
    pub(crate) fn all(hosts: &[Host], disks: &Path, logs: &Path) -> Vec<Self> {
        let cluster = hosts
            .iter()
            .map(|h| format!("{}=http://{}:{PEER_PORT}", h.name, h.address))
            .collect::<Vec<_>>()
            .join(",");
        hosts
            .iter()
            .map(|host| Self {
                host: host.clone(),
                data: disks.join(&host.name).join("etcd"),
                log: logs.join(format!("etcd-{}.log", host.name)),
                cluster: cluster.clone(),
                child: None,
            })
            .collect()
    }

    /// Its client endpoint on the bridge.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}:{CLIENT_PORT}", self.host.address)
    }

    fn args(&self) -> Vec<String> {
        let (name, address) = (&self.host.name, self.host.address);
        let peer = format!("http://{address}:{PEER_PORT}");
        vec![
            format!("--name={name}"),
            format!("--data-dir={}", self.data.display()),
            "--initial-cluster-token=tend-netns".to_owned(),
            format!("--initial-cluster={}", self.cluster),
            "--initial-cluster-state=new".to_owned(),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            // The replica of its host reaches it on loopback.
            format!(
                "--listen-client-urls={},http://127.0.0.1:{CLIENT_PORT}",
                self.endpoint()
            ),
            format!("--advertise-client-urls={}", self.endpoint()),
            // `connect` pings every second; etcd's default minimum is 5 s.
            "--grpc-keepalive-min-time=500ms".to_owned(),
            "--experimental-watch-progress-notify-interval=500ms".to_owned(),
            // etcd 3.5's default: a member cut off does not disrupt the
            // cluster with its higher term when it comes back.
            "--pre-vote=true".to_owned(),
            "--log-level=warn".to_owned(),
        ]
    }

    /// Starts it (again, on the same data after a kill).
    pub(crate) fn start(&mut self) {
        assert!(self.child.is_none(), "{} runs already", self.host.name);
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the member's log");
        let child = self
            .host
            .command("etcd")
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts (is etcd-server installed?)");
        self.child = Some(child);
    }

    /// SIGKILL, as a crash; returns when it is gone.
    pub(crate) fn kill(&mut self) {
        let mut child = self.child.take().expect("the member runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// A client of `endpoint`, once the cluster answers a linearizable read
/// through it (bounded).
pub(crate) async fn ready(endpoint: &str) -> etcd_client::Client {
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    loop {
        let attempt = async {
            let mut client = connect(endpoint).await.ok()?;
            client.get("/", None).await.ok()?;
            Some(client)
        };
        if let Ok(Some(client)) = tokio::time::timeout(Duration::from_secs(3), attempt).await {
            return client;
        }
        assert!(
            started.elapsed() < limit,
            "the etcd cluster did not answer through {endpoint} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The member ids by host name, and the current leader's host name; `None`
/// while the cluster elects (or does not answer).
async fn leader(kv: &mut etcd_client::Client) -> Option<(Vec<(String, u64)>, String)> {
    let members = kv.member_list().await.ok()?;
    let ids: Vec<(String, u64)> = members
        .members()
        .iter()
        .map(|m| (m.name().to_owned(), m.id()))
        .collect();
    let leader = kv.status().await.ok()?.leader();
    let name = ids.iter().find(|(_, id)| *id == leader)?.0.clone();
    Some((ids, name))
}

/// The host whose member leads, as `kv`'s member sees it; `None` while the
/// cluster elects or does not answer within a second.
pub(crate) async fn leading(kv: &mut etcd_client::Client) -> Option<String> {
    let seen = tokio::time::timeout(Duration::from_secs(1), leader(kv)).await;
    seen.ok().flatten().map(|(_, name)| name)
}

/// Waits (bounded) until a member other than `deposed`'s leads; returns
/// when it was seen.
pub(crate) async fn elected_besides(kv: &mut etcd_client::Client, deposed: &str) -> Instant {
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    loop {
        if leading(kv).await.is_some_and(|name| name != deposed) {
            return Instant::now();
        }
        assert!(
            started.elapsed() < limit,
            "no member besides {deposed}'s was elected within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Makes `target` the leader (asked of the current leader, which `kv`
/// must reach), bounded.
pub(crate) async fn lead(kv: &mut etcd_client::Client, target: &str, through: &[Member]) {
    let limit = Duration::from_secs(20);
    let started = Instant::now();
    loop {
        if let Some((ids, current)) = leader(kv).await {
            if current == target {
                return;
            }
            let id = ids
                .iter()
                .find(|(name, _)| name == target)
                .expect("a member")
                .1;
            let at = through.iter().find(|m| m.host.name == current);
            let at = at.expect("the leader's member");
            if let Ok(mut to_leader) = connect(&at.endpoint()).await {
                let _ = to_leader.move_leader(id).await;
            }
        }
        assert!(
            started.elapsed() < limit,
            "{target} did not become the leader within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
