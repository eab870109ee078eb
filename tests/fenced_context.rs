//! A reconcile's client is fenced by its leadership: a write made through it
//! after the leader was deposed (late, from work the reconcile spawned) is
//! refused by the backend and changes nothing, with no token threaded by
//! hand.

#[path = "support/widgets.rs"]
mod widgets;

use std::time::Duration;

use tend::Informer;
use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::{InProcessElection, Manager};
use tokio::sync::{mpsc, oneshot};
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

#[tokio::test(start_paused = true)]
async fn a_deposed_leaders_late_write_through_its_reconciles_client_is_refused() {
    let store = widgets(&["a"]);
    let election = InProcessElection::new("widgets-lock");
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election.candidate())
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let (clients, mut handed) = mpsc::unbounded_channel();
    let controller = manager
        .controller("widgets", &informer, HandsOver(clients))
        .client(store.client_fenced_by(election.clone()))
        .build()
        .expect("valid");
    manager.add_controller(controller).expect("added");
    let run = tokio::spawn(manager.run());
    let client = within("the reconcile's client", LIMIT, handed.recv())
        .await
        .expect("sent");
    assert_eq!(
        client.token(),
        election.leader_token(),
        "fenced by the leader's token"
    );

    // While leading, its writes land.
    let current = store
        .client()
        .get(&"a".to_owned())
        .await
        .expect("read")
        .expect("exists");
    let written = client.update(current).await.expect("written while leading");
    let landed = written.version;

    election.depose();
    let (done, late) = oneshot::channel();
    tokio::spawn(async move {
        let _ = done.send(client.update(written).await);
    });
    let refused = within("the late write", LIMIT, late).await.expect("sent");
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "a deposed leader's write: {refused:?}"
    );
    let after = store
        .client()
        .get(&"a".to_owned())
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(after.version, landed, "the refused write changed nothing");
    let _ = within("run to end", LIMIT, run).await;
}
