//! The replica process: a manager sharded by a `KubeMembership`, whose
//! controller stamps each ConfigMap of the shards it owns with its id,
//! the shard's token and the wanted value, through a client fenced by the
//! membership, logging each reconcile (`chaos_process::Log`).

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use tend::Informer;
use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::kube::{KubeMembership, KubeSource};
use tend::manager::Manager;

use super::chaos_process::{Log, Span, wall_ns};
use super::{GROUP, client_for, field, shards, timing};

/// Stamps each map with its replica, the shard's token and the wanted
/// value.
struct Stamp {
    id: String,
    log: Log,
}

impl Reconciler<ConfigMap> for Stamp {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, ClientError> {
        let token = ctx.fencing_token().map_or(0, |token| token.get());
        let key = ctx.key().name.clone();
        self.log.line(&format!("S {key} {token} {}", wall_ns()));
        let mut span = Span {
            log: &self.log,
            key,
            token,
            outcome: "cancelled",
        };
        // A simulated call elsewhere, longer for the maps changed just
        // before a disruption or a rejoin: reconciles are in flight when
        // it comes, and when shards are handed over.
        let changed = ctx
            .object()
            .is_some_and(|map| field(map, "seen") != field(map, "want"));
        tokio::time::sleep(Duration::from_millis(if changed { 50 } else { 2 })).await;
        let result = match ctx.object() {
            Some(map) if stale(map, &self.id, token) => {
                let mut stamped = ConfigMap::clone(map);
                let data = stamped.data.get_or_insert_with(Default::default);
                let want = data.get("want").cloned().unwrap_or_default();
                data.insert("seen".into(), want);
                data.insert("by".into(), self.id.clone());
                data.insert("token".into(), token.to_string());
                let client = ctx.client::<ConfigMap>().expect("a client for maps");
                // When the write leaves (the fence checked just now): a
                // process paused while awaiting the answer had acted by then.
                let key = &span.key;
                self.log.line(&format!("W {key} {token} {}", wall_ns()));
                client.update(stamped).await.map(drop)
            }
            _ => Ok(()),
        };
        span.outcome = match &result {
            Ok(()) => "ok",
            Err(ClientError::Conflict { .. }) => "conflict",
            Err(ClientError::Fenced { .. }) => "fenced",
            Err(_) => "error",
        };
        match result {
            Ok(()) | Err(ClientError::Conflict { .. } | ClientError::Fenced { .. }) => {
                Ok(Action::Done)
            }
            Err(error) => Err(error),
        }
    }
}

/// Whether `map` needs this replica's stamp.
fn stale(map: &ConfigMap, id: &str, token: u64) -> bool {
    field(map, "by") != id
        || field(map, "seen") != field(map, "want")
        || field(map, "token") != token.to_string()
}

/// One replica, every request through `server` (its proxy).
pub(crate) async fn replica(
    id: &str,
    kubeconfig: &Path,
    server: &str,
    namespace: &str,
    log: &Path,
) -> Result<(), String> {
    let client = client_for(kubeconfig, server).await;
    let member = KubeMembership::builder(client.clone(), namespace, GROUP, id, shards())
        .config(timing())
        .build()
        .map_err(|e| e.to_string())?;
    let maps = KubeSource::<ConfigMap>::namespaced(client, namespace).labels("tend.test/item");
    let writer = maps.client_fenced_by(&member);
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| e.to_string())?;
    let stamp = Stamp {
        id: id.to_owned(),
        log: Log(Mutex::new(file)),
    };
    let mut manager = Manager::builder()
        .sharding(member, shards())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let informer = manager
        .informer("maps", || Informer::builder(maps).build())
        .map_err(|e| e.to_string())?;
    let controller = manager
        .controller("stamp", &informer, stamp)
        .client(writer)
        .concurrency(NonZeroUsize::new(16).unwrap())
        .build()
        .map_err(|e| e.to_string())?;
    manager
        .add_sharded_controller(controller)
        .map_err(|e| e.to_string())?;
    manager.run().await.map_err(|e| e.to_string())
}
