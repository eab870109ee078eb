//! `LabelSelector`: which objects a set of label requirements selects, in
//! Kubernetes' syntax and meaning, for every backend.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

mod parse;

/// Label requirements, all of which an object's labels must meet.
///
/// The syntax and meaning are Kubernetes' (`kubectl -l`, read as the
/// API server's parser reads it): `app=web` (or `app==web`), `tier!=db`
/// (also met by an object without `tier`), `env in (prod,staging)`,
/// `env notin (dev)` (also met without `env`), `legacy` (the label
/// exists), `!legacy` (it does not), `replicas>2` and `replicas<5` (the
/// label is an integer above or below), separated by commas; whitespace
/// between tokens is free. An empty slot in a set, and nothing after `=`,
/// is the empty value (`env in ()` selects `env=""`). Keys must be
/// qualified names (`name` or `prefix/name`: at most 63 of letters,
/// digits and `-_.`, beginning and ending alphanumeric; the prefix a DNS
/// subdomain of at most 253), values label values (the same, or empty).
/// The empty selector selects everything; an object without labels
/// ([`Object::labels`](crate::Object::labels) is `None`) has none.
///
/// Two selectors are equal when they list the same requirements in the
/// same order. The builder methods do not check their keys and values.
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
/// assert!("app in (web".parse::<LabelSelector>().is_err()); // no `)`
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
    /// The label exists and is an integer above this one.
    Greater(i64),
    /// The label exists and is an integer below this one.
    Less(i64),
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

    /// Also requires the label `key` to be an integer greater than `than`
    /// (Kubernetes' `key>than`; not met without it, or if not an integer).
    #[must_use]
    pub fn greater_than(self, key: &str, than: i64) -> Self {
        self.with(key, Test::Greater(than))
    }

    /// Also requires the label `key` to be an integer less than `than`
    /// (`key<than`).
    #[must_use]
    pub fn less_than(self, key: &str, than: i64) -> Self {
        self.with(key, Test::Less(than))
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
            let number = || value.and_then(|value| value.parse::<i64>().ok());
            match (&requirement.test, value) {
                (Test::In(values), Some(value)) => values.contains(value),
                (Test::NotIn(values), Some(value)) => !values.contains(value),
                (Test::Exists, Some(_)) | (Test::NotIn(_) | Test::DoesNotExist, None) => true,
                (Test::In(_) | Test::Exists, None) | (Test::DoesNotExist, Some(_)) => false,
                (Test::Greater(than), _) => number().is_some_and(|n| n > *than),
                (Test::Less(than), _) => number().is_some_and(|n| n < *than),
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
        let requirements = parse::requirements(selector).map_err(|reason| SelectorError {
            selector: selector.to_owned(),
            reason,
        })?;
        let requirements = requirements
            .into_iter()
            .map(|(key, test)| Requirement { key, test })
            .collect();
        Ok(Self { requirements })
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
                Test::Greater(than) => write!(f, "{key}>{than}")?,
                Test::Less(than) => write!(f, "{key}<{than}")?,
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
            "app in (a b)",
            "app in (a)b",
            "in=web",
            "app=web=x",
            "app>x",
            "app<",
            "!app=web",
            "envin (a)",
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
    fn the_syntax_is_read_as_the_api_servers_parser_reads_it() {
        assert!(
            selects("env in(prod)", &[("env", "prod")]),
            "no space before `(`"
        );
        assert!(selects("env   in   (  prod ,dev )", &[("env", "dev")]));
        assert!(selects("app = web", &[("app", "web")]));
        assert!(
            selects("env in ()", &[("env", "")]),
            "() is the empty value"
        );
        assert!(!selects("env in ()", &[("env", "prod")]));
        assert!(selects("env in (,prod)", &[("env", "")]), "an empty slot");
        assert!(selects("env in (prod,)", &[("env", "")]));
        assert!(selects("app=", &[("app", "")]), "nothing after `=`");
        assert!(selects("app=,b", &[("app", ""), ("b", "1")]));
        assert!(
            selects("a=in,b in (notin)", &[("a", "in"), ("b", "notin")]),
            "keywords are values there"
        );
        assert!(selects(
            "example.com/team=shop",
            &[("example.com/team", "shop")]
        ));
    }

    #[test]
    fn greater_and_less_compare_integers() {
        assert!(selects("replicas>2", &[("replicas", "3")]));
        assert!(!selects("replicas>2", &[("replicas", "2")]));
        assert!(
            !selects("replicas>2", &[("replicas", "many")]),
            "not an integer"
        );
        assert!(!selects("replicas>2", &[]), "not met without the label");
        assert!(selects("replicas<-1", &[("replicas", "-5")]));
        assert!(selects(
            &format!("n<{}", i64::MAX),
            &[("n", &i64::MIN.to_string())]
        ));
        assert!(
            "n>9223372036854775808".parse::<LabelSelector>().is_err(),
            "beyond i64"
        );
        assert_eq!(
            LabelSelector::new().greater_than("n", 2),
            "n > 2".parse().expect("valid")
        );
    }

    #[test]
    fn keys_and_values_are_checked_as_the_api_server_checks_them() {
        let long = "a".repeat(63);
        for good in [long.as_str(), "a.b_c-d", "A1", "x.io/name", "a-b.c-d/e"] {
            assert!(good.parse::<LabelSelector>().is_ok(), "{good:?}");
            assert!(
                format!("k={good}").parse::<LabelSelector>().is_ok() || good.contains('/'),
                "{good:?}"
            );
        }
        let too_long = "a".repeat(64);
        let longest_prefix = format!("{}a/b", "a.".repeat(126)); // 253
        assert!(longest_prefix.parse::<LabelSelector>().is_ok());
        let long_prefix = format!("{}a/b", "a.".repeat(127));
        for bad in [
            too_long.as_str(),
            "-a",
            "a-",
            "_a",
            "a/b/c",
            "/a",
            "a/",
            "Upper.io/a",
            "a..b/c",
            long_prefix.as_str(),
        ] {
            let error = bad.parse::<LabelSelector>().expect_err(bad);
            assert!(error.reason.contains("key"), "{bad:?}: {}", error.reason);
        }
        for bad in [too_long.as_str(), "-v", "v-", "a/b", "v.", "ü"] {
            let selector = format!("k={bad}");
            let error = selector.parse::<LabelSelector>().expect_err(&selector);
            assert!(
                error.reason.contains("value"),
                "{selector:?}: {}",
                error.reason
            );
        }
    }

    #[test]
    fn display_reads_back_as_the_same_selector() {
        let selector: LabelSelector =
            "app=web,tier!=db,env in (prod,staging),env notin (dev,test),x,!y,n>3,m<-4,e in ()"
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

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn bad_bytes_never_panic_the_parser_and_what_parses_reads_back(
            text in crate::fuzz::text_near(&[
                "app=web,tier!=db,x",
                "env in (prod, staging),!legacy",
                "example.com/team notin (a,,b), n>3, m<-4, e in ()",
            ])
        ) {
            if let Ok(selector) = text.parse::<LabelSelector>() {
                proptest::prop_assert_eq!(selector.to_string().parse::<LabelSelector>(), Ok(selector));
            }
        }
    }
}
