//! A Kubernetes `LabelSelector` (`matchLabels` and `matchExpressions`, as
//! a custom resource's `spec.selector` holds it) as tend's [`LabelSelector`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::object::{LabelSelector, SelectorError};

/// Reads a Kubernetes selector: `matchLabels` as equalities, then each
/// expression (`In`, `NotIn`, `Exists`, `DoesNotExist`).
///
/// # Errors
///
/// [`SelectorError`] for an unknown operator, an `In` or `NotIn` without
/// values, or an `Exists` or `DoesNotExist` with some, as the API server
/// refuses them.
///
/// # Examples
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
/// use tend::LabelSelector;
///
/// let spec: meta::LabelSelector = serde_json::from_value(serde_json::json!({
///     "matchLabels": { "app": "web" },
///     "matchExpressions": [{ "key": "tier", "operator": "NotIn", "values": ["cache"] }],
/// }))?;
/// let selector = LabelSelector::try_from(&spec)?;
/// assert_eq!(selector, "app=web,tier notin (cache)".parse()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl TryFrom<&meta::LabelSelector> for LabelSelector {
    type Error = SelectorError;

    fn try_from(selector: &meta::LabelSelector) -> Result<Self, SelectorError> {
        let equalities = selector.match_labels.iter().flatten();
        let mut parsed =
            equalities.fold(Self::new(), |parsed, (key, value)| parsed.equal(key, value));
        for expression in selector.match_expressions.iter().flatten() {
            parsed = with_expression(parsed, expression)?;
        }
        Ok(parsed)
    }
}

fn with_expression(
    parsed: LabelSelector,
    expression: &meta::LabelSelectorRequirement,
) -> Result<LabelSelector, SelectorError> {
    let key = expression.key.as_str();
    let values = expression.values.as_deref().unwrap_or_default();
    let values = values.iter().map(String::as_str);
    let fail = |reason: &str| SelectorError {
        selector: format!("{key} {} {:?}", expression.operator, expression.values),
        reason: reason.to_owned(),
    };
    let known = ["In", "NotIn", "Exists", "DoesNotExist"];
    if !known.contains(&expression.operator.as_str()) {
        return Err(fail("unknown operator"));
    }
    let needs_values = matches!(expression.operator.as_str(), "In" | "NotIn");
    if needs_values == (values.len() == 0) {
        return Err(fail(if needs_values {
            "`In` and `NotIn` need values"
        } else {
            "`Exists` and `DoesNotExist` take no values"
        }));
    }
    match expression.operator.as_str() {
        "In" => Ok(parsed.one_of(key, values)),
        "NotIn" => Ok(parsed.none_of(key, values)),
        "Exists" => Ok(parsed.exists(key)),
        "DoesNotExist" => Ok(parsed.does_not_exist(key)),
        _ => Err(fail("unknown operator")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: serde_json::Value) -> Result<LabelSelector, SelectorError> {
        let selector: meta::LabelSelector = serde_json::from_value(json).expect("a selector");
        LabelSelector::try_from(&selector)
    }

    #[test]
    fn every_operator_reads_as_its_requirement() {
        let all = read(serde_json::json!({
            "matchLabels": { "app": "web" },
            "matchExpressions": [
                { "key": "env", "operator": "In", "values": ["prod", "staging"] },
                { "key": "tier", "operator": "NotIn", "values": ["cache"] },
                { "key": "team", "operator": "Exists" },
                { "key": "legacy", "operator": "DoesNotExist" },
            ],
        }));
        let expected = "app=web,env in (prod,staging),tier!=cache,team,!legacy".parse();
        assert_eq!(all, expected);
        assert_eq!(read(serde_json::json!({})), Ok(LabelSelector::new()));
    }

    #[test]
    fn what_the_api_server_refuses_is_an_error() {
        for expression in [
            serde_json::json!({ "key": "a", "operator": "In", "values": [] }),
            serde_json::json!({ "key": "a", "operator": "NotIn" }),
            serde_json::json!({ "key": "a", "operator": "Exists", "values": ["x"] }),
            serde_json::json!({ "key": "a", "operator": "Gt", "values": ["1"] }),
        ] {
            let selector = serde_json::json!({ "matchExpressions": [expression] });
            assert!(read(selector).is_err(), "{expression}");
        }
    }
}
