//! Injected delivery faults.

use super::*;

/// Opens a watch from zero with `faults` on 200 writes and describes what it
/// delivers until it catches up.
async fn faulty_delivery(faults: Faults) -> Vec<String> {
    let store = store();
    store.set_faults(faults).unwrap();
    for i in 0..200 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    store.bookmark();
    let mut seen = Vec::new();
    loop {
        let item = within("a watch item", STEP, stream.next())
            .await
            .unwrap()
            .unwrap();
        if let Change::Bookmark(_) = item {
            return seen;
        }
        seen.push(describe(&item));
    }
}

#[tokio::test(start_paused = true)]
async fn faults_are_reproducible_from_the_seed() {
    let faults = |seed| Faults {
        seed,
        drop: 0.3,
        duplicate: 0.1,
        reorder: 0.1,
        cut_after: None,
        delay: None,
    };
    let first = faulty_delivery(faults(42)).await;
    assert_eq!(
        first,
        faulty_delivery(faults(42)).await,
        "same seed, same faults"
    );
    assert_ne!(
        first,
        faulty_delivery(faults(43)).await,
        "another seed, other faults"
    );

    let revisions: Vec<u64> = first
        .iter()
        .map(|change| change.rsplit('@').next().unwrap().parse().unwrap())
        .collect();
    let mut unique = revisions.clone();
    unique.sort_unstable();
    unique.dedup();
    assert!(
        unique.len() < 170,
        "about 30 % dropped, got {} of 200",
        unique.len()
    );
    assert!(revisions.len() > unique.len(), "some duplicated");
    assert!(
        revisions.windows(2).any(|pair| pair[1] < pair[0]),
        "some reordered"
    );
}

#[tokio::test(start_paused = true)]
async fn drop_everything_and_duplicate_everything() {
    let all_dropped = faulty_delivery(Faults {
        drop: 1.0,
        ..Faults::default()
    })
    .await;
    assert!(all_dropped.is_empty());
    let doubled = faulty_delivery(Faults {
        duplicate: 1.0,
        ..Faults::default()
    })
    .await;
    assert_eq!(doubled.len(), 400);
    assert_eq!(doubled[0], doubled[1]);
}

#[test]
fn fault_probabilities_outside_zero_to_one_are_refused() {
    let store = store();
    for (faults, name) in [
        (
            Faults {
                drop: 1.5,
                ..Faults::default()
            },
            "drop",
        ),
        (
            Faults {
                duplicate: -0.1,
                ..Faults::default()
            },
            "duplicate",
        ),
        (
            Faults {
                reorder: f64::NAN,
                ..Faults::default()
            },
            "reorder",
        ),
    ] {
        let error = store.set_faults(faults).unwrap_err();
        let FaultError::InvalidProbability { name: field, .. } = &error else {
            panic!("unexpected error {error}");
        };
        assert_eq!(*field, name);
        assert!(
            error
                .to_string()
                .starts_with(&format!("fault probability `{name}` must be within 0..=1"))
        );
    }
}
