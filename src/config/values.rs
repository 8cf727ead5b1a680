//! Scalar readers for the configuration: YAML 1.1 booleans, Go durations, Kubernetes label syntax.
//!
//! The reference provisioner decodes its ConfigMap with a YAML 1.1 library, so `yes`, `on` and `y` are booleans
//! there; serde_yaml_ng follows YAML 1.2 and hands them to us as strings. These helpers restore the 1.1 meaning.

use std::time::Duration;

/// The YAML 1.1 spelling of a boolean, or `None` when `text` is not one.
pub fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Some(false)
        }
        _ => None,
    }
}

/// Parses a Go `time.Duration` string (`300ms`, `5m`, `1h30m`, `1.5h`, `0`). Negative durations are refused
/// because nothing in the configuration can use one.
///
/// NB: not `kube::core::Duration`'s `FromStr`: in kube 5 it multiplies an `f64` into a `std::time::Duration`,
/// which panics on an overflowing value such as `99999999999999999999h` (checked on kube-core 5.0.0), and a
/// hostile ConfigMap must never panic the agent; it also reads every number as a float, where Go does not.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let body = text.strip_prefix('+').unwrap_or(text);
    if body.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err("an empty duration".to_string());
    }
    let mut rest = body;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let (number, after_number) = split_number(rest).ok_or_else(|| bad_duration(text))?;
        let (unit_nanos, after_unit) =
            split_unit(after_number).ok_or_else(|| bad_duration(text))?;
        total_nanos += scale(number, unit_nanos).ok_or_else(|| format!("{text:?} is too long"))?;
        rest = after_unit;
    }
    let secs =
        u64::try_from(total_nanos / 1_000_000_000).map_err(|_| format!("{text:?} is too long"))?;
    // NB: the remainder is below 1e9, so the cast cannot truncate.
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

fn bad_duration(text: &str) -> String {
    format!("{text:?} is not a duration (use Go syntax such as 30s, 5m or 1h30m)")
}

/// Splits a leading decimal number (`12`, `1.5`, `.5`) into its integer and fraction digits.
fn split_number(text: &str) -> Option<((&str, &str), &str)> {
    let int_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (int, after) = text.split_at(int_len);
    let (frac, after) = match after.strip_prefix('.') {
        Some(tail) => {
            let frac_len = tail.bytes().take_while(u8::is_ascii_digit).count();
            tail.split_at(frac_len)
        }
        None => ("", after),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    Some(((int, frac), after))
}

fn split_unit(text: &str) -> Option<(u128, &str)> {
    // Longest units first so `ms` is not read as `m` followed by garbage.
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    UNITS
        .iter()
        .find_map(|(unit, nanos)| text.strip_prefix(unit).map(|rest| (*nanos, rest)))
}

fn scale((int, frac): (&str, &str), unit_nanos: u128) -> Option<u128> {
    let whole: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut nanos = whole.checked_mul(unit_nanos)?;
    let mut place = unit_nanos;
    for digit in frac.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        nanos = nanos.checked_add(u128::from(digit - b'0') * place)?;
    }
    // Keep durations representable as u64 seconds with room to spare.
    (nanos < u128::from(u64::MAX)).then_some(nanos)
}

/// Checks a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Some(format!(
            "label key {key:?} has an invalid prefix (must be a DNS subdomain)"
        ));
    }
    if name.is_empty() || name.len() > 63 || !is_label_text(name) {
        return Some(format!(
            "label key {key:?} is invalid (name part: at most 63 characters, alphanumerics, '-', '_', '.', starting \
             and ending alphanumeric)"
        ));
    }
    None
}

/// Checks a label value: empty, or at most 63 characters of the label alphabet.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || (value.len() <= 63 && is_label_text(value)) {
        return None;
    }
    Some(format!(
        "label value {value:?} is invalid (at most 63 characters, alphanumerics, '-', '_', '.', starting and ending \
         alphanumeric)"
    ))
}

fn is_label_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// RFC 1123 subdomain as Kubernetes checks object names: lowercase alphanumerics, `-` and `.`, at most 253.
pub fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes
                    .first()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && bytes
                    .last()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("yes", Some(true))]
    #[case("Yes", Some(true))]
    #[case("on", Some(true))]
    #[case("y", Some(true))]
    #[case("TRUE", Some(true))]
    #[case("no", Some(false))]
    #[case("off", Some(false))]
    #[case("N", Some(false))]
    #[case("False", Some(false))]
    #[case("1", None)]
    #[case("yep", None)]
    #[case("", None)]
    fn yaml_1_1_boolean_words_are_recognised(#[case] text: &str, #[case] expected: Option<bool>) {
        assert_eq!(yaml11_bool(text), expected);
    }

    #[rstest]
    #[case("0", Duration::ZERO)]
    #[case("5m", Duration::from_secs(300))]
    #[case("5m0s", Duration::from_secs(300))]
    #[case("300s", Duration::from_secs(300))]
    #[case("1h30m", Duration::from_secs(5400))]
    #[case("1.5h", Duration::from_secs(5400))]
    #[case(".5s", Duration::from_millis(500))]
    #[case("250ms", Duration::from_millis(250))]
    #[case("10us", Duration::from_micros(10))]
    #[case("10µs", Duration::from_micros(10))]
    #[case("7ns", Duration::from_nanos(7))]
    #[case("+2m", Duration::from_secs(120))]
    fn go_durations_parse_like_go(#[case] text: &str, #[case] expected: Duration) {
        assert_eq!(go_duration(text), Ok(expected));
    }

    #[rstest]
    #[case("")]
    #[case("5")]
    #[case("m")]
    #[case("5 m")]
    #[case("5d")]
    #[case("-5m")]
    #[case("1h-5m")]
    #[case("99999999999999999999h")]
    fn malformed_or_negative_durations_are_refused(#[case] text: &str) {
        assert!(go_duration(text).is_err(), "{text:?} was accepted");
    }

    #[rstest]
    #[case("kubernetes.io/hostname", true)]
    #[case("topology.kubernetes.io/zone", true)]
    #[case("app", true)]
    #[case("Upper_Case.ok", true)]
    #[case("bad/prefix/x", false)]
    #[case("Example.com/x", false)]
    #[case("-leading", false)]
    #[case("", false)]
    fn label_keys_follow_kubernetes_rules(#[case] key: &str, #[case] valid: bool) {
        assert_eq!(label_key_problem(key).is_none(), valid, "{key:?}");
    }

    #[rstest]
    #[case("", true)]
    #[case("fast", true)]
    #[case("a.b-c_d", true)]
    #[case("with space", false)]
    #[case("trailing-", false)]
    fn label_values_follow_kubernetes_rules(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(label_value_problem(value).is_none(), valid, "{value:?}");
    }
}
