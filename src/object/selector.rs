//! `LabelSelector`: which objects a set of label requirements selects, in
//! Kubernetes' syntax and meaning, for every backend.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// Label requirements, all of which an object's labels must meet.
///
/// The syntax and meaning are Kubernetes' (`kubectl -l`): `app=web` (or
/// `app==web`), `tier!=db` (also met by an object without `tier`),
/// `env in (prod,staging)`, `env notin (dev)` (also met without `env`),
/// `legacy` (the label exists) and `!legacy` (it does not), separated by
/// commas. The empty selector selects everything; an object without
/// labels ([`Object::labels`](crate::Object::labels) is `None`) has none.
///
/// Where it differs from Kubernetes' parser: `in` and `notin` need a
/// space before their `(`; an empty set (`in ()`) is refused, where
/// Kubernetes reads it as the empty value; keys and values are checked
/// for their characters only (letters, digits, `-_.`, and `/` in keys),
/// not for Kubernetes' lengths and qualified-name shape; `gt`/`lt` are
/// not supported; two selectors are equal when they list the same
/// requirements in the same order. The builder methods do not check
/// their keys and values.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use tend::LabelSelector;
///
/// let selector: LabelSelector = "app=web, env in (prod, staging), !legacy".parse()?;
/// let labels = BTreeMap::from([("app".to_owned(), "web".to_owned()), ("env".to_owned(), "prod".to_owned())]);
/// assert!(selector.matches(Some(&labels)));
/// assert!(!selector.matches(None)); // no `app`
/// assert_eq!(LabelSelector::new().equal("app", "web"), "app=web".parse()?);
/// assert!("app in ()".parse::<LabelSelector>().is_err()); // an empty set
/// # Ok::<(), tend::SelectorError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One requirement on one label.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    test: Test,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Test {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

/// A label selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
#[non_exhaustive]
pub struct SelectorError {
    /// The selector given.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

impl LabelSelector {
    /// The empty selector: selects every object.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Also requires the label `key` to be `value`.
    #[must_use]
    pub fn equal(self, key: &str, value: &str) -> Self {
        self.with(key, Test::In(BTreeSet::from([value.to_owned()])))
    }

    /// Also requires the label `key` not to be `value` (met without it).
    #[must_use]
    pub fn not_equal(self, key: &str, value: &str) -> Self {
        self.with(key, Test::NotIn(BTreeSet::from([value.to_owned()])))
    }

    /// Also requires the label `key` to be one of `values` (none: nothing
    /// is selected).
    #[must_use]
    pub fn one_of<'a>(self, key: &str, values: impl IntoIterator<Item = &'a str>) -> Self {
        self.with(key, Test::In(owned(values)))
    }

    /// Also requires the label `key` to be none of `values` (met without it).
    #[must_use]
    pub fn none_of<'a>(self, key: &str, values: impl IntoIterator<Item = &'a str>) -> Self {
        self.with(key, Test::NotIn(owned(values)))
    }

    /// Also requires the label `key` to exist, with any value.
    #[must_use]
    pub fn exists(self, key: &str) -> Self {
        self.with(key, Test::Exists)
    }

    /// Also requires the label `key` not to exist.
    #[must_use]
    pub fn does_not_exist(self, key: &str) -> Self {
        self.with(key, Test::DoesNotExist)
    }

    fn with(mut self, key: &str, test: Test) -> Self {
        let key = key.to_owned();
        self.requirements.push(Requirement { key, test });
        self
    }

    /// Whether labels `labels` meet every requirement.
    #[must_use]
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.requirements.iter().all(|requirement| {
            let value = labels.and_then(|labels| labels.get(&requirement.key));
            match (&requirement.test, value) {
                (Test::In(values), Some(value)) => values.contains(value),
                (Test::NotIn(values), Some(value)) => !values.contains(value),
                (Test::Exists, Some(_)) | (Test::NotIn(_) | Test::DoesNotExist, None) => true,
                (Test::In(_) | Test::Exists, None) | (Test::DoesNotExist, Some(_)) => false,
            }
        })
    }
}

fn owned<'a>(values: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    values.into_iter().map(str::to_owned).collect()
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(selector: &str) -> Result<Self, SelectorError> {
        let fail = |reason: &str| SelectorError {
            selector: selector.to_owned(),
            reason: reason.to_owned(),
        };
        // Tabs and newlines are whitespace, as in Kubernetes.
        let spaced: String = selector
            .chars()
            .map(|c| if c.is_whitespace() { ' ' } else { c })
            .collect();
        let mut parsed = Self::new();
        for term in split_terms(&spaced).map_err(&fail)? {
            let (key, test) = parse_term(term).map_err(|reason| fail(&reason))?;
            parsed = parsed.with(key, test);
        }
        Ok(parsed)
    }
}

