//! The replica process: its log, its spans and its reconciler.

use super::*;

// ---- the replica process ----

/// A replica's log: a line when a reconcile starts and one when it ends
/// (also when it is cancelled: the guard's drop), wall-clock nanoseconds.
struct Log(Mutex<std::fs::File>);

impl Log {
    fn line(&self, line: &str) {
        let mut file = self.0.lock();
        file.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// Logs a reconcile's end when dropped: at its end, or when cancelled.
struct Span<'a> {
    log: &'a Log,
    key: String,
    token: u64,
    outcome: &'static str,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        let (key, token, outcome) = (&self.key, self.token, self.outcome);
        self.log
            .line(&format!("E {key} {token} {} {outcome}", wall_ns()));
    }
}

/// Stamps each item with its replica, the shard's token and the wanted
/// value, through the fenced client.
struct Stamp {
    id: String,
    log: Log,
}

impl Reconciler<Item> for Stamp {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let token = ctx.fencing_token().map_or(0, |token| token.get());
        let key = ctx.key().clone();
        self.log.line(&format!("S {key} {token} {}", wall_ns()));
        let mut span = Span {
            log: &self.log,
            key,
            token,
            outcome: "cancelled",
        };
        // A simulated call elsewhere, longer for the items changed just
        // before a disruption: reconciles are in flight when it comes.
        let changed = ctx.object().is_some_and(|item| item.seen != item.want);
        let call = if changed { 20 } else { 2 };
        tokio::time::sleep(Duration::from_millis(call)).await;
        let result = match ctx.object() {
            Some(item) if item.by != self.id || item.seen != item.want || item.token != token => {
                let client = ctx.client::<Item>().expect("a client for items");
                let stamped = Item {
                    by: self.id.clone(),
                    seen: item.want,
                    token,
                    ..Item::clone(item)
                };
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
            // A newer version is queued again; a lost shard is someone else's.
            Ok(()) | Err(ClientError::Conflict { .. } | ClientError::Fenced { .. }) => {
                Ok(Action::Done)
            }
            Err(error) => Err(error),
        }
    }
}

/// One replica: the membership and the informer through `cut` (the
/// parent's proxy), the fenced writes direct.
pub(super) async fn replica(id: &str, cut: &str, direct: &str, log: &Path) -> Result<(), String> {
    let cut = connect(cut).await.map_err(|e| e.to_string())?;
    let direct = connect(direct).await.map_err(|e| e.to_string())?;
    let member = EtcdMembership::builder(cut.clone(), GROUP, id, shards())
        .prefix(GROUP_PREFIX)
        .config(timing())
        .build()
        .map_err(|e| e.to_string())?;
    let writer = items(direct).client_fenced_by(&member);
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| e.to_string())?;
    let stamp = Stamp {
        id: id.to_owned(),
        log: Log(Mutex::new(file)),
    };
    // SIGTERM stops it cleanly: its shards drained, released, and left.
    let mut manager = Manager::builder()
        .sharding(member, shards())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let informer = manager
        .informer("items", || Informer::builder(items(cut)).build())
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
