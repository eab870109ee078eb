//! Owner references as the controller's ownership: which owner an object
//! belongs to, for `ControllerBuilder::owns`, and the reference to write
//! into a new dependent.

use std::any::TypeId;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::object::ObjectKey;

/// The key of `object`'s controlling owner when that owner is an `O`: its
/// owner reference with `controller: true` names `O`'s kind and API group
/// (at any version). A namespaced owner is in `object`'s namespace (Kubernetes
/// allows no other); a cluster-scoped one has none.
///
/// This is what [`ControllerBuilder::owns`](crate::controller::ControllerBuilder::owns)
/// needs to wake an owner when a dependent changes, as kube-runtime's
/// `owns` does:
///
/// ```no_run
/// # use k8s_openapi::api::apps::v1::ReplicaSet;
/// # use k8s_openapi::api::core::v1::Pod;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # struct Sets;
/// # impl Reconciler<ReplicaSet> for Sets {
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: Context<ReplicaSet>) -> Result<Action, Self::Error> { Ok(Action::Done) }
/// # }
/// # fn wire(sets: tend::Informer<ReplicaSet>, pods: tend::Informer<Pod>) -> Result<(), Box<dyn std::error::Error>> {
/// let controller = Controller::builder("replicasets", &sets, Sets)
///     .owns(&pods, tend::kube::controller_of::<ReplicaSet>)
///     .build()?;
/// # Ok(()) }
/// ```
pub fn controller_of<O>(object: &impl Resource) -> Option<ObjectKey>
where
    O: Resource<DynamicType = ()>,
    O::Scope: 'static,
{
    let owner = object
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|owner| owner.controller == Some(true))?;
    // Group and kind, not the version: a reference written at another
    // version of the same kind (after a CRD's version moved) is still ours.
    let ours = owner.kind == O::kind(&()) && group(&owner.api_version) == O::group(&());
    if !ours {
        return None;
    }
    let cluster_scoped = TypeId::of::<O::Scope>() == TypeId::of::<ClusterResourceScope>();
    let namespace = if cluster_scoped {
        String::new()
    } else {
        object.meta().namespace.clone().unwrap_or_default()
    };
    Some(ObjectKey::new(namespace, owner.name.clone()))
}

/// The group of an `apiVersion` (`apps/v1` → `apps`; `v1` → the core
/// group, empty).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// The owner reference that makes `owner` the controller of a new
/// dependent (`controller` and `blockOwnerDeletion` set), so that
/// [`controller_of`] maps the dependent back to it and, on a real cluster,
/// Kubernetes' garbage collector deletes the dependent after its owner.
/// `None` when `owner` has no name or uid yet (it was never stored).
pub fn controller_reference<O>(owner: &O) -> Option<OwnerReference>
where
    O: Resource<DynamicType = ()>,
{
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::ObjectMeta;

    use super::*;

    fn stored<K: Resource>(mut object: K, namespace: Option<&str>, name: &str) -> K {
        let meta = object.meta_mut();
        meta.name = Some(name.to_owned());
        meta.namespace = namespace.map(str::to_owned);
        meta.uid = Some(format!("uid-{name}"));
        object
    }

    fn pod_with(owners: Vec<OwnerReference>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-1".to_owned()),
                namespace: Some("apps".to_owned()),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_pod_maps_to_its_controlling_replica_set_in_its_namespace() {
        let set = stored(ReplicaSet::default(), Some("apps"), "web");
        let reference = controller_reference(&set).expect("stored");
        assert_eq!(reference.controller, Some(true));
        assert_eq!(reference.block_owner_deletion, Some(true));
        assert_eq!(
            (reference.kind.as_str(), reference.api_version.as_str()),
            ("ReplicaSet", "apps/v1")
        );
        let pod = pod_with(vec![reference]);
        assert_eq!(
            controller_of::<ReplicaSet>(&pod),
            Some(ObjectKey::new("apps", "web"))
        );
        assert_eq!(controller_of::<Deployment>(&pod), None, "another kind");
    }

    #[test]
    fn only_the_controlling_reference_counts() {
        let set = stored(ReplicaSet::default(), Some("apps"), "web");
        let mut plain = set.owner_ref(&()).expect("stored");
        plain.controller = None;
        assert_eq!(controller_of::<ReplicaSet>(&pod_with(vec![plain])), None);
        assert_eq!(
            controller_of::<ReplicaSet>(&Pod::default()),
            None,
            "no references"
        );
    }

    #[test]
    fn a_cluster_scoped_owner_has_no_namespace() {
        let node = stored(Node::default(), None, "node-1");
        let pod = pod_with(vec![controller_reference(&node).expect("stored")]);
        assert_eq!(
            controller_of::<Node>(&pod),
            Some(ObjectKey::cluster("node-1"))
        );
    }

    #[test]
    fn an_owner_never_stored_has_no_reference() {
        assert!(controller_reference(&ReplicaSet::default()).is_none());
    }
}
