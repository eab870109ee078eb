//! A fenced recorder sends nothing with a stale token; `emit` returns at
//! once, a background task sends, a full queue drops and counts.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tend::client::{Fencing, FencingToken};

use super::*;

/// A fencing authority whose current token the test sets.
#[derive(Clone, Default)]
struct Term(Arc<AtomicU64>);

impl Fencing for Term {
    fn is_current(&self, token: FencingToken) -> bool {
        self.0.load(Ordering::SeqCst) == token.get()
    }
}

async fn flush(recorder: &Recorder) {
    within("a flush", LIMIT, recorder.flush()).await;
}

#[tokio::test]
async fn a_stale_token_publishes_nothing_and_a_current_one_publishes() {
    let (client, ns, map) = setup("events-fenced").await;
    let term = Term::default();
    term.0.store(1, Ordering::SeqCst);
    let fenced = recorder(&client).fenced_by(&term);
    let leader = fenced.with_token(Some(FencingToken::new(1)));
    publish(&leader, &map, &event("while leading")).await;
    leader
        .emit(&map, &event("emitted while leading"))
        .expect("queued");
    flush(&leader).await;
    assert_eq!(events(&client, &ns).await.len(), 2);

    term.0.store(2, Ordering::SeqCst); // deposed
    let refused = within("a publish", LIMIT, leader.publish(&map, &event("deposed"))).await;
    assert!(
        matches!(refused, Err(EventError::Fenced { token }) if token.get() == 1),
        "{refused:?}"
    );
    leader
        .emit(&map, &event("emitted deposed"))
        .expect("queued");
    flush(&leader).await;
    let notes: Vec<_> = events(&client, &ns)
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(
        notes,
        ["while leading", "emitted while leading"],
        "nothing sent once deposed"
    );
    let stats = leader.emit_stats();
    assert_eq!((stats.published, stats.dropped_fenced), (1, 1), "{stats:?}");

    let unfenced = recorder(&client).with_token(Some(FencingToken::new(1)));
    let refused = within("a publish", LIMIT, unfenced.publish(&map, &event("x"))).await;
    assert!(matches!(refused, Err(EventError::NoFencing)), "{refused:?}");
}

#[tokio::test]
async fn emit_returns_at_once_and_a_full_queue_drops_and_counts() {
    let (client, ns, map) = setup("events-queued").await;
    let recorder = recorder(&client).queue_capacity(NonZeroUsize::new(4).expect("not zero"));
    // A current-thread runtime: the sending task cannot run before the
    // first await, so the queue holds 4 and the other 6 are dropped.
    let outcomes: Vec<_> = (0..10)
        .map(|n| recorder.emit(&map, &event(&format!("event {n}"))))
        .collect();
    let full = outcomes
        .iter()
        .filter(|o| matches!(o, Err(EventError::QueueFull)))
        .count();
    assert_eq!(full, 6, "{outcomes:?}");
    flush(&recorder).await;
    let stats = recorder.emit_stats();
    let counts = (
        stats.published,
        stats.dropped_full,
        stats.dropped_fenced,
        stats.failed,
    );
    assert_eq!(counts, (4, 6, 0, 0), "{stats:?}");
    assert_eq!(events(&client, &ns).await.len(), 4);
    let invalid = Occurrence {
        reason: String::new(),
        ..event("no reason")
    };
    assert!(matches!(
        recorder.emit(&map, &invalid),
        Err(EventError::Invalid { .. })
    ));
}

#[tokio::test]
async fn emit_outside_a_runtime_is_a_typed_error() {
    let (client, _, map) = setup("events-no-runtime").await;
    let recorder = recorder(&client);
    let emitted = std::thread::spawn(move || recorder.emit(&map, &event("x")))
        .join()
        .expect("the thread ran");
    assert!(matches!(emitted, Err(EventError::NoRuntime)), "{emitted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorder_outliving_the_runtime_of_its_first_emit_still_sends() {
    let (client, ns, map) = setup("events-runtimes").await;
    let recorder = recorder(&client);
    for n in 0..2 {
        // A runtime of its own, dropped after the emit: its sending task ends.
        let (recorder, map) = (recorder.clone(), map.clone());
        let sent = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                recorder.emit(&map, &event(&format!("from runtime {n}")))?;
                within("a flush", LIMIT, recorder.flush()).await;
                Ok::<_, EventError>(())
            })
        });
        sent.join().expect("the thread ran").expect("emitted");
    }
    assert_eq!(
        recorder.emit_stats().published,
        2,
        "{:?}",
        recorder.emit_stats()
    );
    assert_eq!(events(&client, &ns).await.len(), 2);
}