/// The comma-separated terms, commas inside `( )` kept; none for a blank
/// selector.
fn split_terms(selector: &str) -> Result<Vec<&str>, &'static str> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    let (mut terms, mut start, mut depth) = (Vec::new(), 0, 0u32);
    for (at, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("a `(` inside a set"),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a `)` without its `(`"),
            ',' if depth == 0 => {
                terms.push(&selector[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a `(` without its `)`");
    }
    terms.push(&selector[start..]);
    Ok(terms)
}

/// One term: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (..)`, `k notin (..)`.
fn parse_term(term: &str) -> Result<(&str, Test), String> {
    let term = term.trim();
    if let Some((key, values)) = split_set(term, " notin ")? {
        return Ok((key, Test::NotIn(values)));
    }
    if let Some((key, values)) = split_set(term, " in ")? {
        return Ok((key, Test::In(values)));
    }
    let equality = [("!=", false), ("==", true), ("=", true)];
    for (operator, equal) in equality {
        if let Some((key, value)) = term.split_once(operator) {
            let (key, value) = (checked_key(key)?, checked_value(value)?);
            let values = BTreeSet::from([value]);
            let test = if equal {
                Test::In(values)
            } else {
                Test::NotIn(values)
            };
            return Ok((key, test));
        }
    }
    match term.strip_prefix('!') {
        Some(key) => Ok((checked_key(key)?, Test::DoesNotExist)),
        None => Ok((checked_key(term)?, Test::Exists)),
    }
}

/// `key OP (a, b)` split at `operator`; `None` when the term has no such
/// operator.
fn split_set<'a>(
    term: &'a str,
    operator: &str,
) -> Result<Option<(&'a str, BTreeSet<String>)>, String> {
    let Some((key, set)) = term.split_once(operator) else {
        return Ok(None);
    };
    let set = set.trim();
    let inner = set
        .strip_prefix('(')
        .and_then(|set| set.strip_suffix(')'))
        .ok_or_else(|| format!("the set after `{}` is not in `( )`", operator.trim()))?;
    let values = inner
        .split(',')
        .map(checked_value)
        .collect::<Result<BTreeSet<_>, _>>()?;
    if values.iter().all(String::is_empty) {
        return Err(format!("an empty set after `{}`", operator.trim()));
    }
    Ok(Some((checked_key(key)?, values)))
}

fn checked_key(key: &str) -> Result<&str, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if valid {
        Ok(key)
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

fn checked_value(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        Ok(value.to_owned())
    } else {
        Err(format!("{value:?} is not a label value"))
    }
}

/// The Kubernetes syntax, which [`FromStr`] reads back.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |values: &BTreeSet<String>| values.iter().cloned().collect::<Vec<_>>().join(",");
        for (n, Requirement { key, test }) in self.requirements.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            match test {
                Test::In(values) if values.len() == 1 => write!(f, "{key}={}", set(values))?,
                Test::NotIn(values) if values.len() == 1 => write!(f, "{key}!={}", set(values))?,
                Test::In(values) => write!(f, "{key} in ({})", set(values))?,
                Test::NotIn(values) => write!(f, "{key} notin ({})", set(values))?,
                Test::Exists => f.write_str(key)?,
                Test::DoesNotExist => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        let selector: LabelSelector = selector.parse().expect("valid");
        selector.matches(Some(&labels(pairs)))
    }

    #[test]
    fn each_operator_means_what_kubernetes_means() {
        assert!(selects("app=web", &[("app", "web")]));
        assert!(selects("app==web", &[("app", "web")]));
        assert!(!selects("app=web", &[("app", "api")]));
        assert!(selects("app!=web", &[]), "met without the label");
        assert!(!selects("app!=web", &[("app", "web")]));
        assert!(selects("env in (prod, staging)", &[("env", "staging")]));
        assert!(
            selects("env\tin\t(prod)", &[("env", "prod")]),
            "a tab is a space"
        );
        assert!(!selects("env in (prod)", &[]));
        assert!(selects("env notin (dev)", &[]), "met without the label");
        assert!(!selects("env notin (dev,test)", &[("env", "test")]));
        assert!(selects("legacy", &[("legacy", "")]));
        assert!(selects("!legacy", &[("app", "web")]));
        assert!(!selects("!legacy", &[("legacy", "yes")]));
        assert!(selects("", &[]), "the empty selector selects everything");
        assert!(selects("a=1,b in (2,3),!c", &[("a", "1"), ("b", "3")]));
        assert!(!selects(
            "a=1,b in (2,3),!c",
            &[("a", "1"), ("b", "3"), ("c", "")]
        ));
    }

    #[test]
    fn an_object_without_labels_meets_only_negative_requirements() {
        let negative: LabelSelector = "a!=1,b notin (2),!c".parse().expect("valid");
        assert!(negative.matches(None));
        assert!(!LabelSelector::new().exists("a").matches(None));
        assert!(LabelSelector::new().matches(None));
    }

    #[test]
    fn malformed_selectors_are_typed_errors() {
        for bad in [
            "app in ()",
            "app in (web",
            "app in web",
            "app in ((web))",
            "env)",
            "=web",
            "app=w b",
            "app=web,",
            "a b",
            "!",
        ] {
            let error = bad.parse::<LabelSelector>().expect_err(bad);
            assert_eq!(error.selector, bad);
        }
    }

    #[test]
    fn display_reads_back_as_the_same_selector() {
        let selector: LabelSelector =
            "app=web,tier!=db,env in (prod,staging),env notin (dev,test),x,!y"
                .parse()
                .expect("valid");
        let shown = selector.to_string();
        assert_eq!(shown.parse::<LabelSelector>(), Ok(selector));
        let none = LabelSelector::new().one_of("a", []);
        assert!(
            !none.matches(Some(&labels(&[("a", "1")]))),
            "selects nothing"
        );
    }
}
