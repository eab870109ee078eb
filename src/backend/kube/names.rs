//! Kubernetes' rules for object names (RFC 1123), checked before a request
//! so that a bad name is a typed error at build time, not a `422` later.

/// The longest DNS subdomain name (most object names).
pub(crate) const MAX_SUBDOMAIN: usize = 253;

/// The longest DNS label (a namespace's name).
const MAX_LABEL: usize = 63;

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters of
/// lower-case letters, digits, `-` and `.`, each dot-separated part
/// starting and ending with a letter or digit.
pub(crate) fn is_subdomain(name: &str) -> bool {
    name.len() <= MAX_SUBDOMAIN && name.split('.').all(is_label_part)
}

/// Whether `name` is a DNS-1123 label (a namespace): at most 63
/// characters of lower-case letters, digits and `-`, starting and ending
/// with a letter or digit.
pub(crate) fn is_label(name: &str) -> bool {
    name.len() <= MAX_LABEL && is_label_part(name)
}

fn is_label_part(part: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    part.starts_with(alphanumeric)
        && part.ends_with(alphanumeric)
        && part.chars().all(|c| alphanumeric(c) || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc_1123() {
        for good in ["a", "my-operator", "x.y-z.0", &"a".repeat(253)] {
            assert!(is_subdomain(good), "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", &"a".repeat(254)] {
            assert!(!is_subdomain(bad), "{bad}");
        }
        assert!(is_label("kube-system") && is_label(&"a".repeat(63)));
        for bad in ["", "a.b", "Default", &"a".repeat(64)] {
            assert!(!is_label(bad), "{bad}");
        }
    }
}
