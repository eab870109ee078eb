//! Chaos more than one example plays on a memory store.

use tend::Object;
use tend::memory::MemoryStore;

/// Deletes an object of `store` picked at random, as an outside actor:
/// the one deleted, or `None` if the store was empty or it was gone
/// already.
pub(crate) async fn delete_random<O: Object>(store: &MemoryStore<O>) -> Option<O> {
    let victim = fastrand::choice(store.snapshot().objects)?;
    let deleted = store.client().delete(&victim.key()).await;
    deleted.is_ok().then_some(victim)
}
