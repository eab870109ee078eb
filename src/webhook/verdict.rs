//! What admission handlers answer: a [`Verdict`] (allow, or deny with a
//! message) and a [`Mutation`] (the object as it should be, or a patch).

use json_patch::Patch;
use kube::core::Status;
use kube::core::admission::AdmissionResponse;

/// A validating handler's answer: allow, or deny with a message, with
/// warnings either way.
///
/// A denial reaches the client that made the request as an API error whose
/// message is `admission webhook "<name>" denied the request: <message>`,
/// with the code of [`with_code`](Self::with_code) (403 Forbidden unless
/// set, as controller-runtime's `Denied`).
///
/// # Examples
///
/// ```
/// use tend::webhook::Verdict;
///
/// let verdict = Verdict::deny("replicas must be at most 10").with_warning("replicas is deprecated");
/// assert!(!verdict.is_allowed());
/// assert_eq!(verdict.message(), "replicas must be at most 10");
/// assert_eq!(verdict.code(), 403);
/// assert!(Verdict::allow().is_allowed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    allowed: bool,
    code: u16,
    reason: String,
    message: String,
    warnings: Vec<String>,
}

impl Verdict {
    /// Admits the request.
    #[must_use]
    pub fn allow() -> Self {
        Self {
            allowed: true,
            code: 200,
            reason: String::new(),
            message: String::new(),
            warnings: Vec::new(),
        }
    }

    /// Refuses the request with `message`, shown to the client
    /// (`403 Forbidden`).
    #[must_use]
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            code: 403,
            reason: "Forbidden".to_owned(),
            message: message.into(),
            warnings: Vec::new(),
        }
    }

    /// Sets the HTTP code of a denial as the client sees it (the API
    /// server raises a code below 400 to 400), and its reason (as
    /// `Status.reason`: `Invalid`, `Forbidden`, …). No effect on an allow.
    #[must_use]
    pub fn with_code(mut self, code: u16, reason: impl Into<String>) -> Self {
        if !self.allowed {
            self.code = code;
            self.reason = reason.into();
        }
        self
    }

    /// Adds a warning, shown to the client (`kubectl` prints it) whether
    /// the request is admitted or not. Keep it under 120 characters.
    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Whether the request is admitted.
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The denial's message (empty for an allow).
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The denial's code (200 for an allow).
    #[must_use]
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The warnings.
    #[must_use]
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// `response` with this verdict applied.
    pub(super) fn apply(self, mut response: AdmissionResponse) -> AdmissionResponse {
        if !self.allowed {
            response = response.deny(&self.message);
            response.result = Status::failure(&self.message, &self.reason).with_code(self.code);
        }
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        response
    }
}

/// A mutating handler's answer: the object as it should be stored (tend
/// computes the JSON patch), a patch of your own, no change, or a denial.
///
/// With [`Mutation::object`], the patch is the difference between the
/// request's object *as your type decoded it* and the object you return,
/// both encoded by your type: fields your type does not know are not
/// touched (a patch against the raw request would remove them).
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::webhook::{AdmissionRequest, Mutation};
///
/// async fn add_owner_label(request: AdmissionRequest<ConfigMap>) -> Mutation<ConfigMap> {
///     let Some(mut map) = request.object else { return Mutation::unchanged() };
///     map.metadata.labels.get_or_insert_default().insert("owner".into(), "team-a".into());
///     Mutation::object(map).with_warning("labelled owner=team-a")
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Mutation<K> {
    pub(super) verdict: Verdict,
    pub(super) change: Change<K>,
}

/// What a [`Mutation`] changes.
#[derive(Debug, Clone)]
pub(super) enum Change<K> {
    None,
    Object(K),
    Patch(Patch),
}

impl<K> Mutation<K> {
    /// Admits the request unchanged.
    #[must_use]
    pub fn unchanged() -> Self {
        Self {
            verdict: Verdict::allow(),
            change: Change::None,
        }
    }

    /// Admits the request with `object` in place of the request's object.
    #[must_use]
    pub fn object(object: K) -> Self {
        Self {
            verdict: Verdict::allow(),
            change: Change::Object(object),
        }
    }

    /// Admits the request with `patch` (RFC 6902) applied to its object.
    #[must_use]
    pub fn patch(patch: Patch) -> Self {
        Self {
            verdict: Verdict::allow(),
            change: Change::Patch(patch),
        }
    }

    /// Refuses the request with `message` (as [`Verdict::deny`]).
    #[must_use]
    pub fn deny(message: impl Into<String>) -> Self {
        Self::denied(Verdict::deny(message))
    }

    /// Answers `verdict`: a denial changes nothing; an allow is
    /// [`unchanged`](Self::unchanged) with its warnings.
    #[must_use]
    pub fn denied(verdict: Verdict) -> Self {
        Self {
            verdict,
            change: Change::None,
        }
    }

    /// Adds a warning for the client (as [`Verdict::with_warning`]).
    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.verdict = self.verdict.with_warning(warning);
        self
    }

    /// Whether the request is admitted.
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.verdict.is_allowed()
    }
}
