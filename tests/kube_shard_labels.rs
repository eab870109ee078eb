//! Shard labels on a real API server: `ShardLabel::label_missing` labels
//! every object with its shard, and sharded replicas whose `KubeSource`
//! selects by that label are sent only their own shards' objects and
//! follow a handover (that a shard is gained only once filled is checked
//! in `tests/placement/scoped_caches.rs`).

#[path = "support/kube.rs"]
mod kube_support;
#[path = "support/looks.rs"]
mod looks;
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube_support::{config_map, fresh};
use looks::{Looker, Looks, every_reconcile_saw_its_object};
use support::{wait_until, within};
use tend::controller::{Controller, Environment};
use tend::kube::{KubeSource, ShardLabel};
use tend::memory::MemoryMembershipGroup;
use tend::placement::Sharding;
use tend::shard::ShardCount;
use tend::{CancellationToken, Informer, Object, ObjectKey};
use tokio::task::JoinSet;

const LIMIT: Duration = Duration::from_secs(60);
const LABEL: &str = "tend.dev/shard";

fn label(shards: ShardCount) -> ShardLabel {
    ShardLabel::new(LABEL, shards).expect("a label key")
}

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i:03}")).collect()
}

/// Creates one ConfigMap per name, without the label.
async fn create(client: &kube::Client, ns: &str, names: &[String]) {
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), ns).client();
    for name in names {
        maps.create(config_map(ns, name, &[("k", "v")]))
            .await
            .expect("created");
    }
}

/// Runs the labeller over metadata only, until `stop`.
fn labeller(
    client: &kube::Client,
    ns: &str,
    label: ShardLabel,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let source = KubeSource::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), ns);
    let stop = stop.clone();
    tokio::spawn(async move { label.label_missing(source, stop).await })
}

/// Every ConfigMap of `ns` by name, with its label's value.
async fn labels(client: &kube::Client, ns: &str) -> Vec<(String, Option<String>)> {
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), ns).client();
    let listed = maps.list().await.expect("listed");
    listed
        .objects
        .iter()
        .map(|map| {
            let value = map.labels().and_then(|labels| labels.get(LABEL)).cloned();
            (map.key().name, value)
        })
        .collect()
}

#[tokio::test]
async fn the_labeller_labels_every_object_with_its_shard_as_it_appears() {
    let (client, ns) = fresh("shard-labels").await;
    let shards = ShardCount::new(8).expect("valid");
    let label = label(shards);
    create(&client, &ns, &names("before", 20)).await;
    let stop = CancellationToken::new();
    let labelling = labeller(&client, &ns, label.clone(), &stop);
    create(&client, &ns, &names("after", 10)).await;
    let expected = |name: &str| label.value_of(&ObjectKey::new(ns.as_str(), name));
    let mut done = false;
    for _ in 0..600 {
        let all = labels(&client, &ns).await;
        done = all.len() == 30
            && all
                .iter()
                .all(|(name, value)| value.as_deref() == Some(expected(name).as_str()));
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        done,
        "every object labelled with its shard: {:?}",
        labels(&client, &ns).await
    );
    stop.cancel();
    within("the labeller to stop", LIMIT, labelling)
        .await
        .expect("not panicked");
}

/// One replica: an informer selecting its shards by label, its sharding
/// and its sharded controller.
struct Replica {
    informer: Informer<ConfigMap>,
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Replica {
    fn start(
        name: &'static str,
        client: &kube::Client,
        ns: &str,
        group: &MemoryMembershipGroup,
        looks: &Looks,
    ) -> Self {
        let sharding = Sharding::new(group.member(name), group.shard_count())
            .handover_timeout(Duration::from_secs(1));
        let scope = sharding.cache_scope();
        let source = KubeSource::<ConfigMap>::namespaced(client.clone(), ns)
            .shard_label(&label(group.shard_count()), &scope)
            .expect("the same shard count");
        let informer = Informer::builder(source)
            .scope(scope)
            .build()
            .expect("valid");
        let looker = Looker {
            replica: name,
            looks: looks.clone(),
        };
        let controller = Controller::builder(name, &informer, looker)
            .build()
            .expect("valid");
        let stop = CancellationToken::new();
        let env = Environment::new(stop.clone()).ownership(sharding.ownership());
        let mut tasks = JoinSet::new();
        let (running, halt) = (informer.clone(), stop.clone());
        tasks.spawn(async move { running.run(halt).await.expect("ran") });
        let halt = stop.clone();
        tasks.spawn(async move { sharding.run(halt).await.expect("ran") });
        tasks.spawn(async move { controller.run_in(env).await.expect("ran") });
        Self {
            informer,
            stop,
            tasks,
        }
    }

    fn cached(&self) -> BTreeSet<String> {
        let cache = self.informer.cache();
        cache.list().iter().map(|map| map.key().name).collect()
    }

    fn out_of_scope(&self) -> u64 {
        self.informer.stats().out_of_scope
    }

    async fn stop(mut self) {
        self.stop.cancel();
        while let Some(ended) = within("a task to stop", LIMIT, self.tasks.join_next()).await {
            ended.expect("not panicked");
        }
    }
}

/// The world of one test: the namespace, the membership, the log.
struct World {
    client: kube::Client,
    ns: String,
    group: MemoryMembershipGroup,
    looks: Looks,
}

impl World {
    fn owner(&self, name: &str) -> Option<String> {
        let key = ObjectKey::new(self.ns.as_str(), name);
        let (owner, _) = self.group.owner(self.group.shard_count().shard_of(&key))?;
        Some(owner.as_str().to_owned())
    }

