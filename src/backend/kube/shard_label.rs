//! `ShardLabel`: a label naming each object's shard, so that a sharded
//! replica's `KubeSource` asks the API server for its own shards' objects
//! only (a label-selected list and watch, as external sharders do), and
//! the task that labels the objects that lack it.

use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::endpoint::KubeResource;
use super::source::KubeSource;
use crate::client::{Client, ClientError};
use crate::error::error_chain;
use crate::object::{LabelSelector, Object, ObjectKey, SelectorError};
use crate::shard::{Shard, ShardCount};
use crate::source::{Change, Source, SourceError};

/// The first and the longest pause of [`ShardLabel::label_missing`] after
/// a failed list or watch.
const RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// A label whose value is each object's shard (its key's
/// [`ShardCount::shard_of`], in decimal). A source built with
/// [`KubeSource::shard_label`] lists and watches only the objects labelled
/// with the shards its replica keeps, so a replica's share is all the API
/// server sends it. [`label_missing`](Self::label_missing) labels the
/// objects that lack the label (run it on one replica or on every one).
///
/// An object without the label is seen by no scoped replica until it is
/// labelled. An object whose label is not its key's shard is seen only by
/// the replica that keeps the labelled shard, which does not own its key:
/// nobody reconciles it. So the label must be written only from the key,
/// with the same shard count, and never changed by hand; a new shard count
/// needs every object labelled again.
///
/// # Examples
///
/// ```
/// use tend::ObjectKey;
/// use tend::kube::ShardLabel;
/// use tend::shard::ShardCount;
///
/// let label = ShardLabel::new("example.com/shard", ShardCount::new(16)?)?;
/// let value = label.value_of(&ObjectKey::new("apps", "web"));
/// assert!(value.parse::<u32>()? < 16);
/// assert_eq!(label.missing(), "!example.com/shard");
/// assert!(ShardLabel::new("not a label", ShardCount::new(16)?).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLabel {
    key: String,
    shards: ShardCount,
}

impl ShardLabel {
    /// The label `key` over `shards` shards (the membership's count).
    ///
    /// # Errors
    ///
    /// [`SelectorError`] when `key` is not a label key (a qualified name:
    /// `name` or `prefix/name`).
    pub fn new(key: impl Into<String>, shards: ShardCount) -> Result<Self, SelectorError> {
        let key = key.into();
        let alone = key.parse::<LabelSelector>()?;
        if alone != LabelSelector::new().exists(&key) {
            return Err(SelectorError {
                selector: key,
                reason: "a label key, not a selector".to_owned(),
            });
        }
        Ok(Self { key, shards })
    }

    /// The label's key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The label's value for the object keyed `key`: its shard.
    #[must_use]
    pub fn value_of(&self, key: &ObjectKey) -> String {
        self.shards.shard_of(key).index().to_string()
    }

    /// The selector of the objects without the label (`!key`): the source
    /// of [`label_missing`](Self::label_missing).
    #[must_use]
    pub fn missing(&self) -> String {
        format!("!{}", self.key)
    }

    /// The selector of the objects of `kept` (none: a value no object has).
    pub(super) fn selector(&self, kept: &[Shard]) -> String {
        if kept.is_empty() {
            return format!("{} in (none)", self.key);
        }
        let values: Vec<String> = kept.iter().map(|shard| shard.index().to_string()).collect();
        format!("{} in ({})", self.key, values.join(","))
    }

    /// Labels every object of `source` that lacks the label, as it appears
    /// (a list, then a watch of the objects without it; on a failure, a
    /// pause from 1 s doubling to 30 s, and a list again), until `stop`.
    /// A metadata-only source (`KubeSource<PartialObjectMeta<K>>`) costs
    /// the least: the label is written with a patch under the object's
    /// `resourceVersion`. The source's own label selector is replaced by
    /// [`missing`](Self::missing).
    pub async fn label_missing<K>(&self, source: KubeSource<K>, stop: CancellationToken)
    where
        K: KubeResource,
        K::DynamicType: Clone + Send + Sync,
    {
        let source = source.labels(&self.missing());
        let client = source.client();
        let mut pause = RETRY.0;
        loop {
            let labelled = stop.run_until_cancelled(self.label_round(&source, &client));
            match labelled.await {
                None => return,
                Some(Ok(())) => pause = RETRY.0,
                Some(Err(error)) => {
                    tracing::warn!(label = %self.key, error = %error_chain(&error), ?pause, "labelling shards failed; retrying");
                    if stop
                        .run_until_cancelled(tokio::time::sleep(pause))
                        .await
                        .is_none()
                    {
                        return;
                    }
                    pause = pause.saturating_mul(2).min(RETRY.1);
                }
            }
        }
    }

    /// One list of the unlabelled objects and a watch of them, until it
    /// ends.
    async fn label_round<K>(
        &self,
        source: &KubeSource<K>,
        client: &Client<K>,
    ) -> Result<(), SourceError>
    where
        K: KubeResource,
        K::DynamicType: Clone + Send + Sync,
    {
        let snapshot = source.list().await?;
        for object in snapshot.objects {
            self.label(client, object).await?;
        }
        let mut changes = source.watch(snapshot.revision).await?;
        while let Some(change) = changes.next().await {
            if let Change::Applied(object) = change? {
                self.label(client, object).await?;
            }
        }
        Ok(())
    }

    /// Writes `object`'s label; a conflict or a deletion leaves it to the
    /// watch (a newer version comes, or none is needed); another failure
    /// ends the round, so that a list finds the object again.
    async fn label<K>(&self, client: &Client<K>, mut object: K) -> Result<(), SourceError>
    where
        K: KubeResource,
        K::DynamicType: Clone + Send + Sync,
    {
        let value = self.value_of(&object.key());
        let labels = object
            .meta_mut()
            .labels
            .get_or_insert_with(Default::default);
        labels.insert(self.key.clone(), value);
        match client.update(object).await {
            Ok(_) | Err(ClientError::Conflict { .. } | ClientError::NotFound { .. }) => Ok(()),
            Err(error) => Err(SourceError::unavailable(error)),
        }
    }
}
