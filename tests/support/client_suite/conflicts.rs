//! The suite's checks of modify and create_or_update under a rival writer.

use super::*;

/// A backend that lets a rival write the object just before each of the
/// first `rival_updates` updates (and creates it just before each of the
/// first `rival_creates` creates): a deterministic concurrent writer.
struct Rival {
    inner: Client<Item>,
    rival_updates: AtomicU32,
    rival_creates: AtomicU32,
    updates: Arc<AtomicU32>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[tend::async_trait]
impl Backend for Rival {
    type Object = Item;

    fn name(&self) -> &str {
        "rival"
    }

    async fn get(&self, key: &String) -> Result<Option<Item>, ClientError> {
        self.inner.get(key).await
    }

    async fn list(&self) -> Result<Snapshot<Item>, ClientError> {
        self.inner.list().await
    }

    async fn create(&self, object: Item, token: Option<FencingToken>) -> Result<Item, ClientError> {
        assert_eq!(token, None);
        if take(&self.rival_creates) {
            self.inner.create(item(&object.name, 500)).await.unwrap();
        }
        self.inner.create(object).await
    }

    async fn update(&self, object: Item, token: Option<FencingToken>) -> Result<Item, ClientError> {
        assert_eq!(token, None);
        self.updates.fetch_add(1, Ordering::SeqCst);
        if take(&self.rival_updates) {
            let mut theirs = self.inner.get(&object.name).await?.unwrap();
            theirs.value += 1000;
            self.inner.update(theirs).await.unwrap();
        }
        self.inner.update(object).await
    }

    async fn delete(
        &self,
        key: &String,
        version: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        assert_eq!(token, None);
        match version {
            Some(version) => self.inner.delete_at(key, version).await,
            None => self.inner.delete(key).await,
        }
    }
}

/// `client` behind a rival; also returns the count of updates tried.
fn with_rival(client: &Client<Item>, updates: u32, creates: u32) -> (Client<Item>, Arc<AtomicU32>) {
    let tried = Arc::new(AtomicU32::new(0));
    let rival = Rival {
        inner: client.clone(),
        rival_updates: AtomicU32::new(updates),
        rival_creates: AtomicU32::new(creates),
        updates: Arc::clone(&tried),
    };
    (Client::new(rival), tried)
}

pub async fn modify_rereads_and_retries_on_conflict(client: Client<Item>) {
    client.create(item("a", 1)).await.unwrap();
    let (contended, tried) = with_rival(&client, 2, 0);
    let mut calls = 0;
    let written = contended
        .modify(&key("a"), |item| {
            calls += 1;
            item.value += 1;
        })
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Updated);
    assert_eq!(calls, 3, "the change is applied to each fresh read");
    assert_eq!(tried.load(Ordering::SeqCst), 3);
    // Both rival writes (+1000 each) survive: the change was re-applied.
    assert_eq!(written.object.value, 2002);
    assert_eq!(client.get(&key("a")).await.unwrap(), Some(written.object));
}

pub async fn modify_gives_up_after_its_attempts_with_a_typed_error(client: Client<Item>) {
    client.create(item("a", 1)).await.unwrap();
    let (contended, tried) = with_rival(&client, u32::MAX, 0);
    let attempts = NonZeroU32::new(3).unwrap();
    let error = contended
        .conflict_attempts(attempts)
        .modify(&key("a"), |item| item.value += 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::TooManyConflicts { attempts: 3, .. }),
        "{error:?}"
    );
    assert_eq!(tried.load(Ordering::SeqCst), 3, "exactly the bound");
    assert_eq!(
        client.get(&key("a")).await.unwrap().unwrap().value,
        3001,
        "only the rival's writes landed"
    );
    // The default bound.
    let (contended, tried) = with_rival(&client, u32::MAX, 0);
    let error = contended.modify(&key("a"), |i| i.value += 1).await;
    assert!(matches!(
        error,
        Err(ClientError::TooManyConflicts { attempts: 5, .. })
    ));
    assert_eq!(tried.load(Ordering::SeqCst), 5);
}

pub async fn modify_reports_unchanged_and_not_found(client: Client<Item>) {
    let a = client.create(item("a", 1)).await.unwrap();
    let written = client
        .modify(&key("a"), |item| item.value = 1)
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Unchanged);
    assert_eq!(written.object, a);
    assert_eq!(
        stored(&client).await,
        [("a".into(), 1, a.version)],
        "nothing written"
    );
    let error = client.modify(&key("nope"), |item| item.value = 2).await;
    assert!(error.unwrap_err().is_not_found());
    assert_eq!(client.get(&key("nope")).await.unwrap(), None);
}

pub async fn create_or_update_reports_created_updated_unchanged(client: Client<Item>) {
    let created = client
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(created.effect, Effect::Created);
    assert_eq!(created.object.value, 7);
    let unchanged = client
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(unchanged.effect, Effect::Unchanged);
    assert_eq!(unchanged.object.version, created.object.version);
    let updated = client
        .create_or_update(item("a", 0), |item| item.value = 8)
        .await
        .unwrap();
    assert_eq!(updated.effect, Effect::Updated);
    assert!(updated.object.version > created.object.version);
    assert_eq!(
        stored(&client).await,
        [("a".into(), 8, updated.object.version)]
    );
}

pub async fn create_or_update_survives_a_lost_create_race(client: Client<Item>) {
    // A rival creates the object between the read and the create, then
    // wins one update race: the helper starts over each time.
    let (contended, tried) = with_rival(&client, 1, 1);
    let written = contended
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Updated);
    assert_eq!(written.object.value, 7);
    assert_eq!(tried.load(Ordering::SeqCst), 2);
    assert_eq!(client.get(&key("a")).await.unwrap(), Some(written.object));
    let (contended, _) = with_rival(&client, u32::MAX, 0);
    let error = contended
        .create_or_update(item("a", 0), |item| item.value += 1)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::TooManyConflicts { .. }),
        "{error:?}"
    );
}
