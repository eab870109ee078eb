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
use crate::informer::CacheScope;
use crate::object::{LabelSelector, Object, ObjectKey, SelectorError};
use crate::shard::{Shard, ShardCount};
use crate::source::{Change, Source, SourceError};

/// A shard label that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardLabelError {
    /// The key is not a label key.
    #[error("invalid shard label: {0}")]
    Key(#[from] SelectorError),
    /// The label's shard count is not the cache scope's: every object
    /// would be labelled with another shard than the one its key is owned
    /// under.
    #[error(
        "the shard label {label:?} counts {label_shards} shards, the cache scope {scope_shards}"
    )]
    Counts {
        /// The label's key.
        label: String,
        /// The label's shard count.
        label_shards: u32,
        /// The scope's (its sharding's) shard count.
        scope_shards: u32,
    },
}

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
    /// [`ShardLabelError::Key`] when `key` is not a label key (a
    /// qualified name: `name` or `prefix/name`).
    pub fn new(key: impl Into<String>, shards: ShardCount) -> Result<Self, ShardLabelError> {
        let key = key.into();
        let alone = key.parse::<LabelSelector>()?;
        if alone != LabelSelector::new().exists(&key) {
            return Err(ShardLabelError::Key(SelectorError {
                selector: key,
                reason: "a label key, not a selector".to_owned(),
            }));
        }
        Ok(Self { key, shards })
    }

    /// The shard count the values are computed over.
    #[must_use]
    pub fn shards(&self) -> ShardCount {
        self.shards
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

    /// The selector of the labelled objects of `kept`. No shard is a
    /// value no object has; every shard is the label alone; more than half
    /// of them is the label without the others' values (`notin`, shorter
    /// with many shards). An object without the label is never selected:
    /// a replica that saw it, then not (its selector narrowed), would take
    /// it for deleted.
    pub(super) fn selector(&self, kept: &[Shard]) -> String {
        let values = |shards: &mut dyn Iterator<Item = Shard>| {
            let values: Vec<String> = shards.map(|shard| shard.index().to_string()).collect();
            values.join(",")
        };
        let (key, total) = (&self.key, self.shards.shards().len());
        if kept.is_empty() {
            return format!("{key} in (none)");
        }
        if kept.len() >= total {
            return key.clone();
        }
        if kept.len() * 2 <= total {
            return format!("{key} in ({})", values(&mut kept.iter().copied()));
        }
        let mut others = self.shards.shards().filter(|shard| !kept.contains(shard));
        format!("{key},{key} notin ({})", values(&mut others))
    }

    /// Labels every object of `source` that lacks the label, as it appears
    /// (a list, then a watch of the objects without it; on a failure, a
    /// pause from 1 s doubling to 30 s, and a list again), until `stop`.
    /// A metadata-only source (`KubeSource<PartialObjectMeta<K>>`) costs
    /// the least: the label is written with a JSON patch of the labels
    /// under the object's `resourceVersion`; a source of whole objects
    /// writes each with an update (a `PUT` of the object as decoded).
    /// The source's own label selector is kept, with
    /// [`missing`](Self::missing) added; a [`shard_label`](KubeSource::shard_label)
    /// of it is dropped. An object that cannot be labelled (refused,
    /// invalid) is logged and left; a failure to reach the server lists
    /// again after the pause.
    pub async fn label_missing<K>(&self, source: KubeSource<K>, stop: CancellationToken)
    where
        K: KubeResource,
        K::DynamicType: Clone + Send + Sync,
    {
        let source = source.selecting_only(&self.missing());
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
        let key = object.key();
        match client.update(object).await {
            Ok(_) | Err(ClientError::Conflict { .. } | ClientError::NotFound { .. }) => Ok(()),
            Err(error @ (ClientError::Unavailable { .. } | ClientError::RetryLater { .. })) => {
                Err(SourceError::unavailable(error))
            }
            Err(error) => {
                tracing::warn!(label = %self.key, %key, error = %error_chain(&error), "an object could not be labelled with its shard");
                Ok(())
            }
        }
    }
}

