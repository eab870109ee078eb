//! The memory backend: revisions, optimistic concurrency, generations,
//! history, compaction, bookmarks and fault injection.

#[path = "../support/mod.rs"]
mod support;

use std::num::NonZeroUsize;
use std::time::Duration;

use futures::StreamExt;
use tend::client::ClientError;
use tend::memory::{FaultError, Faults, InjectedFault, MemoryStore};
use tend::{Change, Revision, Source, SourceError, WatchStream};

use support::{Pod, within};

mod faults;
mod seeding;
mod watch;
mod writes;

const STEP: Duration = Duration::from_secs(5);

fn store() -> MemoryStore<Pod> {
    MemoryStore::new("pods")
}

/// Reads `n` items from a watch, failing the test if they do not come.
async fn take(stream: &mut WatchStream<Pod>, n: usize) -> Vec<Result<Change<Pod>, SourceError>> {
    let mut items = Vec::new();
    for _ in 0..n {
        let item = within("a watch item", STEP, stream.next()).await;
        items.push(item.expect("watch ended early"));
    }
    items
}

/// A compact description of a change: `+name@rev`, `-name@rev`, `#rev`.
fn describe(change: &Change<Pod>) -> String {
    match change {
        Change::Applied(pod) => format!("+{}@{}", pod.name, pod.version),
        Change::Deleted { key, revision } => format!("-{key}@{revision}"),
        Change::Bookmark(revision) => format!("#{revision}"),
    }
}

fn describe_all(items: &[Result<Change<Pod>, SourceError>]) -> Vec<String> {
    items
        .iter()
        .map(|item| describe(item.as_ref().expect("unexpected watch error")))
        .collect()
}
