//! The validating webhook: a website with an invalid spec is refused
//! before it is stored, with a message the user sees.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tend::webhook::{AdmissionRequest, Verdict, Webhook};

use crate::website::{Website, invalid};

/// The path the API server calls.
pub const PATH: &str = "/validate-websites";

/// How many reviews the webhook answered, and how many it refused.
#[derive(Debug, Default)]
pub struct Reviews {
    pub answered: AtomicUsize,
    pub denied: AtomicUsize,
}

impl Reviews {
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::Relaxed)
    }

    pub fn denied(&self) -> usize {
        self.denied.load(Ordering::Relaxed)
    }
}

/// The webhook, counting into `reviews`.
pub fn validating(reviews: Arc<Reviews>) -> Webhook {
    Webhook::validating(move |request: AdmissionRequest<Website>| {
        let reviews = Arc::clone(&reviews);
        async move {
            reviews.answered.fetch_add(1, Ordering::Relaxed);
            // A delete has no new object: nothing to check.
            let Some(site) = request.object else {
                return Verdict::allow();
            };
            match invalid(&site.spec) {
                Some(why) => {
                    reviews.denied.fetch_add(1, Ordering::Relaxed);
                    Verdict::deny(why)
                }
                None => Verdict::allow(),
            }
        }
    })
}