    fn owned(&self, names: &[String], member: &str) -> BTreeSet<String> {
        let owned = names
            .iter()
            .filter(|name| self.owner(name).as_deref() == Some(member));
        owned.cloned().collect()
    }

    /// Whether each replica caches exactly its shards' objects of `names`.
    fn cached_by_owners(&self, replicas: &[(&str, Replica)], names: &[String]) -> bool {
        replicas
            .iter()
            .all(|(member, replica)| replica.cached() == self.owned(names, member))
    }

    /// Whether every name was reconciled on its owner since entry `from`
    /// of the log.
    fn reconciled(&self, names: &[String], from: usize) -> bool {
        let keys: Vec<String> = names
            .iter()
            .map(|name| format!("{}/{name}", self.ns))
            .collect();
        let owner = |key: &str| self.owner(key.split_once('/')?.1);
        looks::reconciled_by_owners(&self.looks, &keys, owner, from)
    }

    fn replicas(&self, names: &[&'static str]) -> Vec<(&'static str, Replica)> {
        let start = |name| Replica::start(name, &self.client, &self.ns, &self.group, &self.looks);
        names.iter().map(|&name| (name, start(name))).collect()
    }

    fn settled(&self, replicas: &[(&str, Replica)], names: &[String]) -> bool {
        self.cached_by_owners(replicas, names) && self.reconciled(names, 0)
    }
}

#[tokio::test]
async fn replicas_selecting_by_shard_label_are_sent_only_their_shards_and_follow_a_handover() {
    let (client, ns) = fresh("shard-scoped").await;
    let shards = ShardCount::new(16).expect("valid");
    let world = World {
        client,
        ns,
        group: MemoryMembershipGroup::new("maps", shards),
        looks: Looks::default(),
    };
    let mut names = names("map", 90);
    create(&world.client, &world.ns, &names).await;
    let stop = CancellationToken::new();
    let labelling = labeller(&world.client, &world.ns, label(shards), &stop);
    let mut replicas = world.replicas(&["r0", "r1", "r2"]);
    wait_until(
        "each replica caching its shards, every map reconciled by its owner",
        LIMIT,
        || world.settled(&replicas, &names),
    )
    .await;
    let before: Vec<u64> = replicas.iter().map(|(_, r)| r.out_of_scope()).collect();
    let more = more_names(&names);
    create(&world.client, &world.ns, &more).await;
    names.extend(more);
    wait_until(
        "the new maps labelled, cached and reconciled by their owners",
        LIMIT,
        || world.settled(&replicas, &names),
    )
    .await;
    let after: Vec<u64> = replicas.iter().map(|(_, r)| r.out_of_scope()).collect();
    assert_eq!(
        before, after,
        "the API server sent no replica another's objects"
    );
    let (_, leaving) = replicas.pop().expect("three");
    let moved: Vec<String> = world.owned(&names, "r2").into_iter().collect();
    let from = world.looks.lock().len();
    leaving.stop().await;
    wait_until(
        "r2's shards cached and reconciled by the others",
        LIMIT,
        || {
            world.owned(&names, "r2").is_empty()
                && world.cached_by_owners(&replicas, &names)
                && world.reconciled(&moved, from)
        },
    )
    .await;
    every_reconcile_saw_its_object(&world.looks);
    stop.cancel();
    within("the labeller to stop", LIMIT, labelling)
        .await
        .expect("not panicked");
    for (_, replica) in replicas {
        replica.stop().await;
    }
}

/// Thirty more names.
fn more_names(names: &[String]) -> Vec<String> {
    (names.len()..names.len() + 30)
        .map(|i| format!("map-{i:03}"))
        .collect()
}
