//! What tend's own API needs is reachable through tend: no extra dependency
//! to implement `Source` or to stop a `run`.

use tend::{Revision, SourceError};

#[test]
fn expired_names_both_revisions_and_is_expired() {
    let error = SourceError::expired(Revision::new(3), Revision::new(10));
    assert!(error.is_expired());
    assert!(matches!(
        error,
        SourceError::Expired { requested, compacted }
            if requested == Revision::new(3) && compacted == Revision::new(10)
    ));
    assert!(!SourceError::unavailable("down").is_expired());
}

#[test]
fn the_cancellation_token_is_tokio_utils() {
    // The same type `run` takes, so tokens from either path mix.
    let token: tokio_util::sync::CancellationToken = tend::CancellationToken::new();
    token.cancel();
    assert!(token.is_cancelled());
}