impl<K: KubeResource> KubeSource<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    /// Only the objects whose `label` names a shard `scope` keeps (beside
    /// the [`labels`](Self::labels) selector, if any): each list and watch
    /// asks for the shards kept when it is sent. Build the informer with
    /// the same scope ([`InformerBuilder::scope`](crate::InformerBuilder::scope)),
    /// from [`Sharding::cache_scope`](crate::placement::Sharding::cache_scope):
    /// the API server then sends this replica its share only. Objects
    /// without the label are seen by no such source: label them with
    /// [`ShardLabel::label_missing`]. A scope that keeps no shard selects
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`ShardLabelError::Counts`](ShardLabelError::Counts) when
    /// the label's shard count is not the scope's.
    pub fn shard_label(
        mut self,
        label: &ShardLabel,
        scope: &CacheScope<ObjectKey>,
    ) -> Result<Self, ShardLabelError> {
        if label.shards() != scope.shard_count() {
            return Err(ShardLabelError::Counts {
                label: label.key().to_owned(),
                label_shards: label.shards().get(),
                scope_shards: scope.shard_count().get(),
            });
        }
        self.shards = Some((label.clone(), scope.clone()));
        Ok(self)
    }

    /// This source selecting only what its own selector and `extra`
    /// select (no shard label).
    pub(super) fn selecting_only(mut self, extra: &str) -> Self {
        self.shards = None;
        self.labels = Some(match self.labels.take() {
            Some(labels) => format!("{labels},{extra}"),
            None => extra.to_owned(),
        });
        self
    }

    /// The label selector: the source's own and its shards' (the shards
    /// kept now).
    pub(super) fn label_selector(&self) -> Option<String> {
        let shards =
            (self.shards.as_ref()).map(|(label, scope)| label.selector(&scope.kept_shards()));
        match (&self.labels, shards) {
            (Some(labels), Some(shards)) => Some(format!("{labels},{shards}")),
            (labels, shards) => shards.or_else(|| labels.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use std::sync::Arc;

    use super::*;
    use crate::informer::ScopeChanges;

    fn label(shards: u32) -> ShardLabel {
        ShardLabel::new("tend.dev/shard", ShardCount::new(shards).expect("valid")).expect("a key")
    }

    fn shards(indexes: &[u32]) -> Vec<Shard> {
        let count = ShardCount::new(8).expect("valid");
        count
            .shards()
            .filter(|shard| indexes.contains(&shard.index()))
            .collect()
    }

    #[test]
    fn the_selector_names_the_kept_shards_or_the_others_or_nothing() {
        let label = label(8);
        assert_eq!(label.selector(&[]), "tend.dev/shard in (none)");
        assert_eq!(label.selector(&shards(&[1, 5])), "tend.dev/shard in (1,5)");
        let most = shards(&[0, 1, 2, 3, 4, 6]);
        let others = "tend.dev/shard,tend.dev/shard notin (5,7)";
        assert_eq!(label.selector(&most), others);
        let all = shards(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(label.selector(&all), "tend.dev/shard");
        let count = ShardCount::new(1).expect("valid");
        let one = ShardLabel::new("s", count).expect("a key");
        assert_eq!(one.selector(&count.shards().collect::<Vec<_>>()), "s");
        for selector in [others, "tend.dev/shard"] {
            let parsed: LabelSelector = selector.parse().expect("a selector");
            assert!(
                !parsed.matches(None),
                "{selector}: never an unlabelled object"
            );
        }
    }

    #[test]
    fn a_label_key_is_checked() {
        for bad in ["", "a b", "a=b", "!a", "a,b", "-a"] {
            let refused = ShardLabel::new(bad, ShardCount::new(4).expect("valid"));
            assert!(
                matches!(refused, Err(ShardLabelError::Key(_))),
                "{bad:?}: {refused:?}"
            );
        }
        assert!(ShardLabel::new("example.com/shard", ShardCount::new(4).expect("valid")).is_ok());
    }

    fn scope(count: u32, kept: &'static [u32]) -> CacheScope<ObjectKey> {
        let count = ShardCount::new(count).expect("valid");
        let shards = move || {
            count
                .shards()
                .filter(|s| kept.contains(&s.index()))
                .collect()
        };
        CacheScope::new(|_| true, shards, count, Arc::new(ScopeChanges::new()))
    }

    #[tokio::test]
    async fn a_source_adds_its_shards_to_its_own_selector_and_refuses_another_count() {
        let client = offline_client();
        let source = KubeSource::<ConfigMap>::all(client).labels("app=web");
        let mismatch = source.clone().shard_label(&label(8), &scope(16, &[]));
        assert!(matches!(
            mismatch,
            Err(ShardLabelError::Counts {
                label_shards: 8,
                scope_shards: 16,
                ..
            })
        ));
        let sharded = source
            .shard_label(&label(8), &scope(8, &[2, 3]))
            .expect("same count");
        assert_eq!(
            sharded.label_selector().as_deref(),
            Some("app=web,tend.dev/shard in (2,3)")
        );
        let labeller = sharded.selecting_only("!tend.dev/shard");
        assert_eq!(
            labeller.label_selector().as_deref(),
            Some("app=web,!tend.dev/shard"),
            "the labeller's source keeps the user's selector, drops the shards"
        );
    }

    /// A client of a server that is never called.
    fn offline_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URI"));
        kube::Client::try_from(config).expect("a client")
    }
}
