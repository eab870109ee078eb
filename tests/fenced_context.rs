//! A reconcile's client is fenced by its leadership: a write made through it
//! after the leader was deposed (late, from work the reconcile spawned) is
//! refused by the backend and changes nothing, with no token threaded by
//! hand; each refusal is reported to the controller's observer.

#[path = "support/widgets.rs"]
mod widgets;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tend::Informer;
use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, ControllerBuilder, ControllerObserver, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use widgets::{Widget, widgets, within};

const LIMIT: Duration = Duration::from_secs(60);

/// Hands the reconcile's own client to the test, then does nothing.
struct HandsOver(mpsc::UnboundedSender<Client<Widget>>);

impl Reconciler<Widget> for HandsOver {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Self::Error> {
        if let Some(client) = ctx.client::<Widget>() {
            let _ = self.0.send(client);
        }
        Ok(Action::Done)
    }
}

/// Counts the fenced writes refused that its controller reports.
#[derive(Debug, Default)]
struct Refusals(AtomicUsize);

impl ControllerObserver for Refusals {
    fn fenced_write_refused(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Refusals {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A leader's run over the widget `a`, whose controller (configured by
/// `configure`) hands its reconcile's client to the test.
struct Leading {
    store: MemoryStore<Widget>,
    election: MemoryElectionGroup,
    client: Client<Widget>,
    run: JoinHandle<Result<(), ManagerError>>,
}

async fn leading(
    configure: impl FnOnce(ControllerBuilder<Widget, HandsOver>) -> ControllerBuilder<Widget, HandsOver>,
) -> Leading {
    let store = widgets(&["a"]);
    let election = MemoryElectionGroup::new("widgets-lock");
    let candidate = election.candidate();
    let fenced = store.client_fenced_by(&candidate);
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(candidate)
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let (clients, mut handed) = mpsc::unbounded_channel();
    let controller = manager
        .controller("widgets", &informer, HandsOver(clients))
        .client(fenced);
    let controller = configure(controller).build().expect("valid");
    manager.add_controller(controller).expect("added");
    let run = tokio::spawn(manager.run());
    let client = within("the reconcile's client", LIMIT, handed.recv())
        .await
        .expect("sent");
    Leading {
        store,
        election,
        client,
        run,
    }
}

/// The widget `a` as stored now.
async fn stored(store: &MemoryStore<Widget>) -> Widget {
    let read = store.client().get(&"a".to_owned()).await;
    read.expect("read").expect("exists")
}

/// Runs `write` on a task of its own (as work a reconcile spawned) and
/// returns its result.
async fn late<T: Send + 'static>(
    write: impl Future<Output = Result<T, ClientError>> + Send + 'static,
) -> Result<T, ClientError> {
    let (done, result) = oneshot::channel();
    tokio::spawn(async move {
        let _ = done.send(write.await);
    });
    within("the late write", LIMIT, result).await.expect("sent")
}

#[tokio::test(start_paused = true)]
async fn a_deposed_leaders_late_write_through_its_reconciles_client_is_refused() {
    let Leading {
        store,
        election,
        client,
        run,
    } = leading(|controller| controller).await;
    assert_eq!(
        client.token(),
        election.leader_token(),
        "fenced by the leader's token"
    );

    // While leading, its writes land.
    let written = client
        .update(stored(&store).await)
        .await
        .expect("written while leading");
    let landed = written.version;

    election.depose();
    let refused = late(async move { client.update(written).await }).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "a deposed leader's write: {refused:?}"
    );
    assert_eq!(
        stored(&store).await.version,
        landed,
        "the refused write changed nothing"
    );
    let _ = within("run to end", LIMIT, run).await;
}

#[tokio::test(start_paused = true)]
async fn each_fenced_write_refused_through_a_reconciles_client_is_reported_to_its_observer() {
    let refusals = Arc::new(Refusals::default());
    // Without read-your-writes the client records no revisions: refusals
    // are reported all the same.
    let observer = Arc::clone(&refusals);
    let Leading {
        store,
        election,
        client,
        run,
    } = leading(|controller| controller.observer(observer).read_your_writes(None)).await;
    let before = stored(&store).await;
    client
        .update(before.clone())
        .await
        .expect("written while leading");
    let conflict = client.update(before).await;
    assert!(
        matches!(conflict, Err(ClientError::Conflict { .. })),
        "{conflict:?}"
    );
    assert_eq!(
        refusals.count(),
        0,
        "landed and conflicting writes are not refusals"
    );

    election.depose();
    let current = stored(&store).await;
    let writer = client.clone();
    let update = late(async move { writer.update(current).await }).await;
    assert!(
        matches!(update, Err(ClientError::Fenced { .. })),
        "{update:?}"
    );
    assert_eq!(
        refusals.count(),
        1,
        "the refused update, after its reconcile returned"
    );
    let writer = client.clone();
    let fresh = Widget {
        name: "b".to_owned(),
        version: tend::Revision::ZERO,
    };
    let created = late(async move { writer.create_or_update(fresh, |_| {}).await }).await;
    assert!(
        matches!(created, Err(ClientError::Fenced { .. })),
        "{created:?}"
    );
    assert_eq!(refusals.count(), 2, "a helper's refused write counts once");
    let writer = client.clone();
    let deleted = late(async move { writer.delete(&"a".to_owned()).await }).await;
    assert!(
        matches!(deleted, Err(ClientError::Fenced { .. })),
        "{deleted:?}"
    );
    assert_eq!(refusals.count(), 3, "one per refused write");
    let _ = within("run to end", LIMIT, run).await;
}
