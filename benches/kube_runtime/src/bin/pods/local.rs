//! In process, no API server: the heap the Pods themselves take, against
//! what an informer (and a controller over it) holds for them, to tell the
//! runtime's own share from the objects'.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tend::controller::Controller;
use tend::{CancellationToken, Informer, Revision, Snapshot, Source, SourceError};

use super::child::{Count, Seen, live};
use super::shape;

/// The pods, listed once, never changing.
struct Listed(std::sync::Mutex<Option<Vec<Pod>>>);

#[tend::async_trait]
impl Source for Listed {
    type Object = Pod;

    fn name(&self) -> &str {
        "pods"
    }

    async fn list(&self) -> Result<Snapshot<Pod>, SourceError> {
        let objects = self
            .0
            .lock()
            .expect("not poisoned")
            .take()
            .unwrap_or_default();
        Ok(Snapshot {
            objects,
            revision: Revision::new(1),
        })
    }

    async fn watch(&self, _: Revision) -> Result<tend::WatchStream<Pod>, SourceError> {
        Ok(Box::pin(futures::stream::pending()))
    }
}

fn pods(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            let json = serde_json::to_string(&Pod {
                status: Some(shape::status(i)),
                ..shape::pod("local", i)
            })
            .expect("serialized");
            let mut pod: Pod = serde_json::from_str(&json).expect("deserialized");
            pod.metadata.resource_version = Some((i + 1).to_string());
            pod
        })
        .collect()
}

/// Lists `count` Pods into an informer (and a controller over it, when
/// `controller`) and prints the heap held beyond the Pods, per Pod.
pub async fn run(count: usize, controller: bool) {
    let before = live();
    let objects = pods(count);
    let of_objects = live() - before;
    let source = Listed(std::sync::Mutex::new(Some(objects)));
    let informer = Informer::builder(source).build().expect("an informer");
    let stop = CancellationToken::new();
    let seen = Arc::new(Seen::default());
    let running = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    let controlling = controller.then(|| {
        let controller = Controller::builder("count", &informer, Count(Arc::clone(&seen)))
            .build()
            .expect("a controller");
        tokio::spawn(controller.run(stop.clone()))
    });
    informer
        .wait_synced(Duration::from_secs(60))
        .await
        .expect("synced");
    if controlling.is_some() {
        while seen.count() < count {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = live() - before;
    println!(
        "{count} pods: the objects {:.0} B each; held with {} {:.0} B each ({:+.0} B)",
        of_objects as f64 / count as f64,
        if controller {
            "a controller"
        } else {
            "an informer"
        },
        held as f64 / count as f64,
        (held - of_objects) as f64 / count as f64,
    );
    stop.cancel();
    drop((running, controlling));
}
